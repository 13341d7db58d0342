//go:build faults

package faults

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Every node listens on the same ports: each has its own namespace.
const (
	netPrefix = "10.213.0" // the nodes' addresses on the switch: .1, .2, ...
	meshPort  = 7400
	rolePort  = "127.0.0.1:8090" // role chat (ops on the operator nodes)
	genPort   = "127.0.0.1:8091" // role gen, served only by the controller's echo-llm
	adminAddr = "127.0.0.1:9464"
	echoAddr  = "127.0.0.1:8081" // the adopted model server of a serving node
	// chunkDelay paces the echo server's streamed words, so a stream
	// lasts long enough to be in flight when a fault strikes.
	chunkDelay = 20 * time.Millisecond
	// waitLimit bounds every wait for a cluster condition.
	waitLimit = 30 * time.Second
)

// The cluster's nodes and what each does.
const (
	nodeA = "a" // serves chat to c from its own echo server; a workload host for e's controller
	nodeB = "b" // serves chat to c too; a workload host for d's calls and e's controller
	nodeC = "c" // the consumer: the client drives its role port
	nodeD = "d" // the operator's node: nodeld ctl places on b through it
	nodeE = "e" // runs the controller, which keeps echo-llm (role gen) on a or b
	// In the raft cluster (rows 9 to 11), e, f and g run the controller
	// as voters of each other, and there is no d.
	nodeF = "f"
	nodeG = "g"
)

// The nodes of each cluster, in the order they get their addresses.
var (
	soloNodes = []string{nodeA, nodeB, nodeC, nodeD, nodeE}
	raftNodes = []string{nodeA, nodeB, nodeC, nodeE, nodeF, nodeG}
)

// hosts are the nodes the controller places on.
var hosts = []string{nodeA, nodeB}

// The controller's loop, short for the run (the shipped defaults are a
// 5 s tick and a dead_after of 30 s): a node is found dead within
// dead_after + 2 ticks of its last answer.
const (
	ctlTick     = 500 * time.Millisecond
	ctlDead     = 3 * time.Second
	ctlDescribe = 450 * time.Millisecond // below a tick
	// genPkg is the package the controller declares (workload gen).
	genPkg = "echo-llm"
)

// cluster is nodeld processes, each in its own namespace on the switch,
// with keyed mesh peers: five with one controller (e), or, with raft set,
// six whose controllers e, f and g keep their state in raft.
type cluster struct {
	dir   string
	nw    *network
	nodes map[string]*node
	// raft: e, f and g are controller.voters of each other, and a and b
	// list all three in host.controllers; else e alone runs it.
	raft bool
	// ctrls are the nodes that run the controller.
	ctrls []string
	// close stops every node and removes the network (once).
	close func()
	// pkgs are signed packages by id: echo-llm, the example, for role
	// gen (the workload e's controller declares), and batch-a and
	// batch-b, the same server for role batch, which no role port
	// serves: placing, stopping and unloading them never touches a role
	// the client drives.
	pkgs map[string]string
	// dumped is set once the cluster's state was printed for a miss
	// (the misses after the first would print the same).
	dumped bool
}

// node is one nodeld process (and, on a and b, its echo server).
type node struct {
	c       *cluster
	name    string
	ns      *netns
	ip      string
	dir     string // data dir
	cfgPath string
	pubKey  string
	id      string
	http    *http.Client // dials from inside the namespace

	mu   sync.Mutex // guards proc
	proc *process
	echo *process
}

// process is a child started through `ip netns exec`.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func startProcess(cmd *exec.Cmd, logPath string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) signal(sig syscall.Signal) { _ = p.cmd.Process.Signal(sig) }

// wait waits for the exit (up to limit) and returns the exit code, -1 if
// killed by a signal, or an error if it did not exit.
func (p *process) wait(limit time.Duration) (int, error) {
	select {
	case <-p.done:
	case <-time.After(limit):
		return 0, fmt.Errorf("pid %d did not exit within %v", p.cmd.Process.Pid, limit)
	}
	return p.cmd.ProcessState.ExitCode(), nil
}

