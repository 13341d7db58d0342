package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// errMiss marks a failed promise (the workload did not move, or ran
// twice), as opposed to an error of the demo itself.
var errMiss = errors.New("miss")

// The controller's timing for the demo: short, so that the move is seen
// within seconds (the shipped defaults are a 5 s tick and 30 s dead_after).
const (
	ctlTick     = "500ms"
	ctlDead     = "3s"
	ctlDescribe = "1s"
	ctlBackoff  = "1s"
)

// Bounds on each wait: generous for a loaded machine; a healthy run is
// done in well under them.
const (
	waitUp    = 45 * time.Second // nodes up, linked, the workload placed and served
	waitMove  = 45 * time.Second // from the kill to the first answer from the new host
	waitClean = 30 * time.Second // B back, its copy unloaded
)

// The addresses of the nodes. In namespaces every node has the same
// loopback ports and its own address on the bridge; on loopback each
// node has an address of its own in 127.0.0.0/8.
const (
	nsNet      = "10.214.0" // the bridge's /24 in netns mode
	loNet      = "127.0.0"
	loFirst    = 11 // loopback mode: a is 127.0.0.11, b .12, c .13
	meshPort   = 7400
	rolePort   = 8090
	adminPort  = 9464
	nsPrefix   = "nodeld-demo-"
	netnsDir   = "/run/netns"
	clientStep = 500 * time.Millisecond
	keptMark   = ".kept-by-demo" // in a temp dir kept with -keep
)

var names = []string{"a", "b", "c"}

type node struct {
	name    string
	dir     string // data_dir
	cfg     string // config file
	ns      string // network namespace, "" on loopback
	meshIP  string
	localIP string // where its role port and admin listen
	key, id string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

type demo struct {
	nodeld, pkgSrc string
	netns          bool
	keep           bool
	out            io.Writer
	tmp            string
	t0             time.Time
	nodes          map[string]*node
	swNS           string
	made           []string // namespaces made, to remove

	mu     sync.Mutex
	client *exec.Cmd
}

func newDemo(nodeld, pkg, mode string, keep bool, out io.Writer) (*demo, error) {
	d := &demo{keep: keep, out: out, nodes: map[string]*node{}}
	var err error
	if d.nodeld, err = filepath.Abs(nodeld); err != nil {
		return nil, err
	}
	if d.pkgSrc, err = filepath.Abs(pkg); err != nil {
		return nil, err
	}
	if _, err := os.Stat(d.nodeld); err != nil {
		return nil, fmt.Errorf("%s: %w (make build)", nodeld, err)
	}
	if _, err := os.Stat(filepath.Join(d.pkgSrc, "manifest.json")); err != nil {
		return nil, fmt.Errorf("%s is no package: %w (make example-package)", pkg, err)
	}
	switch mode {
	case "auto":
		d.netns = os.Geteuid() == 0 && canNetns()
	case "netns":
		if os.Geteuid() != 0 {
			return nil, errors.New("-mode netns needs root")
		}
		d.netns = true
	case "loopback":
	default:
		return nil, fmt.Errorf("-mode %q: want auto, netns or loopback", mode)
	}
	return d, nil
}

// canNetns reports whether ip(8) is there and namespaces can be made.
func canNetns() bool {
	if _, err := exec.LookPath("ip"); err != nil {
		return false
	}
	name := fmt.Sprintf("%s%d-probe", nsPrefix, os.Getpid())
	if exec.Command("ip", "netns", "add", name).Run() != nil {
		return false
	}
	_ = exec.Command("ip", "netns", "del", name).Run()
	return true
}

// say narrates one line, with the time since the demo began.
func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, "[%5.1fs] %s\n", time.Since(d.t0).Seconds(), fmt.Sprintf(format, args...))
}

