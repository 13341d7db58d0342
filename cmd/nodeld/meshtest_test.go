package main

// meshtest: the harness of the controller's acceptance tests. It starts
// real in-process nodes (real config files, chain files and node keys,
// the real quic-go mesh on 127.0.0.1, real hosts running the echo-llm
// example) that share one fake clock, injected through nodeDeps.now: the
// controller, the workload.ctl window (signing and checking), the host
// and the facts source all read it. The controllers' loops are not
// started (testHooks.manualTicks): a test advances the clock and calls a
// tick itself, so what happens between two ticks is what the test did.
// Waits are on conditions with a deadline, never sleeps.
//
// Every node's peers are reached through a UDP relay of the harness (one
// per node, on loopback), so a test can cut a node off the mesh and heal
// it: cut drops every datagram to or from the node, which is what a
// pulled cable does. The mesh binds trust to keys, so configs name their
// peers' keys and the relay's address is no problem.
//
// testing/synctest cannot drive real sockets, hence a fake clock instead.
//
// Writing a test (see the 9.x files for examples):
//
//	m := newMesh(t, "a", "b", "c")             // keys, addresses, relays
//	m.node("c").probe = &fakeProbe{arch: "riscv64"} // optional, before start
//	m.node("a").afterPlace = hook                  // optional place-path fault
//	b := m.start("b", m.config("b", peers, meshHost(keyA, anchor)))
//	a := m.start("a", m.config("a", peers, meshController(anchor, extra)))
//	a.waitAlive(m.id("b"))                          // ticks until described
//	res, rc, _ := a.placeJSON("--prefer", "b", dir) // ctl place --json
//	m.clock.Advance(31 * time.Second); a.tick()     // dead_after passes
//	b.kill(); b.run(); a.restart(); m.cut("b"); m.heal("b")
//	a.find(plane.KindDispatch, map[string]any{"node": id}) // chain entries
//	a.reconfigure(cfg)                              // reload, as SIGHUP
//
// Packages: meshLightPackage (a start script running the test's echo-llm
// binary, a few hundred bytes), meshEchoPackage (the whole binary), or
// meshPackage for a manifest of the test's own; each is built once per
// test binary. Tests call t.Parallel: each has its own ports, dirs and
// clock.
//
// The acceptance lists, item by item (TestMeshtest_<list>_<what>; the
// second part of the lists, 9.10 and 9.11, is in other files):
//
// 9.2 Two-node placement over the real wire
//   - ARM board over the dev Mac, the Mac eligible as dev_fallback via
//     <arch>-container: nodeld's tiers native over emulated, emulation
//     allowed by ctl place --allow-emulated (9_2_NativeTierOverEmulated);
//     an emulated-only fit is unplaceable without the flag
//     (emulation_not_allowed) and placed with it
//     (9_2_EmulatedOnlyNeedsTheFlag); a node configured node.class: dev-mac
//     claims the engine's dev class (node.class.dev-mac), ranks in the
//     dev_fallback tier below a native node, and is chosen when it is the
//     only fit (9_2_DevMacIsDevFallback).
//   - Payload fetched from the controller before load: B chains
//     host.place.begin, host.fetch.done (the whole payload, not cached),
//     host.place.ok under the decision id (9_2_PlaceFetchStatusStopLogsUnload).
//   - Status running; stop, logs, unload; placements empty: same test.
//   - Decision chained on the controller and placed under its id; target
//     chains the id: same test.
//   - Admission refusal on the first candidate, next placed, chained on
//     both: 9_2_AdmissionRefusalFallsThrough.
//   - Unknown method, non-listed caller, replay, mutations without or
//     with a malformed decision id: 9_2_SignedCallsRefused. nodeld lets
//     every admitted peer describe; the reference's "non-listed controller
//     cannot describe" is there a node the target does not admit (its
//     handshake refused and chained) and an admitted non-controller's
//     status call (unauthorized, chained).
//   - Nothing fits (UNPLACEABLE, the arch not advertised, still
//     chained): 9_2_NothingFits.
//   - Noise over TCP carries ~300 KB: skipped, nodeld has no Noise or TCP
//     transport (the mesh is QUIC); 9_2_PlaceFetchStatusStopLogsUnload
//     checks that the package (megabytes) crossed the mesh.
//   - Node replaced at its address becomes suspect, new key not learned:
//     9_2_ReplacedNodeSuspect.
//   - No container adapter, no container variant: nodeld has no container
//     runtime; the equivalent is a variant needing a runtime the node
//     does not have (9_2_RuntimeMissingNotOffered).
//
// 9.4 Reconciliation and rollback
//   - Start failure after load: 9_4_StartFailureRollsBack. nodeld has no
//     start gate, so the refusal is code runtime, not governance.
//   - Lost place answer: nodeld reconciles and adopts the instance the
//     node holds (never a second one) where the reference unloads it and
//     moves on (9_4_LostAnswerReconciled); a node that does not hold it
//     gets "trying the next candidate" (9_4_LostAnswerNotHeldTriesNext).
//   - Lost answer, target then unreachable: 9_4_LostAnswerTargetUnreachable.
//
// 9.5 Persistence: 9_5_RestartRestoresPlacements,
// 9_5_RestoredTargetKeepsItsKey, 9_5_MalformedStateFileRefused,
// 9_5_LifecycleSurvivesRestart.
//
// 9.6 Operator peers and trust (peers are mesh.peers entries; "listed"
// is the tier there, a reload changes it): 9_6_TierFollowsConfig,
// 9_6_DiscoveredRaisedUnreachableReported, 9_6_OtherKeyAtListedAddress
// (a node cannot be named by address: only mesh.peers entries are
// targets), 9_6_PinnedKeyReflash.
//
// Not applicable to nodeld and not tested here: BLAKE3 hashes, the node
// lease, Seeds and membership service states (Active, Suspect, ...):
// nodeld's mesh links are its membership.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/ctlraft"
	"github.com/nodeld/nodeld/internal/dispatch"
	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/host"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/lifecycle"
	"github.com/nodeld/nodeld/internal/plane"
	"github.com/nodeld/nodeld/internal/runner"
)