// stopHard kills and reaps the process.
func (p *process) stopHard() {
	p.signal(syscall.SIGKILL)
	<-p.done
}

// newCluster builds the network, the keys, configs and packages, starts
// every node and waits until the cluster is healthy (waitHealthy): the
// five nodes with one controller, or with raft the six with three. What
// it made is removed by close, at the latest when t ends. It is called
// from t's subtests too: it fails with an error, not through t.
func newCluster(t *testing.T, raft bool) (*cluster, error) {
	c := &cluster{dir: t.TempDir(), nodes: map[string]*node{}, pkgs: map[string]string{}, raft: raft, ctrls: []string{nodeE}}
	names := soloNodes
	if raft {
		names, c.ctrls = raftNodes, []string{nodeE, nodeF, nodeG}
	}
	nw, err := newNetwork(netPrefix)
	if err != nil {
		return nil, err
	}
	c.nw = nw
	stopNodes := atCleanup(func() {
		for _, n := range c.nodes {
			n.stopAll()
		}
	})
	c.close = func() { stopNodes(); nw.close() }
	t.Cleanup(c.close)
	fail := func(err error) (*cluster, error) {
		c.close()
		return nil, err
	}

	anchor, err := c.buildPackages()
	if err != nil {
		return fail(err)
	}
	for _, name := range names {
		ns, err := nw.add(name)
		if err != nil {
			return fail(err)
		}
		n := &node{c: c, name: name, ns: ns, ip: nw.addr(len(nw.order) - 1), dir: filepath.Join(c.dir, name)}
		n.cfgPath = filepath.Join(c.dir, name+".yaml")
		n.http = &http.Client{Transport: &http.Transport{DialContext: ns.dial, MaxIdleConnsPerHost: 16}}
		if n.pubKey, n.id, err = keygen(n.dir, c.dir); err != nil {
			return fail(err)
		}
		c.nodes[name] = n
	}
	for _, n := range c.nodes {
		if err := os.WriteFile(n.cfgPath, []byte(c.config(n, anchor)), 0o600); err != nil {
			return fail(err)
		}
	}
	// The declared package goes into each controller's store before it
	// starts.
	for _, name := range c.ctrls {
		if _, _, err := nodeldCLI("package", "add", "--config", c.n(name).cfgPath, c.pkgs[genPkg]); err != nil {
			return fail(fmt.Errorf("package add on %s: %w", name, err))
		}
	}
	for _, name := range []string{nodeA, nodeB} {
		if err := c.nodes[name].startEcho(); err != nil {
			return fail(err)
		}
	}
	for _, n := range c.nodes {
		if err := n.start(); err != nil {
			return fail(err)
		}
	}
	for _, n := range c.nodes {
		if err := n.waitReady(); err != nil {
			return fail(err)
		}
	}
	if err := c.waitHealthy(); err != nil {
		return fail(err)
	}
	return c, nil
}

func (c *cluster) n(name string) *node { return c.nodes[name] }

// byID returns the node with this node id, nil if none.
func (c *cluster) byID(id string) *node {
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	return nil
}

var (
	keyLine = regexp.MustCompile(`public key: ([0-9a-f]{64})`)
	idLine  = regexp.MustCompile(`node id: +(n-[0-9a-f]{16})`)
)

// keygen makes a node's key before its first start (nodeld keygen), so
// the other nodes' configs name it, and returns its key and node id.
func keygen(dataDir, tmp string) (string, string, error) {
	cfg := filepath.Join(tmp, "keygen-"+filepath.Base(dataDir)+".yaml")
	if err := os.WriteFile(cfg, []byte("node:\n  data_dir: "+dataDir+"\n"), 0o600); err != nil {
		return "", "", err
	}
	if _, _, err := nodeldCLI("keygen", "--config", cfg); err != nil {
		return "", "", err
	}
	out, _, err := nodeldCLI("id", "--config", cfg)
	if err != nil {
		return "", "", err
	}
	k, id := keyLine.FindStringSubmatch(out), idLine.FindStringSubmatch(out)
	if k == nil || id == nil {
		return "", "", fmt.Errorf("nodeld id: unexpected output %q", out)
	}
	return k[1], id[1], nil
}