func (d *demo) run(ctx context.Context) error {
	d.t0 = time.Now()
	var err error
	removeStaleDirs()
	if d.tmp, err = os.MkdirTemp("", fmt.Sprintf("%s%d-", nsPrefix, os.Getpid())); err != nil {
		return err
	}
	if d.netns {
		removeStale()
		d.say("three nodes, each in a network namespace of its own, on a bridge (%s.0/24) in a fourth; nothing leaves this machine", nsNet)
	} else {
		d.say("three nodes as processes on loopback (%s.%d-%d)", loNet, loFirst, loFirst+2)
	}
	if err := d.setup(ctx); err != nil {
		return err
	}
	if err := d.startAll(ctx); err != nil {
		return err
	}
	return d.story(ctx)
}

// setup makes the keys, signs the package, writes the configs and puts
// the package in A's store.
func (d *demo) setup(ctx context.Context) error {
	key := filepath.Join(d.tmp, "publisher.key")
	out, err := d.cli(ctx, "package", "keygen", "--out", key)
	if err != nil {
		return err
	}
	anchor := strings.TrimSpace(out)
	pkg := filepath.Join(d.tmp, "echo-llm")
	if err := copyDir(d.pkgSrc, pkg); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(pkg, "manifest.sig"))
	if _, err := d.cli(ctx, "package", "sign", "--key", key, pkg); err != nil {
		return err
	}
	d.say("signed the echo-llm example package with a publisher key made for the demo")

	for i, name := range names {
		n := &node{name: name, dir: filepath.Join(d.tmp, name), cfg: filepath.Join(d.tmp, name+".yaml")}
		if d.netns {
			n.ns = fmt.Sprintf("%s%d-%s", nsPrefix, os.Getpid(), name)
			n.meshIP = fmt.Sprintf("%s.%d", nsNet, i+1)
			n.localIP = "127.0.0.1"
		} else {
			n.meshIP = fmt.Sprintf("%s.%d", loNet, loFirst+i)
			n.localIP = n.meshIP
		}
		if err := os.WriteFile(n.cfg, []byte("node:\n  data_dir: "+n.dir+"\n"), 0o600); err != nil {
			return err
		}
		if _, err := d.cli(ctx, "keygen", "--config", n.cfg); err != nil {
			return err
		}
		out, err := d.cli(ctx, "id", "--config", n.cfg)
		if err != nil {
			return err
		}
		k, id := keyLine.FindStringSubmatch(out), idLine.FindStringSubmatch(out)
		if k == nil || id == nil {
			return fmt.Errorf("nodeld id: unexpected output %q", out)
		}
		n.key, n.id = k[1], id[1]
		d.nodes[name] = n
	}
	for _, n := range d.nodes {
		if err := os.WriteFile(n.cfg, []byte(d.config(n, anchor)), 0o600); err != nil {
			return err
		}
	}
	if _, err := d.cli(ctx, "package", "add", "--config", d.nodes["a"].cfg, pkg); err != nil {
		return err
	}
	d.say("a: controller (tick %s, dead_after %s), workload host; declares workload chat = echo-llm, prefer b", ctlTick, ctlDead)
	d.say("b: workload host that lets a place there")
	d.say("c: no model; uses role chat from a or b over the mesh")
	return nil
}

var (
	keyLine = regexp.MustCompile(`public key: ([0-9a-f]{64})`)
	idLine  = regexp.MustCompile(`node id: +(n-[0-9a-f]{16})`)
)

