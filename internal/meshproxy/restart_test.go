package meshproxy

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/proxy"
	"github.com/nodeld/nodeld/internal/proxy/proxytest"
	"github.com/nodeld/nodeld/internal/table"
)

// watchStreams is the forwarder's MeshStreams that tells which node each
// stream is opened to, before it is opened.
type watchStreams struct {
	MeshStreams
	opened chan string
	mu     sync.Mutex // guards nodes
	nodes  []string
}

func newWatchStreams(ms MeshStreams) *watchStreams {
	return &watchStreams{MeshStreams: ms, opened: make(chan string, 16)}
}

func (w *watchStreams) OpenStream(ctx context.Context, nodeID string, kind mesh.StreamKind) (*mesh.Stream, error) {
	w.mu.Lock()
	w.nodes = append(w.nodes, nodeID)
	w.mu.Unlock()
	select {
	case w.opened <- nodeID:
	default:
	}
	return w.MeshStreams.OpenStream(ctx, nodeID, kind)
}

func (w *watchStreams) openedTo() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.nodes...)
}

// route is n's table entry for peer's "chat" advertisement.
func (n *meshNode) route(peer *meshNode) (table.RemoteSnapshot, bool) {
	for _, rs := range n.Table.Snapshot().Roles {
		if rs.Role != "chat" {
			continue
		}
		for _, r := range rs.Remote {
			if r.Node == peer.ID() {
				return r, true
			}
		}
	}
	return table.RemoteSnapshot{}, false
}

// waitRouteWaiting waits until n keeps peer's route waiting for its link:
// n has processed the stateless reset of its link to peer's previous run.
func (n *meshNode) waitRouteWaiting(peer *meshNode) {
	n.t.Helper()
	meshtest.WaitFor(n.t, n.Name+" keeping "+peer.Name+"'s route waiting for its link", func() bool {
		r, ok := n.route(peer)
		return ok && r.WaitingForLink && !r.LinkWaitOver
	})
}

// linkFrom starts consumer a and server s so that every link between them
// is s's dial: a knows s (key pinned) at an address where nothing
// listens. a's own dials to s, which a makes at once when a reset ends its
// link, then never reach s's new run: they would link before that run
// refuses a (TLS 1.3 tells the client last), ending the wait by
// themselves. extra are a's other peers.
func linkFrom(t *testing.T, a, s *meshNode, extra ...*meshNode) {
	t.Helper()
	pc := s.Peer()
	pc.Addr = meshtest.FreeUDP(t)
	a.startPeers(Deps{}, append(peerConfigs(extra), pc)...)
	s.start(Deps{}, a)
	meshtest.WaitLinked(t, a.Node, s.Node)
}

// waitResetSeen waits until n has processed the stateless reset of its
// link to peer's previous run (the link is gone, and peer's route kept
// waiting for its link or removed), and fails the test at once unless
// the route is kept waiting, its wait not over: what a request sent next
// must find.
func (n *meshNode) waitResetSeen(peer *meshNode) {
	n.t.Helper()
	var r table.RemoteSnapshot
	var ok bool
	meshtest.WaitFor(n.t, n.Name+" done with its link to "+peer.Name+"'s previous run", func() bool {
		if n.Connected(peer.Node) {
			return false
		}
		r, ok = n.route(peer)
		return !ok || r.WaitingForLink
	})
	if !ok || r.LinkWaitOver {
		n.t.Fatalf("%s's route once the reset was seen: %+v (present %v), want it kept waiting for its link", peer.Name, r, ok)
	}
}

// restartUnlinked kills s and starts it again on the same key and address
// with no peer admitted, so that its new run answers the consumer's link
// with a stateless reset and does not link until the test admits the
// consumer (s.Apply). With linkFrom, the consumer cannot link to it.
func restartUnlinked(s *meshNode) {
	s.Crash()
	s.start(Deps{})
}