// fakeClock is the one clock of a meshtest cluster.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// meshT is a cluster of in-process nodes under test.
type meshT struct {
	t     *testing.T
	clock *fakeClock
	root  string
	names []string
	nodes map[string]*mnode
}

// mnode is one node of a meshT: what stays across restarts (data dir,
// key, addresses, config) and the running node, if it runs.
type mnode struct {
	m       *meshT
	name    string
	dataDir string
	cfgPath string
	addr    string // the node's own mesh listener
	relay   *udpRelay
	key     string // public key hex
	// probe is what its facts report (nil: this machine as it is).
	probe *fakeProbe
	// class is its config's node.class (set before config; "": none).
	class string
	// afterPlace is the controller's place hook (testHooks.place).
	afterPlace func(ctx context.Context, node string) error
	// stopFault, set with setStopFault at any time (restarts keep it),
	// is the host's stop hook (testHooks.host).
	stopFault atomic.Pointer[func(instanceID string) error]
	// replayWait, set with setReplayWait, paces the host's notice
	// replays (testHooks.host); unset, host.NoticeReplayPace.
	replayWait atomic.Pointer[func(ctx context.Context, peerID string, sent int) error]
	// restartPolicy is its host's restart policy (testHooks.host; set
	// before run).
	restartPolicy runner.RestartPolicy
	// stateFile runs its controller as a version before raft did, its
	// state in controller.json (testHooks.stateFile; set before run).
	stateFile bool
	// bootWait is its controller's ctlraft FirstBootWait (0: the
	// daemon's; -1: a new cluster starts at once).
	bootWait time.Duration

	n      *node
	chain  *chain.Chain
	reg    *prometheus.Registry // the running node's metrics
	cancel context.CancelFunc
	done   chan error
}

