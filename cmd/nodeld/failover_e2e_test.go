package main

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// failoverTarget is the bound: traffic moves to the other server
// within 3 s of a kill -9 of the serving node, with the shipped defaults.
const failoverTarget = 3 * time.Second

// failoverSample is one request of the client load of TestFailoverOnKill.
type failoverSample struct {
	sent, done time.Time
	code       int
	route      string
	err        error
	// cut is a response whose head came but whose body was cut: a
	// forward already answering is never retried (it may have streamed).
	cut bool
}

// TestFailoverOnKill is the three-process failover acceptance with the
// shipped mesh defaults (keep-alive 15 s, liveness 2 s): C uses role chat
// from A or B; four clients post to C's role port continuously (5 s client
// timeout each); the serving node is killed with SIGKILL, which closes
// nothing on the wire. Requests in flight at the kill, and those C sends
// before it notices, are retried on the other node once the link is found
// dead, so none fails, and traffic moves within failoverTarget. A request
// whose answer had begun to come back when the node died is not retried
// (it may have been a stream); such cuts are counted apart and logged. The
// figures (time to move, requests failed) are logged for BENCHMARKS.md:
// go test -run TestFailoverOnKill -v ./cmd/nodeld/
func TestFailoverOnKill(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	meshAddr, others := clusterAddrs(t)
	// The shipped defaults: no keepalive or liveness_timeout in the files.
	shipped := func(cfg string) string { return strings.Replace(cfg, "  keepalive: 1s\n", "", 1) }
	serving := func(upstream string) string {
		return fmt.Sprintf("    - name: chat\n      listen: 127.0.0.1:0\n      expose: true\n      serve_to: [c]\n  instances:\n    - role: chat\n      runtime: openai\n      url: http://%s\n", upstream)
	}
	nodes := map[string]*proc{}
	for _, n := range []string{"a", "b"} {
		up := freeAddr(t)
		startEcho(t, up)
		dir := filepath.Join(root, n)
		nodes[n] = startDaemon(t, dir, shipped(clusterNode(n, dir, meshAddr[n], others(n), serving(up))))
	}
	dirC := filepath.Join(root, "c")
	nodes["c"] = startDaemon(t, dirC, shipped(clusterNode("c", dirC, meshAddr["c"], others("c"),
		"    - name: chat\n      listen: 127.0.0.1:0\n      use_from: [a, b]\n")))
	names := map[string]string{}
	for n, d := range nodes {
		d.waitReady()
		names[d.status().NodeID] = n
	}
	c := nodes["c"]
	advertised := func() int {
		st := c.status()
		if len(st.Roles) == 0 {
			return 0
		}
		return len(st.Table.Roles[0].Remote)
	}
	waitFor(t, "C to hold both peers' adverts", func() bool { return advertised() == 2 })
	base := "http://" + c.status().Roles[0].Listen
	body := `{"model":"x","messages":[{"role":"user","content":"failover"}]}`

	client := &http.Client{Timeout: 5 * time.Second}
	var (
		mu      sync.Mutex
		samples []failoverSample
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				s := failoverSample{sent: time.Now()}
				res, err := client.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
				s.done, s.err = time.Now(), err
				if err == nil {
					s.code, s.route = res.StatusCode, res.Header.Get("X-Nodeld-Route")
					_, rerr := io.Copy(io.Discard, res.Body)
					res.Body.Close()
					s.cut = rerr != nil
				}
				mu.Lock()
				samples = append(samples, s)
				mu.Unlock()
				time.Sleep(10 * time.Millisecond) // pacing of the load, not a wait for a condition
			}
		})
	}
	servedBy := func(from time.Time) map[string]int {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]int{}
		for _, s := range samples {
			if s.done.After(from) && s.err == nil && s.code == http.StatusOK {
				out[s.route]++
			}
		}
		return out
	}
	warm := time.Now()
	waitFor(t, "traffic through C", func() bool { return len(servedBy(warm)) > 0 })
	var victim string
	for route := range servedBy(warm) {
		victim = route
	}
	victimName := names[victim]
	other := "a"
	if victimName == "a" {
		other = "b"
	}
	otherID := nodes[other].status().NodeID

	killed := time.Now()
	nodes[victimName].signal(syscall.SIGKILL)
	waitFor(t, "traffic served by "+other, func() bool { return servedBy(killed)[otherID] >= 20 })
	close(stop)
	wg.Wait()

	var (
		cut        int
		failed     []failoverSample
		movedAfter time.Duration = -1
		durations  []time.Duration
	)
	for _, s := range samples {
		if !s.sent.After(killed) && !s.done.After(killed) {
			continue
		}
		durations = append(durations, s.done.Sub(s.sent))
		if s.cut {
			cut++
			continue
		}
		if s.err != nil || s.code != http.StatusOK {
			failed = append(failed, s)
			continue
		}
		if s.route == otherID && (movedAfter < 0 || s.done.Sub(killed) < movedAfter) {
			movedAfter = s.done.Sub(killed)
		}
	}
	sort.Slice(durations, func(i, j int) bool { return durations[i] < durations[j] })
	t.Logf("failover figures: kill -9 of %s; first answer from %s %v after the kill; %d requests during the move, %d failed, %d cut mid-answer; slowest %v",
		victimName, other, movedAfter.Round(time.Millisecond), len(durations), len(failed), cut, durations[len(durations)-1].Round(time.Millisecond))
	if movedAfter < 0 || movedAfter > failoverTarget {
		t.Errorf("traffic moved to %s %v after the kill, want within %v", other, movedAfter, failoverTarget)
	}
	for _, s := range failed {
		t.Errorf("request sent %v after the kill failed: code %d err %v (route %q)", s.sent.Sub(killed).Round(time.Millisecond), s.code, s.err, s.route)
	}
	c.signal(syscall.SIGTERM)
	if code := c.wait(); code != 0 {
		t.Fatalf("node c exit = %d", code)
	}
	checkLoggerNames(t, c)
}

// checkLoggerNames fails on a logger name that repeats a segment
// ("mesh.mesh"): cmd/nodeld names each component once, and components do
// not name themselves again.
func checkLoggerNames(t *testing.T, d *proc) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	seen := map[string]bool{}
	for _, line := range d.lines {
		name, _ := line["logger"].(string)
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		parts := strings.Split(name, ".")
		for i := 1; i < len(parts); i++ {
			if parts[i] == parts[i-1] {
				t.Errorf("logger name %q repeats %q", name, parts[i])
			}
		}
	}
	if !seen["mesh"] || !seen["proxy"] {
		t.Errorf("logger names seen %v, want mesh and proxy among them", seen)
	}
}
