package main

// The README's "Serve on demand" walk-through, run whole by the daemon's
// own code paths: one node with controller.enabled and host.enabled, no
// mesh, three on-demand echo-llm models of 6 GiB each on a node of 8 GiB
// (its facts probe says so: the packages run the real echo-llm, which
// uses none of it), requests on the roles' ports, the swap, the idle
// unload and the start after it.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/lifecycle"
	"github.com/nodeld/nodeld/internal/plane"
	"github.com/nodeld/nodeld/internal/runner"
)

// The walk-through node's memory and its models' declared memory: room
// for one model.
const (
	walkMemTotal = 8 << 30
	walkMemFree  = 7 << 30
	walkModelMem = 6 << 30
)

// walkNode is the walk-through's daemon.
type walkNode struct {
	t   *testing.T
	n   *node
	reg *prometheus.Registry
	// ports are the roles' addresses.
	ports map[string]string
	// maxDeclared is the most declared memory the controller ever had on
	// the node (sampled by watch).
	maxDeclared atomic.Uint64
}

// walkProbe is this machine's facts probe, except that the node has
// walkMemTotal of memory, walkMemFree of it available, whatever runs.
func walkProbe() facts.ProbeDeps {
	d := facts.DefaultProbeDeps()
	read := d.ReadFile
	d.ReadFile = func(path string) ([]byte, error) {
		if path != facts.MeminfoPath {
			return read(path)
		}
		return fmt.Appendf(nil, "MemTotal: %d kB\nMemFree: %d kB\nMemAvailable: %d kB\n", walkMemTotal>>10, walkMemFree>>10, walkMemFree>>10), nil
	}
	return d
}

// walkManifest is model role's package: the echo-llm example serving
// model echo-<role>, loading for 100 ms, declaring walkModelMem.
func walkManifest(role string) string {
	return `{
  "schema": 1,
  "id": "echo-` + role + `",
  "version": "0.1.0",
  "kind": "inference",
  "role": "` + role + `",
  "runtime": {
    "type": "process",
    "command": "start.sh",
    "args": ["--listen", "127.0.0.1:{port}", "--model", "echo-` + role + `", "--load-delay", "100ms"],
    "health": {"path": "/health"}
  },
  "variants": [{"name": "default", "requires": {"os": ["linux"], "runtimes": ["process"]}, "resources": {"mem_bytes": ` + fmt.Sprint(walkModelMem) + `, "cpu_millis": 100}}],
  "files": []
}`
}

