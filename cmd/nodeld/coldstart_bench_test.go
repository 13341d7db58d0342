package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/host"
	"github.com/nodeld/nodeld/internal/operator"
)

// The cold start on demand, measured (issue 24 acceptance 1): three
// nodeld processes on loopback, built as nodeld ships (no -race, no test
// hooks). A runs the controller with workload chat declared on demand
// from C, B is its only host, C has chat's role port and no model. Each
// round sends one request to C's role port while chat is cold, and the
// instance A places on B (echo-llm loading for coldLoadDelay) answers it;
// chat then idles (idle_after) and A unloads it before the next round.
//
// Four moments of each round, all on this machine's wall clock:
//   - ready: echo-llm's own, written to its --ready-file the moment its
//     /health starts answering 200;
//   - probed: echo-llm's first 200 answer to GET /health (--health-file),
//     which is B's host polling the starting server (every 25 ms at
//     first): ready -> probed is the poll's phase, probed -> noticed
//     what the host does with the answer;
//   - noticed: B's host's record of when it saw the instance healthy
//     (the instance's since when it entered running, read from B's
//     /v1/status), right before it registers chat in B's table;
//   - first byte: when C's client got the first byte of the answer.
//
// Run it alone with make bench-cold; make bench runs it among the others.

const (
	// coldLoadDelay is how long echo-llm "loads its model".
	coldLoadDelay = time.Second
	// coldStarts is how many cold starts one run of the benchmark makes
	// (at least; -benchtime Nx with N larger makes N).
	coldStarts = 20
	// coldFirstByteBound bounds the median from the instance's ready
	// moment to the first byte at C's client.
	coldFirstByteBound = 200 * time.Millisecond
	// coldNoticeBound bounds the median from the instance's ready moment
	// to B's host noticing it.
	coldNoticeBound = 100 * time.Millisecond
)

var benchNodeldBuild lazyBinary

// benchNodeld is nodeld built as it ships: no -race, no nodeld_testhooks,
// so the latencies measured are the daemon's, not the race detector's.
func benchNodeld(t testing.TB) string {
	return benchNodeldBuild.get(t, "nodeld-bench", "-trimpath", ".")
}

// coldRound is one cold start's moments.
type coldRound struct {
	sent, ready, probed, noticed, firstByte time.Time
	// throttled is how long the kernel held the instance's processes
	// (launcher, start script, echo-llm) to its manifest's CPU quota up
	// to the answer; throttledOK is false when its cgroup was not found.
	throttled   time.Duration
	throttledOK bool
}

// coldCluster is the three running processes of the benchmark.
type coldCluster struct {
	a, b, c *proc
	idB     string
	base    string // C's role port
	// client sends the rounds' requests; its connections are closed
	// when the benchmark ends.
	client *http.Client
}