// config renders a node's config: the other nodes are keyed, paired
// peers; a and b expose role chat to c; a runs the controller with the
// workload declared.
func (d *demo) config(n *node, anchor string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "node:\n  name: %s\n  data_dir: %s\n", n.name, n.dir)
	b.WriteString("log:\n  level: info\n  format: json\n")
	fmt.Fprintf(&b, "admin:\n  listen: %s:%d\n", n.localIP, adminPort)
	fmt.Fprintf(&b, "mesh:\n  listen: %s:%d\n  peers:\n", n.meshIP, meshPort)
	for _, name := range names {
		if p := d.nodes[name]; p != n {
			fmt.Fprintf(&b, "    - name: %s\n      addr: %s:%d\n      key: %s\n      tier: paired\n", p.name, p.meshIP, meshPort, p.key)
		}
	}
	fmt.Fprintf(&b, "inference:\n  probe_interval: 500ms\n  roles:\n    - name: chat\n      listen: %s:%d\n", n.localIP, rolePort)
	switch n.name {
	case "a", "b":
		b.WriteString("      expose: true\n      serve_to: [c]\n")
	case "c":
		b.WriteString("      use_from: [a, b]\n")
	}
	// `ip netns exec` remounts /sys: a node in a namespace sees no cgroup
	// hierarchy, so its host opts out of resource isolation there
	// (Landlock still holds).
	isolation := ""
	if d.netns {
		isolation = "  isolation:\n    resources: off\n"
	}
	switch n.name {
	case "a":
		fmt.Fprintf(&b, "host:\n  enabled: true\n  trust_anchors: [%s]\n"+isolation, anchor)
		fmt.Fprintf(&b, `controller:
  enabled: true
  tick: %s
  dead_after: %s
  describe_timeout: %s
  retry_backoff: %s
  policy:
    kinds:
      inference: {min_tier: paired}
  workloads:
    - name: chat
      package: echo-llm
      prefer: [b]
`, ctlTick, ctlDead, ctlDescribe, ctlBackoff)
	case "b":
		fmt.Fprintf(&b, "host:\n  enabled: true\n  controllers: [%s]\n  trust_anchors: [%s]\n"+isolation, d.nodes["a"].key, anchor)
	}
	return b.String()
}

// startAll makes the network (netns mode) and starts the three nodes.
func (d *demo) startAll(ctx context.Context) error {
	if d.netns {
		if err := d.network(); err != nil {
			return err
		}
	}
	for _, name := range names {
		if err := d.start(d.nodes[name]); err != nil {
			return err
		}
	}
	d.say("started nodeld on a (pid %d), b (pid %d) and c (pid %d)", d.nodes["a"].pid(), d.nodes["b"].pid(), d.nodes["c"].pid())
	return nil
}

// network makes the switch namespace with its bridge and one namespace
// per node, linked to it by a veth pair.
func (d *demo) network() error {
	d.swNS = fmt.Sprintf("%s%d-sw", nsPrefix, os.Getpid())
	steps := [][]string{
		{"netns", "add", d.swNS},
		{"-n", d.swNS, "link", "add", "br0", "type", "bridge"},
		{"-n", d.swNS, "link", "set", "br0", "up"},
	}
	if err := d.ipSteps(steps, d.swNS); err != nil {
		return err
	}
	for _, name := range names {
		n := d.nodes[name]
		port := "p-" + name
		steps := [][]string{
			{"netns", "add", n.ns},
			{"-n", n.ns, "link", "set", "lo", "up"},
			{"-n", n.ns, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", d.swNS},
			{"-n", d.swNS, "link", "set", port, "master", "br0"},
			{"-n", d.swNS, "link", "set", port, "up"},
			{"-n", n.ns, "addr", "add", n.meshIP + "/24", "dev", "eth0"},
			{"-n", n.ns, "link", "set", "eth0", "up"},
		}
		if err := d.ipSteps(steps, n.ns); err != nil {
			return err
		}
	}
	return nil
}

// ipSteps runs ip commands in order; ns is recorded for removal once
// made (its first step).
func (d *demo) ipSteps(steps [][]string, ns string) error {
	for i, s := range steps {
		if out, err := exec.Command("ip", s...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(s, " "), err, strings.TrimSpace(string(out)))
		}
		if i == 0 {
			d.made = append(d.made, ns)
		}
	}
	return nil
}