// exitCodeError is a nodeld command that exited with a code other than 0.
type exitCodeError struct {
	code   int
	stderr string
}

func (e *exitCodeError) Error() string {
	return fmt.Sprintf("exit %d: %s", e.code, strings.TrimSpace(e.stderr))
}

// nodeldCLI runs a nodeld command in this process's namespace and
// returns stdout, stderr and an *exitCodeError for a non-zero exit.
func nodeldCLI(args ...string) (string, string, error) {
	cmd := exec.Command(bins.nodeld, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), errb.String(), &exitCodeError{code: ee.ExitCode(), stderr: errb.String()}
	}
	return out.String(), errb.String(), err
}

// exitCode is the code of an error from nodeldCLI: 0 for nil, -1 for an
// error that is no exit.
func exitCode(err error) int {
	var ee *exitCodeError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	default:
		return -1
	}
}

// buildPackages builds and signs the echo-llm example package, and the
// same server as batch-a and batch-b for role batch, with a publisher key
// of its own; it returns the publisher key (the hosts' trust anchor).
func (c *cluster) buildPackages() (string, error) {
	key := filepath.Join(c.dir, "publisher.key")
	out, _, err := nodeldCLI("package", "keygen", "--out", key)
	if err != nil {
		return "", err
	}
	anchor := strings.TrimSpace(out)
	tmpl, err := os.ReadFile(filepath.Join(repoRoot, "examples/packages/echo-llm/manifest.template.json"))
	if err != nil {
		return "", err
	}
	for _, p := range []struct{ id, role string }{{genPkg, "gen"}, {"batch-a", "batch"}, {"batch-b", "batch"}} {
		id := p.id
		var m map[string]any
		if err := json.Unmarshal(tmpl, &m); err != nil {
			return "", err
		}
		m["id"], m["role"] = id, p.role
		mb, _ := json.Marshal(m)
		mpath := filepath.Join(c.dir, id+".template.json")
		dir := filepath.Join(c.dir, "packages", id)
		if err := os.WriteFile(mpath, mb, 0o600); err != nil {
			return "", err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		bin, err := os.ReadFile(bins.echo)
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, "echo-llm"), bin, 0o755); err != nil {
			return "", err
		}
		for _, args := range [][]string{
			{"package", "build", "--manifest", mpath, dir},
			{"package", "sign", "--key", key, dir},
		} {
			if _, _, err := nodeldCLI(args...); err != nil {
				return "", fmt.Errorf("nodeld %s: %w", strings.Join(args, " "), err)
			}
		}
		c.pkgs[id] = dir
	}
	return anchor, nil
}

