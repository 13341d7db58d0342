package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/operator"
)

// waitTimeout bounds every wait for a daemon condition.
const waitTimeout = 20 * time.Second

// proc is a nodeld process started by a test.
type proc struct {
	t       testing.TB
	cmd     *exec.Cmd
	dataDir string
	cfgPath string
	admin   string // admin host:port, known once ready

	mu    sync.Mutex // guards lines, waits
	lines []map[string]any
	waits []logWait
	done  chan struct{} // closed when the process exited and stderr drained
	exit  error
}

type logWait struct {
	match func(map[string]any) bool
	ch    chan map[string]any
}

// startDaemon writes cfg to a file and runs nodeld on it.
func startDaemon(t *testing.T, dataDir, cfg string, extraArgs ...string) *proc {
	t.Helper()
	return startDaemonEnv(t, dataDir, cfg, nil, extraArgs...)
}

// startDaemonEnv is startDaemon with extra environment variables.
func startDaemonEnv(t *testing.T, dataDir, cfg string, env []string, extraArgs ...string) *proc {
	t.Helper()
	cfgPath := filepath.Join(t.TempDir(), "nodeld.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d := &proc{t: t, dataDir: dataDir, cfgPath: cfgPath, done: make(chan struct{})}
	args := append([]string{"run", "--config", cfgPath}, extraArgs...)
	d.cmd = exec.Command(nodeldBinary(t), args...)
	if env != nil {
		d.cmd.Env = append(os.Environ(), env...)
	}
	d.launch()
	return d
}

// launch starts d.cmd with its log read into d; the test kills it at the
// end unless it has ended.
func (d *proc) launch() {
	t := d.t
	t.Helper()
	stderr, err := d.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go d.readLogs(stderr)
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			_ = d.cmd.Process.Kill()
			<-d.done
		}
	})
}

func (d *proc) readLogs(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := parseLogLine(sc.Text())
		d.mu.Lock()
		d.lines = append(d.lines, m)
		kept := d.waits[:0]
		for _, w := range d.waits {
			if w.match(m) {
				w.ch <- m
			} else {
				kept = append(kept, w)
			}
		}
		d.waits = kept
		d.mu.Unlock()
	}
	d.exit = d.cmd.Wait()
	close(d.done)
}

// parseLogLine reads a json log line, or a console one ("time\tlevel\t
// [logger\t]message\t{fields}"), into its fields with "msg" set; other
// lines come back as {"raw": line}.
func parseLogLine(line string) map[string]any {
	var m map[string]any
	if json.Unmarshal([]byte(line), &m) == nil {
		return m
	}
	parts := strings.Split(line, "\t")
	if len(parts) < 3 {
		return map[string]any{"raw": line}
	}
	m = map[string]any{}
	msg := parts[len(parts)-1]
	if last := parts[len(parts)-1]; strings.HasPrefix(last, "{") && json.Unmarshal([]byte(last), &m) == nil {
		msg = parts[len(parts)-2]
	}
	m["msg"] = msg
	m["raw"] = line
	return m
}

// waitLog waits for a log line (past or future) whose msg is msg.
func (d *proc) waitLog(msg string) map[string]any {
	d.t.Helper()
	return d.waitLogN(msg, 1)
}

// waitLogN waits for the n-th log line whose msg is msg.
func (d *proc) waitLogN(msg string, n int) map[string]any {
	d.t.Helper()
	seen := 0
	match := func(m map[string]any) bool {
		if m["msg"] == msg {
			seen++
		}
		return seen >= n
	}
	ch := make(chan map[string]any, 1)
	d.mu.Lock()
	for _, m := range d.lines {
		if match(m) {
			d.mu.Unlock()
			return m
		}
	}
	d.waits = append(d.waits, logWait{match: match, ch: ch})
	d.mu.Unlock()
	select {
	case m := <-ch:
		return m
	case <-d.done:
		d.t.Fatalf("nodeld exited (%v) before logging %q; logs:\n%s", d.exit, msg, d.logText())
	case <-time.After(waitTimeout):
		d.t.Fatalf("no %q log line within %s; logs:\n%s", msg, waitTimeout, d.logText())
	}
	return nil
}

// countLog counts log lines whose msg is msg.
func (d *proc) countLog(msg string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, m := range d.lines {
		if m["msg"] == msg {
			n++
		}
	}
	return n
}

func (d *proc) logText() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var b strings.Builder
	for _, m := range d.lines {
		j, _ := json.Marshal(m)
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

// waitReady waits for the ready log line and /readyz.
func (d *proc) waitReady() {
	d.t.Helper()
	m := d.waitLog("ready")
	d.admin, _ = m["admin"].(string)
	if d.admin == "" {
		d.t.Fatalf("ready line has no admin address: %v", m)
	}
	if code, body := httpGet(d.t, "http://"+d.admin+"/readyz"); code != 200 {
		d.t.Fatalf("/readyz = %d %q after the ready line", code, body)
	}
}

func (d *proc) signal(sig syscall.Signal) {
	d.t.Helper()
	if err := d.cmd.Process.Signal(sig); err != nil {
		d.t.Fatal(err)
	}
}

// wait waits for the process to exit and returns its exit code.
func (d *proc) wait() int {
	d.t.Helper()
	select {
	case <-d.done:
	case <-time.After(waitTimeout):
		d.t.Fatalf("nodeld did not exit within %s; logs:\n%s", waitTimeout, d.logText())
	}
	var ee *exec.ExitError
	if errors.As(d.exit, &ee) {
		return ee.ExitCode()
	}
	if d.exit != nil {
		d.t.Fatal(d.exit)
	}
	return 0
}

func (d *proc) status() operator.StatusDoc {
	d.t.Helper()
	code, body := httpGet(d.t, "http://"+d.admin+"/v1/status")
	if code != 200 {
		d.t.Fatalf("/v1/status = %d", code)
	}
	var st operator.StatusDoc
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		d.t.Fatal(err)
	}
	return st
}

func httpGet(t testing.TB, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// runCLI runs a nodeld subcommand and returns stdout, stderr, exit code.
func runCLI(t testing.TB, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(nodeldBinary(t), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), errb.String(), 0
	case errors.As(err, &ee):
		return out.String(), errb.String(), ee.ExitCode()
	default:
		t.Fatal(err)
		return "", "", -1
	}
}

// nodeConfig is a single-node config on free ports.
func nodeConfig(dataDir, extra string) string {
	return fmt.Sprintf(`node:
  name: e2e
  data_dir: %s
log:
  level: info
  format: json
admin:
  listen: 127.0.0.1:0
inference:
  roles:
    - name: chat
      listen: 127.0.0.1:0
%s`, dataDir, extra)
}