// drawReset makes a send s a packet big enough to draw a stateless reset
// from s's new run on a's link to its previous run (a packet under 43
// bytes, such as a heartbeat, draws none, and an advert round may be
// stuck behind an earlier one): a ctl stream with a request-sized write,
// reset once the test has seen the reset processed (the returned func,
// which also waits for the goroutine).
//
// The stream is opened from a goroutine, so that the caller's wait runs
// meanwhile. Another packet of a's (an advert round retransmitted to s's
// new run) may have drawn the reset first: then OpenStream waits for s's
// next link, for what is left of the restart wait, as any stream to a
// peer that restarted does, and waiting for it here would spend the whole
// window the caller tests (its request would find the route's wait over:
// 503 no_instance with no route, TestMeshRestartedPeerNotBack's flake).
// done ends that wait.
func drawReset(a, s *meshNode) (done func()) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), meshtest.WaitTimeout)
	var wg sync.WaitGroup
	wg.Go(func() {
		st, err := a.Mesh.OpenStream(ctx, s.ID(), mesh.KindCtl)
		if err != nil {
			// The link was gone already, its reset drawn by another
			// packet, and done ended the wait for s's next link: the
			// caller's wait checked what follows from the reset.
			a.t.Logf("no ctl stream to %s: its link was reset before: %v", s.Name, err)
			return
		}
		// Reset by done, which so also ends a Write that waits to replay
		// the stream on s's next link (the link reset after the open).
		reset := make(chan struct{})
		context.AfterFunc(ctx, func() {
			st.Reset(mesh.StreamCodeCancelled)
			close(reset)
		})
		_, _ = st.Write([]byte(strings.Repeat("r", 300)))
		<-reset
	})
	return func() {
		cancel()
		wg.Wait()
	}
}

// seeReset makes n draw the stateless reset of s's new run (drawReset)
// and waits with seen until n has processed it.
func (n *meshNode) seeReset(s *meshNode, seen func(peer *meshNode)) {
	n.t.Helper()
	done := drawReset(n, s)
	defer done()
	seen(s)
}

// restartOpts are the options of the nodes of the restart tests: a
// keep-alive long enough that the consumer's link to a killed peer is
// not timed out before the peer's new run answers it.
var restartOpts = meshtest.Options{Keepalive: time.Second}

// restartPair starts consumer a and server s of the restart tests (nodes
// with opts, linked by linkFrom), s serving chat from an upstream to a,
// and returns them with the watch of the streams a opens.
func restartPair(t *testing.T, opts meshtest.Options) (a, s *meshNode, ws *watchStreams) {
	t.Helper()
	up := proxytest.New(t, proxytest.Options{Model: "served-model"})
	nodes := newMeshNodesOpts(t, opts, "a", "s")
	a, s = nodes[0], nodes[1]
	a.wrapStreams = func(ms MeshStreams) MeshStreams { ws = newWatchStreams(ms); return ws }
	s.serve(up.URL, "served-model", a)
	a.Table.AllowRemoteNode("chat", s.ID(), true)
	linkFrom(t, a, s)
	a.resolvesTo(s)
	return a, s, ws
}

type result struct {
	res  *http.Response
	body []byte
	err  error
	took time.Duration
}

// postWaitingFor sends a chat request to n's role port from a goroutine
// and returns once its forward opened a stream to peer (which waits for
// peer's link), failing the test if it is answered first.
func (n *meshNode) postWaitingFor(ws *watchStreams, peer *meshNode) <-chan result {
	n.t.Helper()
	got := n.postAsync()
	select {
	case id := <-ws.opened:
		if id != peer.ID() {
			n.t.Fatalf("stream opened to %s, want %s", id, peer.Name)
		}
	case r := <-got:
		if r.err != nil {
			n.t.Fatalf("request failed before %s linked again: %v", peer.Name, r.err)
		}
		n.t.Fatalf("answered before %s linked again: %d %s", peer.Name, r.res.StatusCode, r.body)
	case <-time.After(meshtest.WaitTimeout):
		n.t.Fatal("no stream opened for the request")
	}
	return got
}

// response waits for the answer of a request sent by postAsync, failing
// the test if the request itself failed.
func response(t *testing.T, got <-chan result) result {
	t.Helper()
	r := wait(t, got, "response")
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r
}