// config renders a node's config: every other node is a keyed, paired
// peer at its address; a and b serve chat to c from their echo server,
// and gen from what the controller places there; a and b are workload
// hosts for e's controller, b for d's calls too; e runs the controller,
// which declares echo-llm and places only on a and b; the mesh runs on
// the shipped defaults (keep-alive, liveness timeout, in-flight limits).
func (c *cluster) config(n *node, anchor string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "node:\n  name: %s\n  data_dir: %s\n", n.name, n.dir)
	b.WriteString("log:\n  level: info\n  format: json\n")
	fmt.Fprintf(&b, "admin:\n  listen: %s\n  pprof: true\n", adminAddr)
	fmt.Fprintf(&b, "mesh:\n  listen: %s:%d\n  peers:\n", n.ip, meshPort)
	for _, name := range slices.Sorted(maps.Keys(c.nodes)) {
		if p := c.nodes[name]; p != n {
			fmt.Fprintf(&b, "    - name: %s\n      addr: %s:%d\n      key: %s\n      tier: paired\n", p.name, p.ip, meshPort, p.pubKey)
		}
	}
	b.WriteString("inference:\n  probe_interval: 1s\n  roles:\n")
	switch n.name {
	case nodeA, nodeB:
		fmt.Fprintf(&b, "    - name: chat\n      listen: %s\n      expose: true\n      serve_to: [%s]\n", rolePort, nodeC)
		fmt.Fprintf(&b, "    - name: gen\n      listen: %s\n      expose: true\n      serve_to: [%s]\n", genPort, nodeC)
		fmt.Fprintf(&b, "  instances:\n    - role: chat\n      runtime: openai\n      url: http://%s\n", echoAddr)
	case nodeC:
		fmt.Fprintf(&b, "    - name: chat\n      listen: %s\n      use_from: [%s, %s]\n", rolePort, nodeA, nodeB)
		fmt.Fprintf(&b, "    - name: gen\n      listen: %s\n      use_from: [%s, %s]\n", genPort, nodeA, nodeB)
	default:
		fmt.Fprintf(&b, "    - name: ops\n      listen: %s\n", rolePort)
	}
	// `ip netns exec` remounts /sys, so a node sees no cgroup hierarchy:
	// the hosts opt out of resource isolation (Landlock still holds).
	const noCgroups = "  isolation:\n    resources: off\n"
	var ctrlKeys []string
	for _, name := range c.ctrls {
		ctrlKeys = append(ctrlKeys, c.nodes[name].pubKey)
	}
	switch {
	case n.name == nodeA || n.name == nodeB && c.raft:
		fmt.Fprintf(&b, "host:\n  enabled: true\n  controllers: [%s]\n  trust_anchors: [%s]\n"+noCgroups, strings.Join(ctrlKeys, ", "), anchor)
	case n.name == nodeB:
		fmt.Fprintf(&b, "host:\n  enabled: true\n  controllers: [%s, %s]\n  trust_anchors: [%s]\n"+noCgroups, c.nodes[nodeD].pubKey, c.nodes[nodeE].pubKey, anchor)
	case slices.Contains(c.ctrls, n.name):
		// max_reschedules well above the moves one run makes (the
		// shipped 5 would stop the workload moving by the last faults).
		fmt.Fprintf(&b, "controller:\n  enabled: true\n  tick: %s\n  dead_after: %s\n  describe_timeout: %s\n  retry_backoff: 1s\n  max_reschedules: 1000\n", ctlTick, ctlDead, ctlDescribe)
		if c.raft {
			voters := slices.DeleteFunc(slices.Clone(c.ctrls), func(v string) bool { return v == n.name })
			fmt.Fprintf(&b, "  voters: [%s]\n", strings.Join(voters, ", "))
		}
		deny := []string{nodeC, nodeD}
		if c.raft {
			deny = append([]string{nodeC}, c.ctrls...)
		}
		fmt.Fprintf(&b, "  trust_anchors: [%s]\n  policy:\n    kinds:\n      inference: {min_tier: paired}\n    deny_nodes: [%s]\n", anchor, strings.Join(deny, ", "))
		fmt.Fprintf(&b, "  workloads:\n    - name: gen\n      package: %s\n", genPkg)
	}
	return b.String()
}

func (n *node) logPath() string { return filepath.Join(n.c.dir, n.name+".log") }

// start runs nodeld in the node's namespace with extra run flags.
func (n *node) start(extra ...string) error {
	args := append([]string{"run", "--config", n.cfgPath}, extra...)
	p, err := startProcess(n.ns.command(bins.nodeld, args...), n.logPath())
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.proc = p
	n.mu.Unlock()
	return nil
}