// testRaftTimeouts are the in-process controllers' raft timeouts:
// raft's defaults (1 s) instead of the LAN ones (raftmesh.LANConfig, 0.5
// s). A dozen -race daemons on two cores answer a heartbeat in hundreds
// of milliseconds, and a leader that misses its lease mid-place fails the
// test for nothing these tests check; the LAN timeouts are what make
// faults (separate processes) and ctlraft's tests measure.
func testRaftTimeouts(c *raft.Config) {
	c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = time.Second, time.Second, time.Second
}

// newMesh makes the nodes' data dirs, keys, addresses and relays; it
// starts nothing. Node configs are given to start.
func newMesh(t *testing.T, names ...string) *meshT {
	t.Helper()
	// A short root: the operator socket lives in the data dir, and a
	// unix socket path has about 100 bytes.
	root, err := os.MkdirTemp("", "mt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	m := &meshT{t: t, root: root, names: names, nodes: map[string]*mnode{},
		clock: &fakeClock{t: time.Now().UTC().Truncate(time.Second)}}
	for _, name := range names {
		mn := &mnode{m: m, name: name, dataDir: filepath.Join(root, name), cfgPath: filepath.Join(root, name+".yaml")}
		mn.addr = freeUDPAddr(t)
		mn.key = makeKey(t, mn.dataDir)
		mn.relay = newUDPRelay(t, mn.addr)
		m.nodes[name] = mn
	}
	return m
}

func (m *meshT) node(name string) *mnode {
	mn, ok := m.nodes[name]
	if !ok {
		m.t.Fatalf("no node %q", name)
	}
	return mn
}

// id is a node's id.
func (m *meshT) id(name string) string {
	pub, err := identity.ParsePublicKeyHex(m.node(name).key)
	if err != nil {
		m.t.Fatal(err)
	}
	return identity.NodeID(pub)
}

// peer is one mesh.peers entry of a node config.
type peer struct {
	name, tier string
	// noKey leaves the key out (pinned on first contact).
	noKey bool
}

// config renders name's config: its mesh peers (reached through their
// relays), one role, and rest (host, controller sections) as given.
func (m *meshT) config(name string, peers []peer, rest string) string {
	mn := m.node(name)
	var b strings.Builder
	fmt.Fprintf(&b, "node:\n  name: %s\n  data_dir: %s\n", name, mn.dataDir)
	if mn.class != "" {
		fmt.Fprintf(&b, "  class: %s\n", mn.class)
	}
	b.WriteString("log:\n  level: info\n  format: json\nadmin:\n  listen: 127.0.0.1:0\n")
	// A generous liveness timeout: a link must not be taken for dead
	// while -race and other tests starve the nodes.
	fmt.Fprintf(&b, "mesh:\n  listen: %s\n  keepalive: 1s\n  liveness_timeout: 5s\n  peers:\n", mn.addr)
	if len(peers) == 0 {
		b.WriteString("    []\n")
	}
	for _, p := range peers {
		pn := m.node(p.name)
		fmt.Fprintf(&b, "    - name: %s\n      addr: %s\n      tier: %s\n", p.name, pn.relay.Addr(), p.tier)
		if !p.noKey {
			fmt.Fprintf(&b, "      key: %s\n", pn.key)
		}
	}
	b.WriteString("inference:\n  roles:\n    - name: chat\n      listen: 127.0.0.1:0\n")
	b.WriteString(rest)
	return b.String()
}

// meshController is a controller section for the harness: it places kind
// inference on paired nodes; tick is irrelevant (the test ticks), and
// dead_after and retry_backoff are read on the fake clock.
func meshController(anchor string, extra string) string {
	return fmt.Sprintf(`controller:
  enabled: true
  tick: 1s
  dead_after: 30s
  retry_backoff: 10s
  describe_timeout: 2s
  place_timeout: 60s
  trust_anchors: [%s]
  policy:
    kinds:
      inference: {min_tier: paired}
%s`, anchor, extra)
}

// meshHost is a host section that takes places from controller (a key)
// of packages signed by anchor.
func meshHost(controller, anchor string) string {
	return fmt.Sprintf("host:\n  enabled: true\n  controllers: [%s]\n  trust_anchors: [%s]\n", controller, anchor) + binReadable()
}

