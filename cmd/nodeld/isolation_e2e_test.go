package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/operator"
	"github.com/nodeld/nodeld/internal/plane"
)

// isolationPackage builds and signs a package in dir whose command is
// script (a shell script next to the echo-llm binary) with args, holding
// memBytes.
func isolationPackage(t *testing.T, tmp, name, script string, args []string, memBytes int) string {
	t.Helper()
	dir := filepath.Join(tmp, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(echoBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "echo-llm"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "run.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	tmpl := fmt.Sprintf(`{"schema": 1, "id": %q, "version": "0.1.0", "kind": "inference", "role": "chat",
  "runtime": {"type": "process", "command": "run.sh", "args": [%s], "health": {"path": "/health"}},
  "variants": [{"name": "default", "requires": {"os": ["linux"], "runtimes": ["process"]},
    "resources": {"mem_bytes": %d}}], "files": []}`, name, strings.Join(quoted, ", "), memBytes)
	tmplPath := filepath.Join(tmp, name+".json")
	if err := os.WriteFile(tmplPath, []byte(tmpl), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, rc := runCLI(t, "package", "build", "--manifest", tmplPath, dir); rc != 0 {
		t.Fatalf("package build %s: %q", name, errOut)
	}
	if _, errOut, rc := runCLI(t, "package", "sign", "--key", filepath.Join(tmp, "publisher.key"), dir); rc != 0 {
		t.Fatalf("package sign %s: %q", name, errOut)
	}
	return dir
}

// attackScript tries, from inside an instance, what a compromised model
// server would: read the node key, list the data dir, append to the
// chain, write its package directory, read a neighbour's scratch
// directory (named by $1). It writes what happened to its own scratch
// directory (which must work) and then serves.
const attackScript = `#!/bin/sh
d=$(dirname "$(dirname "$PWD")")
try() { n=$1; shift; if "$@" >/dev/null 2>&1; then echo "ok $n"; else echo "denied $n"; fi; }
{
try key cat "$d/node.key"
try list ls "$d"
try chain sh -c "echo x >> '$d/chain.log'"
try pkg sh -c "echo x > '$PWD/pwned'"
try other cat "$d/scratch/$1/secret"
try tmp sh -c 'echo x > "$TMPDIR/t"'
} > "$NODELD_SCRATCH/result.tmp"
mv "$NODELD_SCRATCH/result.tmp" "$NODELD_SCRATCH/result"
exec ./echo-llm --listen "127.0.0.1:$NODELD_PORT" --model echo-1
`

// hogScript serves, and on its first run allocates past its memory.
const hogScript = `#!/bin/sh
if [ -e "$NODELD_SCRATCH/ran" ]; then
  exec ./echo-llm --listen "127.0.0.1:$NODELD_PORT" --model echo-1
fi
touch "$NODELD_SCRATCH/ran"
./echo-llm --listen "127.0.0.1:$NODELD_PORT" --model echo-1 &
sleep 1
x=$(head -c 400000000 /dev/zero | tr '\0' a)
echo "survived ${#x}"
`

// TestIsolationE2E: a placed instance cannot reach the node's key or
// state, another instance's files or its own package (acceptance 1), and
// one that allocates past its declared memory is killed by the kernel,
// reported and restarted while its neighbour serves on (acceptance 3).
func TestIsolationE2E(t *testing.T) {
	// Parallel with other daemons: each one's instance cgroups and
	// scratch directories are named after its node id.
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch uids and create cgroups (CI runs as root)")
	}
	tmp := t.TempDir()
	// The instances' uids must reach the data dir, as under /var/lib.
	// nodeld, started as the launcher, must be executable by them, as
	// under /usr/local/bin.
	for _, p := range []string{tmp, filepath.Dir(tmp), filepath.Dir(nodeldBinary(t))} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dataDir := filepath.Join(tmp, "data")
	anchorOut, errOut, rc := runCLI(t, "package", "keygen", "--out", filepath.Join(tmp, "publisher.key"))
	if rc != 0 {
		t.Fatalf("package keygen: %q", errOut)
	}
	cfgPath := filepath.Join(tmp, "pre.yaml")
	base := nodeConfig(dataDir, "")
	if err := os.WriteFile(cfgPath, []byte(base), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, rc := runCLI(t, "keygen", "--config", cfgPath)
	if rc != 0 {
		t.Fatalf("keygen: %q", errOut)
	}
	nodeKey := regexp.MustCompile(`public key: ([0-9a-f]{64})`).FindStringSubmatch(out)[1]
	cfg := base + fmt.Sprintf("host:\n  enabled: true\n  controllers: [%s]\n  trust_anchors: [%s]\n", nodeKey, strings.TrimSpace(anchorOut))
	d := startDaemon(t, dataDir, cfg)
	d.waitReady()
	ctlArgs := func(args ...string) []string { return append([]string{"ctl", "--config", d.cfgPath}, args...) }
	instRE := regexp.MustCompile(`[a-z-]+-[0-9a-f]{8}-n-[0-9a-f]{16}`)
	place := func(dir string) string {
		t.Helper()
		out, errOut, rc := runCLI(t, ctlArgs("place", "self", dir)...)
		if rc != 0 {
			t.Fatalf("ctl place self %s = %d\n%s\n%s\nlogs:\n%s", dir, rc, out, errOut, d.logText())
		}
		return instRE.FindString(out)
	}

	if out, _, rc := runCLI(t, "status", "--addr", d.admin); rc != 0 || !strings.Contains(out, "isolate  filesystem landlock") || !strings.Contains(out, "users dynamic") {
		t.Fatalf("nodeld status = %d\n%s\nwant the isolation enforced", rc, out)
	}

	// The neighbour: serves, and keeps a secret in its scratch directory.
	neighbour := place(isolationPackage(t, tmp, "neighbour", "#!/bin/sh\nexec ./echo-llm --listen \"127.0.0.1:$NODELD_PORT\" --model echo-1\n", nil, 64<<20))
	secret := filepath.Join(dataDir, "scratch", neighbour, "secret")
	if err := os.WriteFile(secret, []byte("neighbour's secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	keyBefore, err := os.ReadFile(filepath.Join(dataDir, "node.key"))
	if err != nil {
		t.Fatal(err)
	}

	attackDir := isolationPackage(t, tmp, "attack", attackScript, []string{neighbour}, 64<<20)
	attack := place(attackDir)
	result := filepath.Join(dataDir, "scratch", attack, "result")
	waitFor(t, "the attack instance's report", func() bool { _, err := os.Stat(result); return err == nil })
	got, err := os.ReadFile(result)
	if err != nil {
		t.Fatal(err)
	}
	want := "denied key\ndenied list\ndenied chain\ndenied pkg\ndenied other\nok tmp\n"
	if string(got) != want {
		t.Errorf("from inside the instance:\n%s\nwant:\n%s", got, want)
	}
	if keyAfter, _ := os.ReadFile(filepath.Join(dataDir, "node.key")); !bytes.Equal(keyBefore, keyAfter) {
		t.Error("node.key changed")
	}
	if s, _ := os.ReadFile(secret); string(s) != "neighbour's secret" {
		t.Errorf("neighbour's secret = %q", s)
	}
	if chainData, _ := os.ReadFile(filepath.Join(dataDir, chainFileName)); bytes.Contains(chainData, []byte("\nx\n")) {
		t.Error("the instance appended to chain.log")
	}
	pkgDirs, _ := filepath.Glob(filepath.Join(dataDir, "packages", "attack-*", "pwned"))
	if len(pkgDirs) != 0 {
		t.Errorf("the instance wrote its package directory: %v", pkgDirs)
	}
	waitFor(t, "the attack instance to run", func() bool {
		out, _, _ := runCLI(t, ctlArgs("status", "self")...)
		return strings.Contains(out, attack) && strings.Contains(lineOf(out, attack), "running")
	})
	role := d.status().Roles[0]
	if out := curl(t, "-sS", "http://"+role.Listen+"/v1/chat/completions", "-H", "Content-Type: application/json",
		"-d", `{"messages":[{"role":"user","content":"isolated"}]}`); !strings.Contains(out, "echo: isolated") {
		t.Fatalf("role served: %s", out)
	}

	// A hog: killed by the kernel past its 32 MiB, reported, restarted.
	hog := place(isolationPackage(t, tmp, "hog", hogScript, nil, 32<<20))
	// The kill is chained before the supervisor restarts the run; a
	// restart for any other reason would leave it out (the second run
	// does not allocate), so wait for the record, then for the restart.
	deadline := time.Now().Add(waitTimeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for kinds := ""; !strings.Contains(kinds, "host.oom_killed"); <-tick.C {
		if time.Now().After(deadline) {
			out, _, _ := runCLI(t, ctlArgs("status", "self")...)
			t.Fatalf("chain lacks host.oom_killed: %s\nctl status:\n%s\nlogs:\n%s", kinds, out, d.logText())
		}
		kinds = strings.Join(chainKinds(t, filepath.Join(dataDir, chainFileName)), " ")
	}
	waitFor(t, "the hog to be restarted", func() bool {
		out, _, _ := runCLI(t, ctlArgs("status", "self")...)
		l := lineOf(out, hog)
		return strings.Contains(l, "running") && !strings.Contains(l, "restarts 0")
	})
	if _, body := httpGet(t, "http://"+d.admin+"/metrics"); !strings.Contains(body, "nodeld_host_instance_oom_kills_total 1") {
		t.Errorf("metrics lack one OOM kill")
	}
	out, _, _ = runCLI(t, ctlArgs("status", "self")...)
	if l := lineOf(out, neighbour); !strings.Contains(l, "running") {
		t.Errorf("neighbour after the OOM kill: %q", l)
	}
}

// lineOf is the first line of out that contains s.
func lineOf(out, s string) string {
	for l := range strings.Lines(out) {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// TestIsolationOffRefusesRequiringPackage: with host.isolation opted out,
// the host's status and its signed facts say so, and a package whose
// variant requires isolation.fs is placed nowhere, the engine naming the
// missing record in ctl explain (acceptance 4).
func TestIsolationOffRefusesRequiringPackage(t *testing.T) {
	t.Parallel()
	// The echo-llm package with a variant that requires filesystem
	// isolation.
	tmpl, err := os.ReadFile("../../examples/packages/echo-llm/manifest.template.json")
	if err != nil {
		t.Fatal(err)
	}
	tmpl = bytes.Replace(tmpl, []byte(`"resources":`), []byte(`"requirements": [{"select": "isolation.fs"}], "resources":`), 1)
	pkgDir, anchor := meshPackage(t, "echo-llm-needs-fs", string(tmpl), nil)
	cl := newCtlCluster(t, "a")
	off := "  isolation:\n    filesystem: off\n    resources: off\n    users: off\n"
	a := startNodeAt(t, cl.dirs["a"], cl.config("a", nil, controllerSection(anchor, "200ms", "5s", "3s")+hostSection(cl.keys["a"], anchor)+off, false), nil)
	if iso := a.n.host.Status().Isolation; iso == nil || iso.Filesystem != "off" || iso.Cgroup != "off" || iso.Users != "off" {
		t.Fatalf("host status isolation = %+v, want every part off", iso)
	}
	f, err := a.n.facts.Facts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range f.Capabilities {
		if strings.HasPrefix(c.ID, "isolation.") {
			t.Errorf("facts claim %s with isolation off", c.ID)
		}
	}
	if !strings.Contains(fmt.Sprint(f.Notes), "filesystem isolation off") {
		t.Errorf("facts notes %v do not say filesystem isolation is off", f.Notes)
	}
	sock := a.n.config().SocketPath()
	waitLong(t, "the controller to hear from its own host", func() bool {
		if _, _, rc := runCtl(t, "--socket", sock, "nodes"); rc != 0 {
			return false
		}
		var nodes []operator.NodeDoc
		ctlJSON(t, sock, &nodes, "nodes")
		return len(nodes) == 1 && nodes[0].Liveness == "alive" && nodes[0].HasFacts
	})
	rep, err := a.n.ctrl.Place(context.Background(), plane.Order{PackageDir: pkgDir, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Decision.Chosen != nil {
		t.Fatalf("placed a package requiring isolation.fs on a node without it:\n%s", rep.Explain())
	}
	out, errOut, rc := runCtl(t, "--socket", sock, "explain", rep.DecisionID)
	if rc != 0 || !strings.Contains(out, "isolation.fs") {
		t.Fatalf("ctl explain = %d, want the missing isolation.fs named:\n%s\n%s", rc, out, errOut)
	}
}

// TestIsolationNonRootDaemon: nodeld running as an unprivileged user, as
// the shipped unit runs it (no uid switch, no cgroups), still keeps the
// node key, the data dir, the chain and the package out of an instance's
// reach (acceptance 2).
func TestIsolationNonRootDaemon(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to start nodeld as another user (CI runs as root)")
	}
	const nobody = 65534
	tmp := t.TempDir()
	for _, p := range []string{tmp, filepath.Dir(tmp), filepath.Dir(nodeldBinary(t))} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dataDir := filepath.Join(tmp, "data")
	anchorOut, errOut, rc := runCLI(t, "package", "keygen", "--out", filepath.Join(tmp, "publisher.key"))
	if rc != 0 {
		t.Fatalf("package keygen: %q", errOut)
	}
	cfgPath := filepath.Join(tmp, "pre.yaml")
	base := nodeConfig(dataDir, "")
	if err := os.WriteFile(cfgPath, []byte(base), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, rc := runCLI(t, "keygen", "--config", cfgPath)
	if rc != 0 {
		t.Fatalf("keygen: %q", errOut)
	}
	nodeKey := regexp.MustCompile(`public key: ([0-9a-f]{64})`).FindStringSubmatch(out)[1]
	if err := filepath.WalkDir(dataDir, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(p, nobody, nobody)
	}); err != nil {
		t.Fatal(err)
	}
	// No resources declared: a daemon that cannot make cgroups places it.
	attackDir := isolationPackage(t, tmp, "attack", attackScript, []string{"none"}, 0)
	cfg := base + fmt.Sprintf("host:\n  enabled: true\n  controllers: [%s]\n  trust_anchors: [%s]\n", nodeKey, strings.TrimSpace(anchorOut))
	cfgFile := filepath.Join(tmp, "nodeld.yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	d := &proc{t: t, dataDir: dataDir, cfgPath: cfgFile, done: make(chan struct{})}
	d.cmd = exec.Command(nodeldBinary(t), "run", "--config", cfgFile)
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	d.launch()
	d.waitReady()
	if out, _, rc := runCLI(t, "status", "--addr", d.admin); rc != 0 || !strings.Contains(out, "isolate  filesystem landlock") || !strings.Contains(out, "users shared") {
		t.Fatalf("nodeld status = %d\n%s\nwant landlock with the daemon's uid", rc, out)
	}
	keyBefore, err := os.ReadFile(filepath.Join(dataDir, "node.key"))
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, rc = runCLI(t, "ctl", "--config", cfgFile, "place", "self", attackDir)
	if rc != 0 {
		t.Fatalf("ctl place self = %d\n%s\n%s\nlogs:\n%s", rc, out, errOut, d.logText())
	}
	attack := regexp.MustCompile(`attack-[0-9a-f]{8}-n-[0-9a-f]{16}`).FindString(out)
	result := filepath.Join(dataDir, "scratch", attack, "result")
	waitFor(t, "the attack instance's report", func() bool { _, err := os.Stat(result); return err == nil })
	got, err := os.ReadFile(result)
	if err != nil {
		t.Fatal(err)
	}
	if want := "denied key\ndenied list\ndenied chain\ndenied pkg\ndenied other\nok tmp\n"; string(got) != want {
		t.Errorf("from inside the instance of a non-root daemon:\n%s\nwant:\n%s", got, want)
	}
	if keyAfter, _ := os.ReadFile(filepath.Join(dataDir, "node.key")); !bytes.Equal(keyBefore, keyAfter) {
		t.Error("node.key changed")
	}
}