// command runs name in the node's namespace (if any); it is killed if
// the demo dies first.
func (d *demo) command(ns string, name string, args ...string) *exec.Cmd {
	var cmd *exec.Cmd
	if ns != "" {
		cmd = exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...)
	} else {
		cmd = exec.Command(name, args...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

func (d *demo) start(n *node) error {
	logf, err := os.OpenFile(filepath.Join(d.tmp, n.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := d.command(n.ns, d.nodeld, "run", "--config", n.cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	n.mu.Lock()
	n.cmd, n.done = cmd, done
	n.mu.Unlock()
	return nil
}

func (n *node) pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.cmd.Process == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// kill SIGKILLs the node's nodeld (ip netns exec execs it, so the pid is
// nodeld's) and waits for it to be gone.
func (n *node) kill() {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// cli runs a nodeld command in this namespace (keys, packages, ctl over
// the unix socket) and returns its stdout; a non-zero exit is an error
// with its stderr.
func (d *demo) cli(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, d.nodeld, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("nodeld %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// ctlJSON runs nodeld ctl --json VERB... against A's socket.
func (d *demo) ctlJSON(ctx context.Context, v any, args ...string) error {
	sock := filepath.Join(d.nodes["a"].dir, "nodeld.sock")
	out, err := d.cli(ctx, append([]string{"ctl", "--socket", sock, "--json"}, args...)...)
	if err != nil {
		return err
	}
	return json.Unmarshal([]byte(out), v)
}

type placement struct {
	DecisionID string `json:"decision_id"`
	Workload   string `json:"workload"`
	Node       string `json:"node"`
	InstanceID string `json:"instance_id"`
	Life       string `json:"life"`
	HostState  string `json:"host_state"`
}

type hostStatus struct {
	Instances []struct {
		InstanceID string `json:"instance_id"`
		Package    string `json:"package"`
		Lifecycle  string `json:"lifecycle"`
	} `json:"instances"`
}

// placed returns A's placements of workload chat that are placed.
func (d *demo) placed(ctx context.Context) ([]placement, error) {
	var ps []placement
	if err := d.ctlJSON(ctx, &ps, "placements"); err != nil {
		return nil, err
	}
	var out []placement
	for _, p := range ps {
		if p.Workload == "chat" && p.Life == "placed" {
			out = append(out, p)
		}
	}
	return out, nil
}

// name returns the demo's name for a node id.
func (d *demo) name(id string) string {
	for _, n := range d.nodes {
		if n.id == id {
			return n.name
		}
	}
	if id == "" {
		return "?"
	}
	return id
}

// answer is one line of the client.
type answer struct {
	at     time.Time
	seq    int
	status int
	route  string
	text   string
	err    string
}

// story is the demo proper: wait for b to serve, kill it, watch the move,
// bring b back and count the copies.
func (d *demo) story(ctx context.Context) error {
	a, b, c := d.nodes["a"], d.nodes["b"], d.nodes["c"]
	answers, err := d.startClient(ctx, c)
	if err != nil {
		return err
	}
	d.say("client: one request to c's role port (%s:%d) every %s; each line names the node that answered", c.localIP, rolePort, clientStep)

	// 1. The controller places chat on b; c's requests go there.
	var first placement
	err = d.until(ctx, waitUp, "a's controller to place chat and b to serve c", answers, func(ans *answer) bool {
		if first.Node == "" {
			if ps, err := d.placed(ctx); err == nil && len(ps) == 1 && ps[0].HostState == "running" {
				first = ps[0]
				d.say("a placed workload chat on %s (decision %s..., instance %s): running", d.name(first.Node), first.DecisionID[:16], first.InstanceID)
			}
		}
		return first.Node == b.id && ans != nil && ans.status == 200 && ans.route == b.id
	})
	if err != nil {
		return err
	}
	if err := d.drain(ctx, answers, 3, func(ans *answer) error {
		if ans.route != b.id {
			return fmt.Errorf("%w: request %d answered by %s while b hosts chat", errMiss, ans.seq, d.name(ans.route))
		}
		return nil
	}); err != nil {
		return err
	}

	// 2. kill -9 b.
	d.say(">>> kill -9 b (pid %d), the node that hosts chat", b.pid())
	killed := time.Now()
	b.kill()
	var moved placement
	failed := 0
	err = d.until(ctx, waitMove, "chat to be served again from another node", answers, func(ans *answer) bool {
		if moved.Node == "" {
			if ps, err := d.placed(ctx); err == nil {
				for _, p := range ps {
					if p.Node != b.id && p.HostState == "running" {
						moved = p
						d.say("a: b silent for dead_after (%s): placed chat again on %s (decision %s...): running", ctlDead, d.name(p.Node), p.DecisionID[:16])
					}
				}
			}
		}
		if ans != nil && ans.status != 200 {
			failed++
		}
		return ans != nil && ans.status == 200 && ans.route != b.id && ans.route != ""
	})
	if err != nil {
		return err
	}
	served := time.Since(killed)
	if moved.Node == "" {
		if err := d.until(ctx, 10*time.Second, "a to show the new placement", answers, func(*answer) bool {
			ps, err := d.placed(ctx)
			if err == nil && len(ps) == 1 && ps[0].Node != b.id {
				moved = ps[0]
			}
			return moved.Node != ""
		}); err != nil {
			return err
		}
	}
	d.say(">>> chat moved from b to %s: served again %.1fs after the kill (%d requests answered with an error meanwhile)", d.name(moved.Node), served.Seconds(), failed)
	if err := d.drain(ctx, answers, 3, func(ans *answer) error {
		if ans.status != 200 || ans.route != moved.Node {
			return fmt.Errorf("%w: after the move, request %d: status %d from %s", errMiss, ans.seq, ans.status, d.name(ans.route))
		}
		return nil
	}); err != nil {
		return err
	}

	// 3. b comes back: whatever copy it still has is unloaded; one copy.
	d.say(">>> starting b again")
	if err := d.start(b); err != nil {
		return err
	}
	var bAlive bool
	err = d.until(ctx, waitClean, "b to be back with no copy of chat", answers, func(ans *answer) bool {
		if ans != nil && (ans.status != 200 || ans.route != moved.Node) {
			d.say("note: request %d: status %d from %s", ans.seq, ans.status, d.name(ans.route))
		}
		var nodes []struct {
			ID       string `json:"id"`
			Liveness string `json:"liveness"`
		}
		if !bAlive && d.ctlJSON(ctx, &nodes, "nodes") == nil {
			for _, n := range nodes {
				if n.ID == b.id && n.Liveness == "alive" {
					bAlive = true
					d.say("a: b answers again")
				}
			}
		}
		var hs hostStatus
		return bAlive && d.ctlJSON(ctx, &hs, "status", "b") == nil && len(hs.Instances) == 0
	})
	if err != nil {
		return err
	}
	ps, err := d.placed(ctx)
	if err != nil {
		return err
	}
	var hsA hostStatus
	if err := d.ctlJSON(ctx, &hsA, "status", "self"); err != nil {
		return err
	}
	procs := d.instanceProcs()
	d.say("copies of chat: a's placements %d (on %s), instances on a %d, on b 0, echo-llm processes running %d",
		len(ps), d.placedOn(ps), len(hsA.Instances), len(procs))
	if len(ps) != 1 || ps[0].Node != a.id || len(hsA.Instances) != 1 || len(procs) != 1 {
		return fmt.Errorf("%w: want exactly one copy of chat, on a", errMiss)
	}
	d.say("done in %.0fs: chat moved from b to a %.1fs after b was killed, and exactly one copy runs", time.Since(d.t0).Seconds(), served.Seconds())
	return nil
}

func (d *demo) placedOn(ps []placement) string {
	var s []string
	for _, p := range ps {
		s = append(s, d.name(p.Node))
	}
	return strings.Join(s, ", ")
}

// startClient runs the client loop against c's role port, in c's
// namespace if it has one, and returns its answers as they come; each is
// narrated.
func (d *demo) startClient(ctx context.Context, c *node) (<-chan *answer, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := d.command(c.ns, self, "client", "-url", fmt.Sprintf("http://%s:%d", c.localIP, rolePort), "-every", clientStep.String())
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.client = cmd
	d.mu.Unlock()
	ch := make(chan *answer, 256)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			ans, ok := parseAnswer(sc.Text())
			if !ok {
				continue
			}
			d.narrate(ans)
			select {
			case ch <- ans:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

func (d *demo) narrate(ans *answer) {
	switch {
	case ans.status == 200:
		d.say("  request %3d -> answered by %s  %s", ans.seq, d.name(ans.route), ans.text)
	case ans.err != "":
		d.say("  request %3d -> failed: %s", ans.seq, ans.err)
	default:
		d.say("  request %3d -> %d %s", ans.seq, ans.status, ans.text)
	}
}

// until calls cond on each answer (and with nil every 250 ms) until it
// holds, within limit.
func (d *demo) until(ctx context.Context, limit time.Duration, what string, answers <-chan *answer, cond func(*answer) bool) error {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		var ans *answer
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("%w: timed out after %s waiting for %s (logs: -keep)", errMiss, limit, what)
		case a, ok := <-answers:
			if !ok {
				return errors.New("the client stopped")
			}
			ans = a
		case <-tick.C:
		}
		if cond(ans) {
			return nil
		}
	}
}

// drain checks the next n answers.
func (d *demo) drain(ctx context.Context, answers <-chan *answer, n int, check func(*answer) error) error {
	for range n {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Second):
			return errors.New("the client went silent")
		case a, ok := <-answers:
			if !ok {
				return errors.New("the client stopped")
			}
			if err := check(a); err != nil {
				return err
			}
		}
	}
	return nil
}

// instanceProcs lists the pids of processes whose executable lies in
// the demo's temp dir: the echo-llm instances the hosts started.
func (d *demo) instanceProcs() []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil {
			continue
		}
		if strings.HasPrefix(exe, d.tmp+string(filepath.Separator)) {
			out = append(out, pid)
		}
	}
	return out
}

// logTails prints the last lines of each node's log, for a run that
// failed.
func (d *demo) logTails(w io.Writer) {
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(d.tmp, name+".log"))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		fmt.Fprintf(w, "--- the last lines of %s's log:\n", name)
		for _, l := range lines[max(0, len(lines)-15):] {
			fmt.Fprintln(w, l)
		}
	}
}

// cleanup stops everything the demo started and removes what it made.
func (d *demo) cleanup() {
	d.mu.Lock()
	client := d.client
	d.mu.Unlock()
	if client != nil && client.Process != nil {
		_ = client.Process.Kill()
		_ = client.Wait()
	}
	for _, n := range d.nodes {
		n.kill()
	}
	if d.tmp != "" {
		for range 3 {
			pids := d.instanceProcs()
			if len(pids) == 0 {
				break
			}
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for _, ns := range slices.Backward(d.made) {
		delNetns(ns)
	}
	if d.tmp == "" {
		return
	}
	if d.keep {
		_ = os.WriteFile(filepath.Join(d.tmp, keptMark), nil, 0o600)
		fmt.Fprintf(d.out, "kept %s (configs, logs, data dirs)\n", d.tmp)
		return
	}
	_ = os.RemoveAll(d.tmp)
}

// delNetns kills what runs in a namespace and removes it.
func delNetns(ns string) {
	if out, err := exec.Command("ip", "netns", "pids", ns).Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	_ = exec.Command("ip", "netns", "del", ns).Run()
}

// removeStale removes the namespaces of earlier demos whose process is
// gone (killed before its cleanup), with what runs in them.
func removeStale() {
	ents, err := os.ReadDir(netnsDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), nsPrefix)
		if !ok {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			delNetns(e.Name())
		}
	}
}

// removeStaleDirs removes the temp dirs of earlier demos whose process
// is gone (nodeld-demo-<pid>-*), except those kept with -keep.
func removeStaleDirs() {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), nsPrefix+"*"))
	for _, m := range matches {
		rest := strings.TrimPrefix(filepath.Base(m), nsPrefix)
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(filepath.Join(m, keptMark)); err == nil {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(m)
		}
	}
}

// copyDir copies the regular files of a package directory, keeping
// their modes.
func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(path string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if e.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !e.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file", path)
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, info.Mode().Perm())
	})
}