// postAsync sends a chat request to n's role port from a goroutine.
func (n *meshNode) postAsync() <-chan result {
	out := make(chan result, 1)
	go func() {
		start := time.Now()
		res, err := n.h.client.Post(n.h.url("chat")+"/v1/chat/completions", "application/json", strings.NewReader(chatBody(false)))
		if err != nil {
			out <- result{err: err}
			return
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		out <- result{res: res, body: body, err: err, took: time.Since(start)}
	}()
	return out
}

func errorCode(t *testing.T, body []byte) string {
	t.Helper()
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("body %q is not the error shape: %v", body, err)
	}
	return e.Error.Code
}

// A new request that arrives at the consumer after its serving peer
// restarted (the reset seen) and before the peer's new run has linked and
// advertised is served by the new run, not refused with no_instance: the
// peer's route is kept, waiting for its link, and the forward waits for
// the link.
func TestMeshRestartedPeerServesNewRequest(t *testing.T) {
	a, s, ws := restartPair(t, restartOpts)
	if res, body := a.h.post("chat", "/v1/chat/completions", chatBody(false)); res.StatusCode != http.StatusOK {
		t.Fatalf("before the restart: %d %s", res.StatusCode, body)
	}
	<-ws.opened

	restartUnlinked(s)
	a.seeReset(s, a.waitResetSeen)
	got := a.postWaitingFor(ws, s)
	// The forward waits for s's link now; s's new run admits a and links.
	s.Apply(a.Peer())
	r := response(t, got)
	if r.res.StatusCode != http.StatusOK || r.res.Header.Get(proxy.RouteHeader) != s.ID() || !strings.Contains(string(r.body), "served-model") {
		t.Fatalf("after the restart: %d %s via %q, want 200 from s", r.res.StatusCode, r.body, r.res.Header.Get(proxy.RouteHeader))
	}
	meshtest.WaitFor(t, "s's route live again", func() bool {
		rt, ok := a.route(s)
		return ok && !rt.WaitingForLink
	})
}

// The reset of a's link to s's previous run may be drawn by a packet of
// a's own (an advert round retransmitted to s's new run) before the test
// draws it (seeReset): s's route is kept waiting all the same, seeReset
// returns once that is seen, well within the restart wait, and the
// request sent next waits for s's link and is served by its new run.
// (seeReset used to open its stream on the lost link, which waits the
// restart wait out: the request then found the route's wait over, 503
// no_instance with no route, TestMeshRestartedPeerNotBack's flake.)
func TestMeshRestartedPeerResetDrawnEarly(t *testing.T) {
	a, s, ws := restartPair(t, restartOpts)

	restartUnlinked(s)
	early := drawReset(a, s) // a's packet that draws the reset first
	meshtest.WaitFor(t, "a's link to s's previous run reset", func() bool { return !a.Connected(s.Node) })
	early()
	start := time.Now()
	a.seeReset(s, a.waitResetSeen)
	if took := time.Since(start); took >= mesh.RestartLinkWait/2 {
		t.Fatalf("seeing the reset took %v: it spent the restart wait (%v)", took, mesh.RestartLinkWait)
	}
	got := a.postWaitingFor(ws, s)
	s.Apply(a.Peer())
	r := response(t, got)
	if r.res.StatusCode != http.StatusOK || r.res.Header.Get(proxy.RouteHeader) != s.ID() || !strings.Contains(string(r.body), "served-model") {
		t.Fatalf("after the restart: %d %s via %q, want 200 from s", r.res.StatusCode, r.body, r.res.Header.Get(proxy.RouteHeader))
	}
}