// startWalkNode builds the packages, writes the config (idle_after
// given), adds the packages to the store and runs the daemon.
func startWalkNode(t *testing.T, idleAfter time.Duration) *walkNode {
	t.Helper()
	root, err := os.MkdirTemp("", "odw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	dataDir := filepath.Join(root, "data")
	roles := []string{"a", "b", "c"}
	var anchor string
	dirs := map[string]string{}
	for _, r := range roles {
		dirs[r], anchor = meshPackage(t, "walk-echo-"+r, walkManifest(r), map[string]string{"start.sh": lightScript(t, "")})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "node:\n  name: solo\n  data_dir: %s\nlog:\n  level: warn\n  format: json\nadmin:\n  listen: 127.0.0.1:0\n", dataDir)
	b.WriteString("inference:\n  roles:\n")
	for _, r := range roles {
		fmt.Fprintf(&b, "    - name: %s\n      listen: 127.0.0.1:0\n", r)
	}
	b.WriteString("  instances: []\n  discover: false\n")
	fmt.Fprintf(&b, "host:\n  enabled: true\n  trust_anchors: [%s]\n%s", anchor, binReadable())
	b.WriteString("controller:\n  enabled: true\n  tick: 50ms\n  retry_backoff: 100ms\n  swap_grace: 300ms\n  policy:\n    kinds:\n      inference: {min_tier: pinned}\n  workloads:\n")
	for _, r := range roles {
		fmt.Fprintf(&b, "    - name: %s\n      package: echo-%s\n      on_demand:\n        enabled: true\n        idle_after: %s\n        min_residency: 50ms\n        max_wait: 20s\n", r, r, idleAfter)
	}
	cfgPath := filepath.Join(root, "nodeld.yaml")
	if err := os.WriteFile(cfgPath, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, r := range roles {
		if out, errOut, rc := runCLI(t, "package", "add", "--config", cfgPath, dirs[r]); rc != 0 {
			t.Fatalf("package add %s: %d %q %q", r, rc, out, errOut)
		}
	}
	c, err := reloadConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkComponents(c, cfgPath); err != nil {
		t.Fatal(err)
	}
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	if err := lifecycle.EnsureDataDir(c.Node.DataDir, log); err != nil {
		t.Fatal(err)
	}
	id, _, err := identity.LoadOrGenerate(identity.KeyPath(c.Node.DataDir))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	ch, err := lifecycle.OpenChain(filepath.Join(c.Node.DataDir, chainFileName), id, false, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ch.Close() })
	probe := walkProbe()
	n, err := newNode(c, nodeDeps{
		id: id, chain: ch, reg: reg, log: log, level: zap.NewAtomicLevelAt(zap.WarnLevel), cfgPath: cfgPath,
		load:  func() (*config.Config, error) { return reloadConfig(cfgPath) },
		hooks: testHooks{discover: []runner.DiscoverCandidate{}, probe: &probe},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.run(ctx, nil) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(waitTimeout):
			t.Errorf("run did not return")
		}
	})
	w := &walkNode{t: t, n: n, reg: reg, ports: map[string]string{}}
	deadline := time.Now().Add(waitTimeout)
	for ok, _ := n.admin.Ready(); !ok; ok, _ = n.admin.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("node not ready")
		}
		select {
		case err := <-done:
			t.Fatalf("node stopped before ready: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	// The roles are offered on demand once the controller's first tick
	// read the packages (nodeld status: "cold (on demand from ...)").
	for !w.allStandby(roles) {
		if time.Now().After(deadline) {
			t.Fatal("the roles are not offered on demand")
		}
		select {
		case <-t.Context().Done():
			return nil
		case <-time.After(10 * time.Millisecond):
		}
	}
	for _, r := range roles {
		a, ok := n.proxy.Addr(r)
		if !ok {
			t.Fatalf("role %s has no port", r)
		}
		w.ports[r] = a.String()
	}
	// The controller's declared memory on the node, sampled on every
	// change of its placements the test can see: each answered request
	// and this watcher, until the test ends.
	wctx, wcancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		tk := time.NewTicker(5 * time.Millisecond)
		defer tk.Stop()
		for {
			w.sampleDeclared()
			select {
			case <-wctx.Done():
				return
			case <-tk.C:
			}
		}
	})
	t.Cleanup(func() { wcancel(); wg.Wait() })
	return w
}

// allStandby says whether this node's table offers every role on demand.
func (w *walkNode) allStandby(roles []string) bool {
	have := map[string]bool{}
	for _, r := range w.n.table.Snapshot().Roles {
		have[r.Role] = len(r.OnDemand) > 0
	}
	for _, r := range roles {
		if !have[r] {
			return false
		}
	}
	return true
}

// sampleDeclared records the declared memory of the placements the
// controller holds on the node (placing, placed or being unloaded).
func (w *walkNode) sampleDeclared() {
	var sum uint64
	for _, p := range w.n.ctrl.Placements() {
		switch p.Life {
		case plane.LifeDispatching, plane.LifeUnsettled, plane.LifePlaced, plane.LifeRetiring:
			sum += p.Reserved.HostBytes
		}
	}
	for {
		old := w.maxDeclared.Load()
		if sum <= old || w.maxDeclared.CompareAndSwap(old, sum) {
			return
		}
	}
}