// BenchmarkOnDemandColdStart measures coldStarts cold starts of an
// on-demand workload across the mesh and reports the medians and p90 of
// ready -> probed -> noticed (B's host), noticed -> first byte (at C),
// ready -> first byte, the whole cold start (request sent -> first byte),
// the part before the load (sent -> echo-llm's load timer starting), and
// how long the kernel throttled the instance to its CPU quota. It fails
// when the median ready -> first byte exceeds coldFirstByteBound or the
// median ready -> noticed exceeds coldNoticeBound.
//
//	go test -run '^$' -bench BenchmarkOnDemandColdStart -benchtime 1x ./cmd/nodeld/
func BenchmarkOnDemandColdStart(b *testing.B) {
	if testing.Short() {
		b.Skip("three nodeld processes and 20 cold starts of a second each: not in -short")
	}
	cl := startColdCluster(b)
	n := max(b.N, coldStarts)
	rounds := make([]coldRound, 0, n)
	b.ResetTimer()
	for i := range n {
		r := cl.coldStart(b, i)
		rounds = append(rounds, r)
		b.Logf("cold start %2d: ready->probed %6s  probed->noticed %6s  noticed->first byte %6s  ready->first byte %6s  sent->first byte %s (throttled %s)",
			i, r.probed.Sub(r.ready).Round(100*time.Microsecond), r.noticed.Sub(r.probed).Round(100*time.Microsecond),
			r.firstByte.Sub(r.noticed).Round(100*time.Microsecond), r.firstByte.Sub(r.ready).Round(100*time.Microsecond),
			r.firstByte.Sub(r.sent).Round(time.Millisecond), r.throttled.Round(time.Millisecond))
		cl.waitCold(b)
	}
	b.StopTimer()

	series := []struct {
		name     string
		from, to func(coldRound) time.Time
		bound    time.Duration
	}{
		{"ready-probed", func(r coldRound) time.Time { return r.ready }, func(r coldRound) time.Time { return r.probed }, 0},
		{"probed-noticed", func(r coldRound) time.Time { return r.probed }, func(r coldRound) time.Time { return r.noticed }, 0},
		{"ready-noticed", func(r coldRound) time.Time { return r.ready }, func(r coldRound) time.Time { return r.noticed }, coldNoticeBound},
		{"noticed-firstbyte", func(r coldRound) time.Time { return r.noticed }, func(r coldRound) time.Time { return r.firstByte }, 0},
		{"ready-firstbyte", func(r coldRound) time.Time { return r.ready }, func(r coldRound) time.Time { return r.firstByte }, coldFirstByteBound},
		{"coldstart", func(r coldRound) time.Time { return r.sent }, func(r coldRound) time.Time { return r.firstByte }, 0},
		// Before the load: the demand, the placement, the fetch and the
		// launch, up to echo-llm's load timer starting.
		{"sent-loading", func(r coldRound) time.Time { return r.sent }, func(r coldRound) time.Time { return r.ready.Add(-coldLoadDelay) }, 0},
	}
	b.ReportMetric(0, "ns/op") // one op is the whole run: meaningless
	var throttled []time.Duration
	for _, r := range rounds {
		if r.throttledOK {
			throttled = append(throttled, r.throttled)
		}
	}
	if len(throttled) > 0 {
		slices.Sort(throttled)
		b.ReportMetric(coldMS(coldQuantile(throttled, 0.5)), "cpu-throttled-p50-ms")
		b.Logf("the instance held to its CPU quota, %d cold starts: median %s, p90 %s", len(throttled),
			coldQuantile(throttled, 0.5).Round(time.Millisecond), coldQuantile(throttled, 0.9).Round(time.Millisecond))
	}
	for _, s := range series {
		ds := make([]time.Duration, len(rounds))
		for i, r := range rounds {
			ds[i] = s.to(r).Sub(s.from(r))
		}
		slices.Sort(ds)
		med, p90 := coldQuantile(ds, 0.5), coldQuantile(ds, 0.9)
		b.ReportMetric(coldMS(med), s.name+"-p50-ms")
		b.ReportMetric(coldMS(p90), s.name+"-p90-ms")
		b.Logf("%s over %d cold starts: median %s, p90 %s, min %s, max %s", s.name, len(ds),
			med.Round(100*time.Microsecond), p90.Round(100*time.Microsecond), ds[0].Round(100*time.Microsecond), ds[len(ds)-1].Round(100*time.Microsecond))
		if s.bound > 0 && med > s.bound {
			b.Errorf("median %s %s, want at most %s", s.name, med, s.bound)
		}
	}
}

// coldQuantile is the q-quantile of sorted ds (nearest rank).
func coldQuantile(ds []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(ds))+0.5) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