// With another serving node linked, a request in the window after a
// peer's restart is served by the live node at once: the restarted peer's
// kept route ranks after it, even though it ranked first before.
func TestMeshRestartedPeerRanksAfterLiveNode(t *testing.T) {
	up := proxytest.New(t, proxytest.Options{Model: "served-model"})
	nodes := newMeshNodesOpts(t, restartOpts, "a", "s1", "s2")
	a := nodes[0]
	// s restarts; it is the one with the lower id, so with equal loads
	// it is a's first choice while linked.
	s, l := nodes[1], nodes[2]
	if l.ID() < s.ID() {
		s, l = l, s
	}
	var ws *watchStreams
	a.wrapStreams = func(ms MeshStreams) MeshStreams { ws = newWatchStreams(ms); return ws }
	for _, n := range []*meshNode{s, l} {
		n.serve(up.URL, "served-model", a)
		a.Table.AllowRemoteNode("chat", n.ID(), true)
	}
	linkFrom(t, a, s, l)
	l.start(Deps{})
	l.admitLater(a)
	meshtest.WaitFor(t, "a knowing both routes", func() bool {
		_, ok1 := a.route(s)
		_, ok2 := a.route(l)
		return ok1 && ok2
	})
	a.resolvesTo(s)

	restartUnlinked(s)
	a.seeReset(s, a.waitRouteWaiting)
	r := response(t, a.postAsync())
	if r.res.StatusCode != http.StatusOK || r.res.Header.Get(proxy.RouteHeader) != l.ID() {
		t.Fatalf("in the window: %d %s via %q, want 200 from the live node", r.res.StatusCode, r.body, r.res.Header.Get(proxy.RouteHeader))
	}
	if got := ws.openedTo(); len(got) != 1 || got[0] != l.ID() {
		t.Fatalf("streams opened to %v, want only the live node %s", got, l.ID())
	}
	if r.took >= mesh.RestartLinkWait {
		t.Fatalf("the request took %v: it waited for the restarted peer", r.took)
	}
	// The kept route is still there, waiting: nothing removed it.
	if rt, ok := a.route(s); !ok || !rt.WaitingForLink {
		t.Fatalf("s's route = %+v %v, want kept waiting", rt, ok)
	}
}

// A restarted peer that does not link again within the restart wait loses
// its routes: the request that waited for it gets 503 no_instance (not a
// hang, not a 502), and so does the next one, at once.
func TestMeshRestartedPeerNotBack(t *testing.T) {
	const restartWait = 2 * time.Second
	a, s, _ := restartPair(t, meshtest.Options{Keepalive: restartOpts.Keepalive, RestartLinkWait: restartWait})

	restartUnlinked(s) // and never admits a again
	a.seeReset(s, a.waitResetSeen)
	r := response(t, a.postAsync())
	if r.res.StatusCode != http.StatusServiceUnavailable || errorCode(t, r.body) != proxy.CodeNoInstance ||
		r.res.Header.Get(proxy.RouteHeader) != s.ID() || !strings.Contains(string(r.body), "restarted") {
		t.Fatalf("waiting request: %d %s via %q, want 503 no_instance from the wait for s", r.res.StatusCode, r.body, r.res.Header.Get(proxy.RouteHeader))
	}
	if r.took > restartWait+time.Second {
		t.Errorf("the request took %v, more than the restart wait %v", r.took, restartWait)
	}
	meshtest.WaitFor(t, "s's route removed", func() bool {
		_, ok := a.route(s)
		return !ok
	})
	res, body := a.h.post("chat", "/v1/chat/completions", chatBody(false))
	if res.StatusCode != http.StatusServiceUnavailable || errorCode(t, body) != proxy.CodeNoInstance || res.Header.Get(proxy.RouteHeader) != "" {
		t.Fatalf("after the wait: %d %s via %q, want 503 no_instance with no route", res.StatusCode, body, res.Header.Get(proxy.RouteHeader))
	}
}

// A peer that stops gracefully (its link closed with CodeShutdown, as
// `systemctl restart` or an upgrade does) keeps its routes waiting for its
// link as a restarted one does: a request that only it serves, sent while
// it is away, is served by its next run.
func TestMeshStoppedPeerServesNewRequestAfterStart(t *testing.T) {
	a, s, ws := restartPair(t, restartOpts)

	s.Stop()
	a.waitRouteWaiting(s)
	got := a.postWaitingFor(ws, s)
	s.start(Deps{}, a) // the next run; it links to a
	r := response(t, got)
	if r.res.StatusCode != http.StatusOK || r.res.Header.Get(proxy.RouteHeader) != s.ID() || !strings.Contains(string(r.body), "served-model") {
		t.Fatalf("after s started again: %d %s via %q, want 200 from s", r.res.StatusCode, r.body, r.res.Header.Get(proxy.RouteHeader))
	}
}