// binReadable is the host.isolation section that lets placed instances
// run the binaries the tests build (binDir), which light packages
// (lightScript) exec from outside their package directory.
func binReadable() string {
	return "  isolation:\n    read_paths: [" + binDir + "]\n"
}

// start writes cfg as name's config and runs the node until the test
// ends (or kill).
func (m *meshT) start(name, cfg string) *mnode {
	m.t.Helper()
	mn := m.node(name)
	if err := os.WriteFile(mn.cfgPath, []byte(cfg), 0o600); err != nil {
		m.t.Fatal(err)
	}
	mn.run()
	return mn
}

// run builds the node from its config file and data dir and runs it.
func (mn *mnode) run() {
	mn.m.t.Helper()
	if err := mn.tryRun(); err != nil {
		mn.m.t.Fatalf("node %s: %v", mn.name, err)
	}
}

// tryRun is run, returning the error of a node that cannot be built
// (the chain it opened is closed again).
func (mn *mnode) tryRun() error {
	t := mn.m.t
	t.Helper()
	if mn.n != nil {
		return fmt.Errorf("node %s runs already", mn.name)
	}
	c, err := reloadConfig(mn.cfgPath)
	if err != nil {
		return err
	}
	// A node started again at its address: the last run closed its mesh
	// socket, but a child another test forked in that moment may hold a
	// copy until it execs (the node's run failed with EADDRINUSE so).
	waitFor(t, "node "+mn.name+"'s mesh address "+mn.addr+" to be free", func() bool { return udpBindable(mn.addr) })
	if err := checkComponents(c, mn.cfgPath); err != nil {
		return err
	}
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Named(mn.name)
	if err := lifecycle.EnsureDataDir(c.Node.DataDir, log); err != nil {
		return err
	}
	id, _, err := identity.LoadOrGenerate(identity.KeyPath(c.Node.DataDir))
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	ch, err := lifecycle.OpenChain(filepath.Join(c.Node.DataDir, chainFileName), id, false, reg, log)
	if err != nil {
		return err
	}
	d := nodeDeps{
		id: id, chain: ch, reg: reg, log: log, level: zap.NewAtomicLevelAt(zap.WarnLevel), cfgPath: mn.cfgPath,
		load: func() (*config.Config, error) { return reloadConfig(mn.cfgPath) },
		now:  mn.m.clock.Now,
		hooks: testHooks{
			discover:    []runner.DiscoverCandidate{},
			manualTicks: true,
			stateFile:   mn.stateFile,
			raft:        ctlraft.Deps{Tune: testRaftTimeouts, FirstBootWait: mn.bootWait},
			place:       dispatch.PlaceHooks{After: mn.afterPlace},
			host: hostHooks{
				restart: mn.restartPolicy,
				stopFault: func(iid string) error {
					if f := mn.stopFault.Load(); f != nil {
						return (*f)(iid)
					}
					return nil
				},
				replayWait: func(ctx context.Context, peerID string, sent int) error {
					if f := mn.replayWait.Load(); f != nil {
						return (*f)(ctx, peerID, sent)
					}
					return host.WaitReplayPace(ctx, peerID, sent)
				},
			},
		},
	}
	if mn.probe != nil {
		pd := mn.probe.deps()
		d.hooks.probe = &pd
	}
	n, err := newNode(c, d)
	if err != nil {
		_ = ch.Close()
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	mn.n, mn.chain, mn.reg, mn.cancel, mn.done = n, ch, reg, cancel, make(chan error, 1)
	go func() { mn.done <- n.run(ctx, nil) }()
	t.Cleanup(func() {
		if mn.n == n {
			mn.kill()
		}
	})
	deadline := time.After(waitTimeout)
	for {
		if ok, _ := n.admin.Ready(); ok {
			return nil
		}
		select {
		case err := <-mn.done:
			mn.n = nil
			_ = ch.Close()
			return fmt.Errorf("stopped before ready: %v", err)
		case <-deadline:
			return errors.New("not ready")
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// setStopFault makes mn's host fail the stop of an instance's process
// (a stop, an unload) with f's error, as a process that survives its kill
// would; nil stops failing.
func (mn *mnode) setStopFault(f func(instanceID string) error) {
	if f == nil {
		mn.stopFault.Store(nil)
		return
	}
	mn.stopFault.Store(&f)
}

// setReplayWait makes f pace mn's notice replays (nil: the host's own
// pace).
func (mn *mnode) setReplayWait(f func(ctx context.Context, peerID string, sent int) error) {
	if f == nil {
		mn.replayWait.Store(nil)
		return
	}
	mn.replayWait.Store(&f)
}

// kill stops the node: its links close, its host stops its instances,
// its controller stops between two calls; its data dir stays as it is.
func (mn *mnode) kill() {
	t := mn.m.t
	t.Helper()
	if mn.n == nil {
		return
	}
	mn.cancel()
	select {
	case err := <-mn.done:
		if err != nil {
			t.Errorf("node %s run: %v", mn.name, err)
		}
	case <-time.After(waitTimeout):
		t.Errorf("node %s: run did not return; goroutines:\n%s", mn.name, allStacks())
	}
	if err := mn.chain.Close(); err != nil {
		t.Errorf("node %s chain: %v", mn.name, err)
	}
	mn.n, mn.chain = nil, nil
}

// restart starts a killed node again from its data dir and config.
func (mn *mnode) restart() {
	mn.m.t.Helper()
	mn.kill()
	mn.run()
}

// ctrl is the node's controller.
func (mn *mnode) ctrl() *plane.Controller {
	mn.m.t.Helper()
	if mn.n == nil || mn.n.ctrl == nil {
		mn.m.t.Fatalf("node %s runs no controller", mn.name)
	}
	return mn.n.ctrl
}

// tick runs one controller tick on the node, which first applies the
// config and targets a pin or a reload handed over (what the controller's
// loop does between ticks).
func (mn *mnode) tick() {
	t := mn.m.t
	t.Helper()
	c := mn.ctrl()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := c.Tick(ctx); err != nil {
		t.Fatalf("tick on %s: %v", mn.name, err)
	}
}

// socket is the node's operator socket.
func (mn *mnode) socket() string { return mn.n.config().SocketPath() }

// waitAlive ticks name's controller until each of ids is alive with facts.
func (mn *mnode) waitAlive(ids ...string) {
	mn.m.t.Helper()
	waitFor(mn.m.t, mn.name+"'s controller to hear from "+strings.Join(ids, ", "), func() bool {
		mn.tick()
		alive := map[string]bool{}
		for _, v := range mn.ctrl().NodeViews() {
			if v.Liveness == engine.Alive && v.HasFacts {
				alive[v.ID] = true
			}
		}
		for _, id := range ids {
			if !alive[id] {
				return false
			}
		}
		return true
	})
}

// chainEntry is one entry of a chain file.
type chainEntry struct {
	Seq     uint64         `json:"seq"`
	Source  string         `json:"source"`
	Kind    string         `json:"kind"`
	Payload map[string]any `json:"payload"`
	Hash    string         `json:"hash"`
}

// decision is the controller's chained decision whose entry hash is id
// (a decision id is that hash).
func (mn *mnode) decision(id string) (chainEntry, bool) {
	for _, e := range mn.find(plane.KindDecision, nil) {
		if e.Hash == id {
			return e, true
		}
	}
	return chainEntry{}, false
}

// entries reads the node's chain file (running or not).
func (mn *mnode) entries() []chainEntry {
	t := mn.m.t
	t.Helper()
	f, err := os.Open(filepath.Join(mn.dataDir, chainFileName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []chainEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var e chainEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// find is the entries of kind (any kind when "") whose payload has every
// field of match (compared as fmt %v strings).
func (mn *mnode) find(kind string, match map[string]any) []chainEntry {
	mn.m.t.Helper()
	var out []chainEntry
	for _, e := range mn.entries() {
		if kind != "" && e.Kind != kind {
			continue
		}
		ok := true
		for k, v := range match {
			if fmt.Sprint(e.Payload[k]) != fmt.Sprint(v) {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, e)
		}
	}
	return out
}

// fakeProbe is a node's facts probe over this machine's, reporting
// another architecture and free memory when set.
type fakeProbe struct {
	arch    string
	memFree atomic.Uint64 // bytes; 0: this machine's
	// noRuntimes hides every runtime binary on PATH (llama-server,
	// ollama, ...): only the process runtime is left.
	noRuntimes bool
}

func (p *fakeProbe) deps() facts.ProbeDeps {
	d := facts.DefaultProbeDeps()
	if p.arch != "" {
		d.GOARCH = p.arch
	}
	if p.noRuntimes {
		d.LookPath = func(file string) (string, error) { return "", exec.ErrNotFound }
	}
	read := d.ReadFile
	d.ReadFile = func(path string) ([]byte, error) {
		free := p.memFree.Load()
		if path != "/proc/meminfo" || free == 0 {
			return read(path)
		}
		return fmt.Appendf(nil, "MemTotal: %d kB\nMemFree: %d kB\nMemAvailable: %d kB\n", 64<<20, free>>10, free>>10), nil
	}
	return d
}

// udpRelay forwards datagrams between the nodes and one node's mesh
// listener: each sender gets a socket of its own towards the node, so
// answers go back to the sender they belong to. While cut, every
// datagram is dropped.
type udpRelay struct {
	pc     net.PacketConn
	target *net.UDPAddr
	cut    atomic.Bool
	mu     sync.Mutex
	conns  map[string]*net.UDPConn
	// cutFrom are senders whose datagrams (both ways) are dropped.
	cutFrom map[string]bool
	wg      sync.WaitGroup
}

func newUDPRelay(t *testing.T, target string) *udpRelay {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ta, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		t.Fatal(err)
	}
	r := &udpRelay{pc: pc, target: ta, conns: map[string]*net.UDPConn{}}
	r.wg.Go(r.serve)
	t.Cleanup(r.close)
	return r
}

func (r *udpRelay) Addr() string { return r.pc.LocalAddr().String() }

func (r *udpRelay) serve() {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := r.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if r.dropped(from) {
			continue
		}
		c, err := r.connFor(from)
		if err != nil {
			continue
		}
		_, _ = c.Write(buf[:n])
	}
}

// connFor is the socket towards the target for datagrams of from.
func (r *udpRelay) connFor(from net.Addr) (*net.UDPConn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.conns[from.String()]; ok {
		return c, nil
	}
	if r.conns == nil {
		return nil, net.ErrClosed
	}
	c, err := net.DialUDP("udp", nil, r.target)
	if err != nil {
		return nil, err
	}
	r.conns[from.String()] = c
	r.wg.Go(func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				// The node is down (an ICMP port unreachable makes a
				// connected socket's next read fail): it may come back
				// at the same address, so keep relaying.
				continue
			}
			if r.dropped(from) {
				continue
			}
			_, _ = r.pc.WriteTo(buf[:n], from)
		}
	})
	return c, nil
}

// dropped reports whether datagrams from (or to) from are dropped.
func (r *udpRelay) dropped(from net.Addr) bool {
	if r.cut.Load() {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cutFrom[from.String()]
}

func (r *udpRelay) setCutFrom(addr string, cut bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cutFrom == nil {
		r.cutFrom = map[string]bool{}
	}
	r.cutFrom[addr] = cut
}

func (r *udpRelay) close() {
	_ = r.pc.Close()
	r.mu.Lock()
	for _, c := range r.conns {
		_ = c.Close()
	}
	r.conns = nil
	r.mu.Unlock()
	r.wg.Wait()
}

// cut takes the node off the mesh: every datagram to it, and every
// datagram it sends through another node's relay, is dropped.
func (m *meshT) cut(name string) { m.setCut(name, true) }

// heal puts the node back on the mesh.
func (m *meshT) heal(name string) { m.setCut(name, false) }

func (m *meshT) setCut(name string, cut bool) {
	mn := m.node(name)
	mn.relay.cut.Store(cut)
	// Its datagrams to the others: the others' relays see them from its
	// own listener's address.
	for _, other := range m.nodes {
		if other != mn {
			other.relay.setCutFrom(mn.addr, cut)
		}
	}
}