func (n *node) startEcho() error {
	p, err := startProcess(n.ns.command(bins.echo, "--listen", echoAddr, "--model", "echo-"+n.name,
		"--chunk-delay", chunkDelay.String()), filepath.Join(n.c.dir, n.name+"-echo.log"))
	if err != nil {
		return err
	}
	n.echo = p
	return nil
}

func (n *node) process() *process {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc
}

// running reports whether the node's nodeld process has not exited.
func (n *node) running() bool {
	p := n.process()
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (n *node) stop() error {
	p := n.process()
	p.signal(syscall.SIGTERM)
	code, err := p.wait(20 * time.Second)
	if err != nil {
		p.stopHard()
		return err
	}
	if code != 0 {
		return fmt.Errorf("node %s exited %d on SIGTERM", n.name, code)
	}
	return nil
}

// restart stops the node (SIGTERM) if it runs and starts it with extra run flags,
// then waits until it is ready and linked to every peer.
func (n *node) restart(extra ...string) error {
	if n.running() {
		if err := n.stop(); err != nil {
			return err
		}
	}
	if err := n.start(extra...); err != nil {
		return err
	}
	if err := n.waitReady(); err != nil {
		return err
	}
	return n.waitLinked()
}

// stopAll kills the node's processes (cleanup).
func (n *node) stopAll() {
	if p := n.process(); p != nil {
		p.stopHard()
	}
	if n.echo != nil {
		n.echo.stopHard()
	}
	n.http.CloseIdleConnections()
}

// get fetches a path of the node's admin API from inside its namespace.
func (n *node) get(path string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+adminAddr+path, nil)
	if err != nil {
		return 0, "", err
	}
	res, err := n.http.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), err
}

// status is the part of /v1/status the suite reads.
type status struct {
	NodeID string `json:"node_id"`
	Roles  []struct {
		Name     string `json:"name"`
		Resolved string `json:"resolved"`
	} `json:"roles"`
	Table struct {
		Roles []struct {
			Role   string `json:"role"`
			Remote []struct {
				Node     string `json:"node"`
				Health   string `json:"health"`
				Fresh    bool   `json:"fresh"`
				Allowed  bool   `json:"allowed"`
				Admitted bool   `json:"admitted"`
			} `json:"remote"`
		} `json:"roles"`
	} `json:"table"`
	Mesh *struct {
		Peers []struct {
			Name  string `json:"name"`
			State string `json:"state"`
		} `json:"peers"`
	} `json:"mesh"`
}

func (n *node) status() (status, error) {
	var st status
	code, body, err := n.get("/v1/status")
	if err != nil {
		return st, err
	}
	if code != http.StatusOK {
		return st, fmt.Errorf("status: %d", code)
	}
	return st, json.Unmarshal([]byte(body), &st)
}

// metric returns the value of an unlabelled metric of the node's
// /metrics.
func (n *node) metric(name string) (float64, error) {
	code, body, err := n.get("/metrics")
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("metrics: %d", code)
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("no metric %s", name)
}

// metricSum returns the sum of every series of a metric (all labels).
func (n *node) metricSum(name string) (float64, error) {
	code, body, err := n.get("/metrics")
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("metrics: %d", code)
	}
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", line, err)
		}
		sum += v
	}
	return sum, nil // a vector without a series yet sums to 0
}

