package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDaemonLifecycle runs the real binary: start on free ports with a
// temp data dir, readiness, metrics (checked by promtool), SIGHUP with a
// bad and then a good config, SIGTERM, exit 0, and a chain that verifies
// and records start, both reloads and stop.
func TestDaemonLifecycle(t *testing.T) {
	t.Parallel()
	dataDir := filepath.Join(t.TempDir(), "data")
	d := startDaemon(t, dataDir, nodeConfig(dataDir, ""))
	d.waitReady()

	code, metrics := httpGet(t, "http://"+d.admin+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics = %d", code)
	}
	for _, name := range []string{
		"nodeld_build_info{", "nodeld_config_last_reload_successful 1",
		"nodeld_chain_entries_total", "nodeld_chain_append_errors_total 0",
		"go_goroutines", "process_resident_memory_bytes", "nodeld_table_generation",
	} {
		if !strings.Contains(metrics, name) {
			t.Errorf("/metrics lacks %q", name)
		}
	}
	promtoolCheck(t, metrics)
	// The heap goal is kept above the live heap (heapgoal): after a
	// collection (the scrapes allocate) the GC percent is above Go's 100.
	if p := gcPercentAfterScrapes(t, d.admin, func(p float64) bool { return p > 100 }); p <= 100 {
		t.Errorf("go_gc_gogc_percent %v, want above 100 (heap goal kept)", p)
	}

	// One thread while the node idles (procs.Adapt), unless one is all
	// the machine has or the test runs under a set GOMAXPROCS. A start
	// busy enough to raise it is lowered after a quiet second.
	if runtime.NumCPU() > 1 && os.Getenv("GOMAXPROCS") == "" {
		if n := gaugeAfterScrapes(t, d.admin, threadsGauge, 100, 100*time.Millisecond, func(n float64) bool { return n == 1 }); n != 1 {
			t.Errorf("%s %v on an idle node, want 1 (threads adapted to the load)", threadsGauge, n)
		}
	}

	st := d.status()
	if !strings.HasPrefix(st.NodeID, "n-") || st.Name != "e2e" || st.Chain.Seq == 0 || len(st.Chain.Hash) != 64 || !st.Ready {
		t.Fatalf("status = %+v", st)
	}
	if len(st.Roles) != 1 || st.Roles[0].Name != "chat" || st.Roles[0].Resolved != "" {
		t.Fatalf("status roles = %+v", st.Roles)
	}
	// The role port answers 503 in OpenAI's error shape: nothing serves it.
	code, body := httpGet(t, "http://"+st.Roles[0].Listen+"/v1/models")
	if code != 503 || !strings.Contains(body, `no instance serves role 'chat'`) {
		t.Fatalf("role port = %d %q, want 503 no instance", code, body)
	}

	// nodeld status prints it for a person.
	out, errOut, rc := runCLI(t, "status", "--addr", d.admin)
	if rc != 0 || !strings.Contains(out, st.NodeID) || !strings.Contains(out, "role     chat") {
		t.Fatalf("nodeld status = %d %q %q", rc, out, errOut)
	}

	// A bad config is refused on SIGHUP and the old one keeps serving.
	good, _ := os.ReadFile(d.cfgPath)
	if err := os.WriteFile(d.cfgPath, []byte("node:\n  data_dir: "+dataDir+"\n  bogus: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.signal(syscall.SIGHUP)
	d.waitLog("config reload refused; keeping the old config")
	if _, m := httpGet(t, "http://"+d.admin+"/metrics"); !strings.Contains(m, "nodeld_config_last_reload_successful 0") {
		t.Fatal("reload gauge is not 0 after a bad reload")
	}
	if code, _ := httpGet(t, "http://"+st.Roles[0].Listen+"/v1/models"); code != 503 {
		t.Fatalf("role port after refused reload = %d, want it still served (503)", code)
	}
	if st := d.status(); st.Config.LastReloadSuccessful || !strings.Contains(st.Config.LastReloadError, "bogus") {
		t.Fatalf("status config after bad reload = %+v", st.Config)
	}

	// A good config is applied.
	if err := os.WriteFile(d.cfgPath, []byte(strings.Replace(string(good), "level: info", "level: debug", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	d.signal(syscall.SIGHUP)
	d.waitLog("config reloaded")
	if _, m := httpGet(t, "http://"+d.admin+"/metrics"); !strings.Contains(m, "nodeld_config_last_reload_successful 1") {
		t.Fatal("reload gauge is not 1 after a good reload")
	}

	d.signal(syscall.SIGTERM)
	if code := d.wait(); code != 0 {
		t.Fatalf("exit code after SIGTERM = %d, want 0; logs:\n%s", code, d.logText())
	}

	chainPath := filepath.Join(dataDir, chainFileName)
	out, errOut, rc = runCLI(t, "chain", "verify", chainPath)
	if rc != 0 || !strings.Contains(out, "ok:") {
		t.Fatalf("chain verify = %d %q %q", rc, out, errOut)
	}
	// Verified against the node's own key (found through the config).
	if out, errOut, rc := runCLI(t, "chain", "verify", "--config", d.cfgPath); rc != 0 {
		t.Fatalf("chain verify --config = %d %q %q", rc, out, errOut)
	}
	kinds := chainKinds(t, chainPath)
	want := []string{"chain.genesis", "node.start", "config.reload", "config.reload", "node.stop"}
	var got []string
	for _, k := range kinds {
		if k == "chain.genesis" || k == "node.start" || k == "config.reload" || k == "node.stop" {
			got = append(got, k)
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("chain kinds = %v, want %v (in order)", kinds, want)
	}

	// A hand-edited entry is named by index and fails verification.
	data, _ := os.ReadFile(chainPath)
	lines := strings.Split(string(data), "\n")
	lines[1] = strings.Replace(lines[1], `"e2e"`, `"evil"`, 1)
	if err := os.WriteFile(chainPath, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, rc = runCLI(t, "chain", "verify", chainPath)
	if rc != 1 || !regexp.MustCompile(`index 1\b`).MatchString(errOut) {
		t.Fatalf("chain verify of an edited chain = %d %q; want exit 1 naming index 1", rc, errOut)
	}

	// A broken chain refuses to start, and --chain-reset archives it.
	d2 := startDaemon(t, dataDir, nodeConfig(dataDir, ""))
	if code := d2.wait(); code != 1 {
		t.Fatalf("start on a broken chain exit = %d, want 1", code)
	}
	d3 := startDaemon(t, dataDir, nodeConfig(dataDir, ""), "--chain-reset")
	d3.waitReady()
	d3.signal(syscall.SIGINT)
	if code := d3.wait(); code != 0 {
		t.Fatalf("exit after SIGINT = %d", code)
	}
	archived, _ := filepath.Glob(chainPath + ".broken-*")
	if len(archived) != 1 {
		t.Fatalf("archived chains = %v, want one", archived)
	}
	if _, _, rc := runCLI(t, "chain", "verify", chainPath); rc != 0 {
		t.Fatal("new chain after reset does not verify")
	}
}

func chainKinds(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var kinds []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e struct{ Kind string }
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, e.Kind)
	}
	return kinds
}

// promtoolCheck runs `promtool check metrics` on an exposition. make
// test installs promtool (scripts/test-deps.sh); without it this fails.
func promtoolCheck(t *testing.T, exposition string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: run `make test-deps` (Debian package prometheus)")
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = strings.NewReader(exposition)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

func TestCLIKeygenAndID(t *testing.T) {
	t.Parallel()
	dataDir := filepath.Join(t.TempDir(), "data")
	cfg := filepath.Join(t.TempDir(), "n.yaml")
	if err := os.WriteFile(cfg, []byte(nodeConfig(dataDir, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, rc := runCLI(t, "id", "--config", cfg); rc != 1 || !strings.Contains(errOut, "keygen") {
		t.Fatalf("id without a key = %d %q", rc, errOut)
	}
	out, errOut, rc := runCLI(t, "keygen", "--config", cfg)
	if rc != 0 {
		t.Fatalf("keygen = %d %q", rc, errOut)
	}
	idRe := regexp.MustCompile(`node id:\s+(n-[0-9a-f]{16})\npublic key: ([0-9a-f]{64})`)
	m := idRe.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("keygen output %q", out)
	}
	key1, _ := os.ReadFile(filepath.Join(dataDir, "node.key"))
	if _, errOut, rc := runCLI(t, "keygen", "--config", cfg); rc != 1 || !strings.Contains(errOut, "never overwritten") {
		t.Fatalf("second keygen = %d %q", rc, errOut)
	}
	key2, _ := os.ReadFile(filepath.Join(dataDir, "node.key"))
	if string(key1) != string(key2) {
		t.Fatal("keygen overwrote the key")
	}
	out, _, rc = runCLI(t, "id", "--config", cfg)
	if rc != 0 || idRe.FindStringSubmatch(out)[0] != m[0] {
		t.Fatalf("id = %d %q, want %q", rc, out, m[0])
	}
	// A key readable by others is refused with a clear error.
	if err := os.Chmod(filepath.Join(dataDir, "node.key"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, rc := runCLI(t, "id", "--config", cfg); rc != 1 || !strings.Contains(errOut, "group or others") {
		t.Fatalf("id with a 0644 key = %d %q", rc, errOut)
	}
}

func TestCLIConfigCheck(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..", "configs")
	files, _ := filepath.Glob(filepath.Join(root, "cluster", "*.yaml"))
	files = append(files, filepath.Join(root, "nodeld.yaml"))
	if len(files) < 4 {
		t.Fatalf("example configs = %v, want nodeld.yaml and three cluster files", files)
	}
	for _, f := range files {
		if out, errOut, rc := runCLI(t, "config", "check", f); rc != 0 {
			t.Errorf("config check %s = %d %q %q", f, rc, out, errOut)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte(`node:
  data_dir: /tmp/x
  colour: blue
mesh:
  keepalive: 15 parsecs
inference:
  roles:
    - name: chat
      listen: 0.0.0.0:8090
`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, rc := runCLI(t, "config", "check", bad)
	if rc != 2 {
		t.Fatalf("config check of a bad file exit = %d, want 2", rc)
	}
	for _, want := range []string{"line 3", "colour", "line 5", "keepalive", "line 9", "loopback"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("config check output lacks %q:\n%s", want, errOut)
		}
	}
	// A file the config's own rules accept but a component refuses: labels
	// the signed facts refuse. config check names the line, and run refuses
	// the same file the same way. (An instance URL with a path, which only
	// the runner refused before, is now the config's own rule, from the
	// same grammar.)
	dataDir := filepath.Join(t.TempDir(), "data")
	refused := filepath.Join(t.TempDir(), "refused.yaml")
	if err := os.WriteFile(refused, []byte(`node:
  data_dir: `+dataDir+`
  labels: {tier: gold}
admin: {listen: "127.0.0.1:0"}
inference:
  roles:
    - name: chat
      listen: 127.0.0.1:0
  instances:
    - role: chat
      runtime: openai
      url: http://127.0.0.1:8080
`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, rc = runCLI(t, "config", "check", refused)
	if rc != 2 {
		t.Fatalf("config check of a file components refuse = %d %q, want 2", rc, errOut)
	}
	for _, want := range []string{"line 3: node.labels:", "trust"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("config check output lacks %q:\n%s", want, errOut)
		}
	}
	out, runErr, rc := runCLI(t, "run", "--config", refused)
	if rc != 2 || !strings.Contains(runErr, "line 3: node.labels:") {
		t.Errorf("run on that file = %d %q %q, want exit 2 with the same problems", rc, out, runErr)
	}

	if _, _, rc := runCLI(t, "frobnicate"); rc != 2 {
		t.Errorf("unknown command exit = %d, want 2", rc)
	}
}

// gcPercentAfterScrapes scrapes addr's /metrics (each scrape allocates)
// until done holds for go_gc_gogc_percent or 40 scrapes were made, and
// returns the last value.
func gcPercentAfterScrapes(t *testing.T, addr string, done func(float64) bool) float64 {
	t.Helper()
	return gaugeAfterScrapes(t, addr, "go_gc_gogc_percent", 40, 0, done)
}

// gaugeAfterScrapes scrapes addr's /metrics up to n times, pause apart,
// until done holds for the value of the unlabelled gauge name (-1 before
// one is seen), and returns the last value.
func gaugeAfterScrapes(t *testing.T, addr, name string, n int, pause time.Duration, done func(float64) bool) float64 {
	t.Helper()
	p := -1.0
	for i := range n {
		if i > 0 {
			time.Sleep(pause)
		}
		_, m := httpGet(t, "http://"+addr+"/metrics")
		for line := range strings.Lines(m) {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					t.Fatalf("%s %q: %v", name, v, err)
				}
				p = f
			}
		}
		if done(p) {
			break
		}
	}
	return p
}

// threadsGauge is the runtime's GOMAXPROCS in /metrics.
const threadsGauge = "go_sched_gomaxprocs_threads"

// With GOGC set, the daemon leaves the collector to it.
func TestDaemonLeavesGOGCAlone(t *testing.T) {
	t.Parallel()
	dataDir := filepath.Join(t.TempDir(), "data")
	d := startDaemonEnv(t, dataDir, nodeConfig(dataDir, ""), []string{"GOGC=150"})
	d.waitReady()
	if p := gcPercentAfterScrapes(t, d.admin, func(p float64) bool { return p != 150 }); p != 150 {
		t.Fatalf("go_gc_gogc_percent %v with GOGC=150, want 150", p)
	}
}

// With GOMAXPROCS set, the daemon leaves the thread count to it.
func TestDaemonLeavesGOMAXPROCSAlone(t *testing.T) {
	t.Parallel()
	dataDir := filepath.Join(t.TempDir(), "data")
	d := startDaemonEnv(t, dataDir, nodeConfig(dataDir, ""), []string{"GOMAXPROCS=2"})
	d.waitReady()
	if n := gaugeAfterScrapes(t, d.admin, threadsGauge, 5, 100*time.Millisecond, func(n float64) bool { return n != 2 }); n != 2 {
		t.Fatalf("%s %v with GOMAXPROCS=2, want 2", threadsGauge, n)
	}
}