// A peer stopped for good: a request that only it served waits at most the
// restart wait and gets 503 no_instance, the route is gone after it, and a
// control call to the stopped peer fails at once (only requests wait).
func TestMeshStoppedPeerNotBack(t *testing.T) {
	const restartWait = 2 * time.Second
	a, s, _ := restartPair(t, meshtest.Options{Keepalive: restartOpts.Keepalive, RestartLinkWait: restartWait})

	s.Stop()
	a.waitRouteWaiting(s)
	start := time.Now()
	if _, err := a.Mesh.OpenStream(context.Background(), s.ID(), mesh.KindCtl); !errors.Is(err, mesh.ErrNoLink) {
		t.Fatalf("ctl stream to the stopped peer: %v, want ErrNoLink", err)
	}
	if took := time.Since(start); took >= restartWait/2 {
		t.Fatalf("the ctl stream took %v to fail: it waited for the stopped peer", took)
	}
	r := response(t, a.postAsync())
	if r.res.StatusCode != http.StatusServiceUnavailable || errorCode(t, r.body) != proxy.CodeNoInstance ||
		!strings.Contains(string(r.body), "stopped") {
		t.Fatalf("waiting request: %d %s, want 503 no_instance from the wait for s", r.res.StatusCode, r.body)
	}
	if r.took > restartWait+time.Second {
		t.Errorf("the request took %v, more than the restart wait %v", r.took, restartWait)
	}
	meshtest.WaitFor(t, "s's route removed", func() bool {
		_, ok := a.route(s)
		return !ok
	})
}

// Any other end of a link removes the peer's routes at once, never kept
// waiting: a peer that went silent (idle timeout) or that this node
// dropped from its config is failed over from without delay.
func TestMeshLostPeerRoutesGoAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(a, s *meshNode)
	}{
		{"idle timeout", func(a, s *meshNode) { s.Crash() }},
		{"removed by this node", func(a, s *meshNode) { a.Apply() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := proxytest.New(t, proxytest.Options{Model: "served-model"})
			a, s := pairNodes(t, up, Deps{})
			tc.end(a, s)
			meshtest.WaitFor(t, "s's route removed", func() bool {
				rt, ok := a.route(s)
				if ok && rt.WaitingForLink {
					t.Fatalf("s's route kept waiting for its link after %s", tc.name)
				}
				return !ok
			})
			start := time.Now()
			res, body := a.h.post("chat", "/v1/chat/completions", chatBody(false))
			if res.StatusCode != http.StatusServiceUnavailable || errorCode(t, body) != proxy.CodeNoInstance {
				t.Fatalf("after s's link ended: %d %s, want 503 no_instance", res.StatusCode, body)
			}
			if took := time.Since(start); took >= mesh.RestartLinkWait {
				t.Fatalf("the request took %v", took)
			}
		})
	}
}

// A restarted peer whose new run links before it serves the role again
// (its instance not registered yet) refuses the request that waited for
// it: the client gets 503 no_instance, as with no route, not a 502.
func TestMeshRestartedPeerLinksWithoutInstance(t *testing.T) {
	up := proxytest.New(t, proxytest.Options{Model: "served-model"})
	nodes := newMeshNodesOpts(t, restartOpts, "a", "s")
	a, s := nodes[0], nodes[1]
	var ws *watchStreams
	a.wrapStreams = func(ms MeshStreams) MeshStreams { ws = newWatchStreams(ms); return ws }
	slot, err := s.Table.RegisterLocal(table.OriginAdopted, "chat", up.URL, "served-model", "openai", "llama.cpp")
	if err != nil {
		t.Fatal(err)
	}
	s.Table.ExposeToMesh("chat", true)
	s.Table.AllowMeshPeer("chat", a.ID(), true)
	a.Table.AllowRemoteNode("chat", s.ID(), true)
	linkFrom(t, a, s)
	a.resolvesTo(s)

	s.Crash()
	slot.Release() // the new run has no instance yet
	s.start(Deps{})
	a.seeReset(s, a.waitResetSeen)
	got := a.postWaitingFor(ws, s)
	s.Apply(a.Peer())
	r := response(t, got)
	if r.res.StatusCode != http.StatusServiceUnavailable || errorCode(t, r.body) != proxy.CodeNoInstance {
		t.Fatalf("request to s's new run without an instance: %d %s, want 503 no_instance", r.res.StatusCode, r.body)
	}
	// s's first round names no chat: the route is gone.
	meshtest.WaitFor(t, "s's route removed by its new run's round", func() bool {
		_, ok := a.route(s)
		return !ok
	})
}