// until polls cond every 50 ms until it holds, or fails after limit. It
// is for conditions only another process changes (a node's state over
// the mesh), where there is no event to wait on.
func until(what string, limit time.Duration, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

func (n *node) waitReady() error {
	err := until(n.name+" to be ready", waitLimit, func() bool {
		code, _, err := n.get("/readyz")
		if err == nil && code == http.StatusOK {
			return true
		}
		select {
		case <-n.process().done:
			return true // reported below
		default:
			return false
		}
	})
	select {
	case <-n.process().done:
		return fmt.Errorf("node %s exited: %v; log %s", n.name, n.process().err, n.logPath())
	default:
	}
	return err
}

// waitLinked waits until the node's mesh links to every peer are up.
func (n *node) waitLinked() error {
	return until(n.name+"'s links to every peer", waitLimit, func() bool {
		st, err := n.status()
		if err != nil || st.Mesh == nil {
			return false
		}
		for _, p := range st.Mesh.Peers {
			if p.State != "connected" {
				return false
			}
		}
		return len(st.Mesh.Peers) == len(n.c.nodes)-1
	})
}

// fresh returns the node ids whose chat adverts c holds fresh, healthy,
// allowed and admitted: those c resolves chat to.
func (c *cluster) fresh() []string { return c.freshFor("chat") }

// freshFor returns the node ids whose adverts of role c holds fresh,
// healthy, allowed and admitted.
func (c *cluster) freshFor(role string) []string {
	st, err := c.n(nodeC).status()
	if err != nil {
		return nil
	}
	var ids []string
	for _, r := range st.Table.Roles {
		if r.Role != role {
			continue
		}
		for _, rm := range r.Remote {
			if rm.Fresh && rm.Allowed && rm.Admitted && (rm.Health == "" || rm.Health == "up") {
				ids = append(ids, rm.Node)
			}
		}
	}
	return ids
}

// waitHealthy waits for the state every fault starts from: every node
// linked to every other, c holding fresh adverts of both a and b, and
// the controller's workload settled (waitSettled).
func (c *cluster) waitHealthy() error {
	for _, n := range c.nodes {
		if err := n.waitLinked(); err != nil {
			return err
		}
	}
	err := until("c to hold both servers' adverts", waitLimit, func() bool {
		f := c.fresh()
		return slices.Contains(f, c.n(nodeA).id) && slices.Contains(f, c.n(nodeB).id)
	})
	if err != nil {
		return err
	}
	_, err = c.waitSettled()
	return err
}

// ctl runs `nodeld ctl VERB ARGS` through d's daemon (its operator
// socket is a file: no namespace needed).
func (c *cluster) ctl(args ...string) (string, string, error) {
	return nodeldCLI(append([]string{"ctl", "--config", c.n(nodeD).cfgPath}, args...)...)
}

// waitCtl waits until a describe of target from d is answered (ok, or a
// signed refusal: exit 0 or 1, not 3, unreachable) and returns how many
// it took. A node that restarted is linked again within a
// moment, but the first call over the mesh right after may still meet
// the link of the process before (seen once: "received a stateless
// reset", exit 3); a describe is read-only, so trying it costs nothing,
// and the calls a fault makes then start from a working path.
func (c *cluster) waitCtl(target *node) (int, error) {
	deadline := time.Now().Add(waitLimit)
	for i := 1; ; i++ {
		_, errOut, err := c.ctl("describe", target.name)
		if code := exitCode(err); code == 0 || code == 1 {
			return i, nil
		}
		if time.Now().After(deadline) {
			return i, fmt.Errorf("describe %s from d: %v %s", target.name, err, firstLine(errOut))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// dump prints what a miss needs to be understood once the cluster's
// directory is gone: c's table, and each node's goroutines and last
// log lines. It prints once per cluster.
func (c *cluster) dump(t *testing.T) {
	if c.dumped {
		return
	}
	c.dumped = true
	if _, body, err := c.n(nodeC).get("/v1/status"); err == nil {
		t.Logf("c's /v1/status:\n%s", body)
	} else {
		t.Logf("c's /v1/status: %v", err)
	}
	for _, name := range slices.Sorted(maps.Keys(c.nodes)) {
		n := c.nodes[name]
		if _, body, err := n.get("/debug/pprof/goroutine?debug=1"); err == nil {
			t.Logf("%s's goroutines:\n%s", name, body)
		} else {
			t.Logf("%s's goroutines: %v", name, err)
		}
		if b, err := os.ReadFile(n.logPath()); err == nil {
			lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
			t.Logf("%s's log, last lines:\n%s", name, strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	}
}