func coldMS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// startColdCluster starts A, B and C and waits until C holds A's standby
// of chat, cold.
func startColdCluster(t testing.TB) *coldCluster {
	t.Helper()
	bin := benchNodeld(t)
	// The instance writes its ready moment into its scratch directory,
	// the one place an isolated instance may write.
	script := "#!/bin/sh\nexec '" + echoBinary(t) + "' \"$@\" --load-delay " + coldLoadDelay.String() +
		" --ready-file \"$NODELD_SCRATCH/ready\" --health-file \"$NODELD_SCRATCH/health\"\n"
	pkgDir, anchor := meshPackage(t, "echo-cold", echoManifest("echo-cold", "start.sh", defaultVariant), map[string]string{"start.sh": script})

	root, err := os.MkdirTemp("", "cold") // short: the operator socket lives in the data dir
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	names := []string{"a", "b", "c"}
	dirs, addrs, keys := map[string]string{}, map[string]string{}, map[string]string{}
	for _, n := range names {
		dirs[n] = filepath.Join(root, n)
		addrs[n] = freeUDPAddr(t)
		keys[n] = makeKey(t, dirs[n])
	}
	cfg := func(name, rest string) string {
		var s strings.Builder
		fmt.Fprintf(&s, "node:\n  name: %s\n  data_dir: %s\nlog:\n  level: info\n  format: json\nadmin:\n  listen: 127.0.0.1:0\n", name, dirs[name])
		fmt.Fprintf(&s, "mesh:\n  listen: %s\n  keepalive: 1s\n  peers:\n", addrs[name])
		for _, p := range names {
			if p != name {
				fmt.Fprintf(&s, "    - name: %s\n      addr: %s\n      tier: paired\n      key: %s\n", p, addrs[p], keys[p])
			}
		}
		return s.String() + rest
	}
	cfgA := cfg("a", `inference:
  roles:
    - name: other
      listen: 127.0.0.1:0
controller:
  enabled: true
  tick: 250ms
  trust_anchors: [`+anchor+`]
  policy:
    kinds:
      inference: {min_tier: paired}
  workloads:
    - name: chat
      package: echo-cold
      on_demand:
        enabled: true
        idle_after: 1s
        min_residency: 1s
        max_wait: 20s
        demand_from: [c]
`)
	cfgB := cfg("b", `inference:
  roles:
    - name: chat
      listen: 127.0.0.1:0
      expose: true
      serve_to: [c]
host:
  enabled: true
  controllers: [`+keys["a"]+`]
  trust_anchors: [`+anchor+`]
`+binReadable())
	cfgC := cfg("c", `proxy:
  hold:
    max_wait: 20s
inference:
  roles:
    - name: chat
      listen: 127.0.0.1:0
      use_from: [b]
`)
	start := func(name, c string) *proc {
		path := filepath.Join(root, name+".yaml")
		if err := os.WriteFile(path, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
		if name == "a" {
			// The declared package is in A's store before A starts.
			if out, errOut, rc := runCLI(t, "package", "add", "--config", path, pkgDir); rc != 0 {
				t.Fatalf("package add = %d\n%s\n%s", rc, out, errOut)
			}
		}
		d := &proc{t: t, dataDir: dirs[name], cfgPath: path, done: make(chan struct{})}
		d.cmd = exec.Command(bin, "run", "--config", path)
		d.launch()
		return d
	}
	cl := &coldCluster{b: start("b", cfgB), c: start("c", cfgC), a: start("a", cfgA)}
	for _, d := range []*proc{cl.a, cl.b, cl.c} {
		d.waitReady()
	}
	cl.idB = cl.b.status().NodeID
	waitFor(t, "C to hold A's standby of chat, cold", func() bool {
		r := cl.chatRole()
		return r.Resolved == "" && r.OnDemand == "cold"
	})
	cl.base = "http://" + cl.chatRole().Listen
	tr := &http.Transport{}
	cl.client = &http.Client{Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)
	return cl
}

// chatRole is C's role chat in its status.
func (cl *coldCluster) chatRole() operator.RoleDoc {
	for _, r := range cl.c.status().Roles {
		if r.Name == "chat" {
			return r
		}
	}
	cl.c.t.Fatal("C has no role chat")
	return operator.RoleDoc{}
}

// coldStart sends one request to C's role port while chat is cold and
// returns the round's moments once it is answered by B's instance.
func (cl *coldCluster) coldStart(t testing.TB, i int) coldRound {
	t.Helper()
	content := fmt.Sprintf("cold %d", i)
	var r coldRound
	trace := &httptrace.ClientTrace{GotFirstResponseByte: func() { r.firstByte = time.Now() }}
	ctx, cancel := context.WithTimeout(httptrace.WithClientTrace(context.Background(), trace), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cl.base+"/v1/chat/completions",
		strings.NewReader(`{"model":"echo-1","messages":[{"role":"user","content":"`+content+`"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	r.sent = time.Now()
	resp, err := cl.client.Do(req)
	if err != nil {
		t.Fatalf("cold start %d: %v\nA:\n%s", i, err, cl.a.logText())
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || resp.Header.Get("X-Nodeld-Route") != cl.idB || !strings.Contains(string(body), "echo: "+content) {
		t.Fatalf("cold start %d: %d route %q body %q err %v, want 200 from B (%s)", i, resp.StatusCode, resp.Header.Get("X-Nodeld-Route"), body, err, cl.idB)
	}
	in := cl.runningOnB(t)
	r.noticed = in.Since
	r.throttled, r.throttledOK = cl.throttled(in.ID)
	scratch := filepath.Join(cl.b.dataDir, "scratch", in.ID)
	r.ready, r.probed = readMoment(t, filepath.Join(scratch, "ready")), readMoment(t, filepath.Join(scratch, "health"))
	if d := r.ready.Sub(r.sent); d < coldLoadDelay {
		t.Fatalf("cold start %d: ready %s after the request, before its load delay %s", i, d, coldLoadDelay)
	}
	if r.probed.Before(r.ready) || r.noticed.Before(r.probed) || r.firstByte.Before(r.noticed) {
		t.Fatalf("cold start %d: out of order: ready %s, probed %s, noticed %s, first byte %s", i, r.ready, r.probed, r.noticed, r.firstByte)
	}
	return r
}

// throttled reads how long the kernel has throttled instance id's cgroup
// to its CPU quota (cgroup v1 cpu.stat throttled_time, v2
// throttled_usec); false when its cgroup is not found.
func (cl *coldCluster) throttled(id string) (time.Duration, bool) {
	name := "nodeld-" + id // internal/sandbox's cgroupPrefix
	dirs := []string{"/sys/fs/cgroup/cpu/" + name, "/sys/fs/cgroup/cpu,cpuacct/" + name}
	if raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", cl.b.cmd.Process.Pid)); err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			if v2, ok := strings.CutPrefix(line, "0::"); ok {
				own := filepath.Join("/sys/fs/cgroup", v2)
				dirs = append(dirs, filepath.Join(own, name), filepath.Join(filepath.Dir(own), name))
			}
		}
	}
	for _, dir := range dirs {
		raw, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(raw), "\n") {
			var v int64
			if _, err := fmt.Sscanf(line, "throttled_time %d", &v); err == nil {
				return time.Duration(v), true
			}
			if _, err := fmt.Sscanf(line, "throttled_usec %d", &v); err == nil {
				return time.Duration(v) * time.Microsecond, true
			}
		}
	}
	return 0, false
}

// readMoment reads a moment echo-llm wrote (RFC 3339, nanoseconds). It
// writes the health file just after its answer, so that one may still be
// on its way: it is read again until it parses.
func readMoment(t testing.TB, path string) time.Time {
	t.Helper()
	var at time.Time
	waitFor(t, "the instance's moment in "+path, func() bool {
		raw, err := os.ReadFile(path)
		if err == nil {
			at, err = time.Parse(time.RFC3339Nano, strings.TrimSpace(string(raw)))
		}
		return err == nil
	})
	return at
}

// runningOnB is B's one instance, which must be running.
func (cl *coldCluster) runningOnB(t testing.TB) host.InstanceInfo {
	t.Helper()
	st := cl.b.status()
	if st.Host == nil || len(st.Host.Instances) != 1 || st.Host.Instances[0].State != ctl.StateRunning {
		t.Fatalf("B's host, want one instance running: %+v", st.Host)
	}
	return st.Host.Instances[0]
}

// waitCold waits until A has unloaded the idle instance: B runs nothing
// and C sees chat cold again.
func (cl *coldCluster) waitCold(t testing.TB) {
	t.Helper()
	waitFor(t, "A to unload the idle instance and C to see chat cold", func() bool {
		if st := cl.b.status(); st.Host == nil || len(st.Host.Instances) != 0 {
			return false
		}
		r := cl.chatRole()
		return r.Resolved == "" && r.OnDemand == "cold"
	})
}
