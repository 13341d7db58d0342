package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// echoServer is a running echo-llm process (examples/packages/echo-llm).
type echoServer struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{}
}

// startEcho runs echo-llm on addr and waits until it accepts connections.
func startEcho(t *testing.T, addr string) *echoServer {
	t.Helper()
	cmd := exec.Command(echoBinary(t), "--listen", addr, "--model", "echo-e2e")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e := &echoServer{cmd: cmd, addr: addr, done: make(chan struct{})}
	serving := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		once := false
		for sc.Scan() {
			if !once && strings.Contains(sc.Text(), "serving") {
				once = true
				close(serving)
			}
		}
		_ = cmd.Wait()
		close(e.done)
	}()
	select {
	case <-serving:
	case <-e.done:
		t.Fatalf("echo-llm on %s exited before serving", addr)
	case <-time.After(waitTimeout):
		t.Fatal("echo-llm did not start")
	}
	t.Cleanup(e.kill)
	return e
}

func (e *echoServer) kill() {
	select {
	case <-e.done:
	default:
		_ = e.cmd.Process.Signal(syscall.SIGKILL)
		<-e.done
	}
}

// TestRoleServedByAdoptedInstance is the single-node acceptance: a role
// pointed at a running OpenAI-compatible server (a real process) works
// unchanged with curl and the official openai client, streaming included;
// killing the server makes the role answer 503 within one probe interval
// (model_loading, after proxy.hold.max_wait: it was served a moment ago);
// restarting it serves again without restarting nodeld.
func TestRoleServedByAdoptedInstance(t *testing.T) {
	t.Parallel()
	upstream := freeAddr(t)
	echo := startEcho(t, upstream)
	dataDir := filepath.Join(t.TempDir(), "data")
	const interval = 500 * time.Millisecond
	d := startDaemon(t, dataDir, nodeConfig(dataDir, fmt.Sprintf(`  probe_interval: %s
  instances:
    - role: chat
      runtime: openai
      url: http://%s
proxy:
  hold:
    max_wait: 300ms
`, interval, upstream)))
	d.waitReady()
	d.waitLogN("role registered", 1)
	st := d.status()
	role := st.Roles[0]
	if !strings.HasPrefix(role.Resolved, "local http://"+upstream) {
		t.Fatalf("role resolves to %q, want the echo server", role.Resolved)
	}
	if len(st.Instances) != 1 || st.Instances[0].Health != "up" || !st.Instances[0].Serving || st.Instances[0].Model != "echo-e2e" {
		t.Fatalf("status instances = %+v, want the echo server up, serving echo-e2e", st.Instances)
	}
	base := "http://" + role.Listen

	// curl, as a user would type it.
	out := curl(t, "-sS", "-i", base+"/v1/chat/completions", "-H", "Content-Type: application/json",
		"-d", `{"model":"echo-e2e","messages":[{"role":"user","content":"hi from curl"}]}`)
	if !strings.Contains(out, "HTTP/1.1 200") || !strings.Contains(out, "echo: hi from curl") || !strings.Contains(strings.ToLower(out), "x-nodeld-route: local") {
		t.Fatalf("curl chat:\n%s", out)
	}
	out = curl(t, "-sS", "-N", base+"/v1/chat/completions", "-H", "Content-Type: application/json",
		"-d", `{"model":"echo-e2e","stream":true,"messages":[{"role":"user","content":"one two three"}]}`)
	if strings.Count(out, "data: ") < 5 || !strings.HasSuffix(strings.TrimSpace(out), "data: [DONE]") {
		t.Fatalf("curl stream:\n%s", out)
	}

	// The official OpenAI Node client, unchanged.
	res := openaiClient(t, base+"/v1")
	want := map[string]any{
		"models": []any{"echo-e2e"}, "chat": "echo: hello from node", "stream_text": "echo: stream these words please",
		"completion": "echo: complete me", "embeddings": float64(2), "embedding_dims": float64(8),
	}
	for k, v := range want {
		if fmt.Sprint(res[k]) != fmt.Sprint(v) {
			t.Errorf("openai client %s = %v, want %v", k, res[k], v)
		}
	}
	if n, _ := res["stream_chunks"].(float64); n < 5 {
		t.Errorf("openai client got %v stream chunks, want one per word and a finish chunk", res["stream_chunks"])
	}

	// Kill the server: the role answers 503 within one probe interval
	// (plus the probe's own timeout, which a refused connection does not
	// reach).
	echo.kill()
	killed := time.Now()
	d.waitLogN("role deregistered", 1)
	if took := time.Since(killed); took > interval+time.Second {
		t.Errorf("role deregistered %s after the kill, want within about one interval (%s)", took, interval)
	}
	// Served here a moment ago, chat is expected back: the request is
	// held for proxy.hold.max_wait, then answered 503 model_loading.
	code, body := httpGet(t, base+"/v1/models")
	if code != 503 || !strings.Contains(body, `"code":"model_loading"`) {
		t.Fatalf("after kill: %d %q, want 503 model_loading", code, body)
	}
	if in := d.status().Instances[0]; in.Health != "down" || in.Serving || in.LastError == "" {
		t.Fatalf("status instance after kill = %+v, want down with its error", in)
	}

	// Restart it on the same address: served again, nodeld untouched.
	startEcho(t, upstream)
	d.waitLogN("role registered", 2)
	code, body = httpGet(t, base+"/v1/models")
	if code != 200 || !strings.Contains(body, "echo-e2e") {
		t.Fatalf("after restart: %d %q", code, body)
	}
	d.signal(syscall.SIGTERM)
	if code := d.wait(); code != 0 {
		t.Fatalf("exit = %d", code)
	}
}

func curl(t *testing.T, args ...string) string {
	t.Helper()
	path, err := exec.LookPath("curl")
	if err != nil {
		t.Fatal("curl not found: run `make test-deps`")
	}
	out, err := exec.Command(path, append([]string{"--max-time", "20"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("curl %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// openaiClient runs test/e2e/openai_client.mjs against baseURL.
func openaiClient(t *testing.T, baseURL string) map[string]any {
	t.Helper()
	script, _ := filepath.Abs(filepath.Join("..", "..", "test", "e2e", "openai_client.mjs"))
	if _, err := os.Stat(filepath.Join(filepath.Dir(script), "node_modules", "openai")); err != nil {
		t.Fatal("the openai npm client is not installed: run `make test-deps`")
	}
	out, err := exec.Command("node", script, baseURL).CombinedOutput()
	if err != nil {
		t.Fatalf("openai client: %v\n%s", err, out)
	}
	var res map[string]any
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("openai client output %q: %v", out, err)
	}
	return res
}