// ask sends a chat completion on role's port and returns the model that
// answered (an error for anything but 200).
func (w *walkNode) ask(role string) (string, error) {
	body := `{"messages":[{"role":"user","content":"hi"}]}`
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+w.ports[role]+"/v1/chat/completions", bytes.NewBufferString(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	w.sampleDeclared()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("role %s: %d %s", role, resp.StatusCode, raw)
	}
	var out struct {
		Model string `json:"model"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return "", fmt.Errorf("role %s: %v: %s", role, err, raw)
	}
	return out.Model, nil
}

// evictions is the controller's count of swaps: instances evicted to
// make room.
func (w *walkNode) evictions() int {
	return int(w.counter("nodeld_plane_evictions_total", ""))
}

// counter sums the counter name of the node's registry over its series
// (those of workload only, when given).
func (w *walkNode) counter(name, workload string) float64 {
	w.t.Helper()
	mfs, err := w.reg.Gather()
	if err != nil {
		w.t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := workload == ""
			for _, l := range m.GetLabel() {
				match = match || (l.GetName() == "workload" && l.GetValue() == workload)
			}
			if match {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// walkTrace is the trace: A B A A C A B C.
var walkTrace = []string{"a", "b", "a", "a", "c", "a", "b", "c"}

func TestOnDemandWalkThroughOneHost(t *testing.T) {
	t.Parallel()
	w := startWalkNode(t, time.Hour)
	// The trace, each request sent when the previous answered: all 8
	// answered, each by its own model.
	for i, r := range walkTrace {
		start := time.Now()
		model, err := w.ask(r)
		t.Logf("request %d (%s) answered in %s", i, r, time.Since(start).Round(time.Millisecond))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if model != "echo-"+r {
			t.Fatalf("request %d on role %s answered by %s", i, r, model)
		}
	}
	seq := w.evictions()
	t.Logf("sequential trace %s: %d swaps", strings.Join(walkTrace, " "), seq)
	if seq == 0 {
		t.Fatal("the trace ran with room for one model and swapped none")
	}
	// The same trace in two interleaved client loops (the even requests
	// in one, the odd in the other), each request sent when its loop's
	// previous answered: all answered.
	var wg sync.WaitGroup
	errs := make(chan error, len(walkTrace))
	for loop := range 2 {
		wg.Go(func() {
			for i := loop; i < len(walkTrace); i += 2 {
				model, err := w.ask(walkTrace[i])
				if err == nil && model != "echo-"+walkTrace[i] {
					err = fmt.Errorf("request %d on role %s answered by %s", i, walkTrace[i], model)
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	conc := w.evictions() - seq
	t.Logf("concurrent trace in two loops: %d swaps (first come, first served would swap at every change of model: %d)", conc, fcfsSwaps(walkTrace))
	if got := w.maxDeclared.Load(); got > walkMemTotal {
		t.Fatalf("the controller had %d bytes declared on a node of %d", got, uint64(walkMemTotal))
	}
}

// fcfsSwaps counts the swaps of serving trace in order with room for one
// model: one at each change of model after the first.
func fcfsSwaps(trace []string) int {
	n := 0
	for i := 1; i < len(trace); i++ {
		if trace[i] != trace[i-1] {
			n++
		}
	}
	return n
}

func TestOnDemandWalkThroughIdleUnload(t *testing.T) {
	t.Parallel()
	w := startWalkNode(t, 300*time.Millisecond)
	if _, err := w.ask("a"); err != nil {
		t.Fatal(err)
	}
	unloads := func() float64 { return w.counter("nodeld_plane_idle_unloads_total", "a") }
	deadline := time.Now().Add(waitTimeout)
	for unloads() == 0 || w.onDemandState("a") != plane.OnDemandCold {
		if time.Now().After(deadline) {
			t.Fatalf("a not unloaded after idle_after: %s, %v idle unloads", w.onDemandState("a"), unloads())
		}
		select {
		case <-t.Context().Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	// A request after the unload starts it again.
	if model, err := w.ask("a"); err != nil || model != "echo-a" {
		t.Fatalf("after the idle unload: %q %v", model, err)
	}
}

// onDemandState is workload name's on-demand state at the controller.
func (w *walkNode) onDemandState(name string) string {
	for _, d := range w.n.ctrl.Declarations() {
		if d.Name == name {
			return d.OnDemand
		}
	}
	return ""
}
