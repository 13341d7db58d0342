package meshproxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/httpfast"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/proxy"
	"github.com/nodeld/nodeld/internal/proxy/proxytest"
	"github.com/nodeld/nodeld/internal/table"
	"github.com/nodeld/nodeld/internal/tlspool"
)

var tcpDeps = Deps{TCP: TCP{Transport: TransportTCP}}

// tcpPair is pairNodes with a's and b's transport chosen.
func tcpPair(t *testing.T, up *proxytest.Upstream, aDeps, bDeps Deps) (a, b *meshNode) {
	t.Helper()
	nodes := newMeshNodes(t, "a", "b")
	a, b = nodes[0], nodes[1]
	b.serve(up.URL, "served-model", a)
	a.Table.AllowRemoteNode("chat", b.ID(), true)
	a.start(aDeps, b)
	b.start(bDeps)
	b.admitLater(a)
	a.resolvesTo(b)
	return a, b
}

func counter(t *testing.T, n *meshNode, name string, labels map[string]string) float64 {
	t.Helper()
	v, _ := metricValue(t, n.Registry, name, labels)
	return v
}

func transportCount(t *testing.T, n *meshNode, side, transport string) float64 {
	return counter(t, n, "nodeld_proxy_mesh_transport_total", map[string]string{"side": side, "transport": transport})
}

// TestTCPCarriesInference (issue 26): with the transport tcp on both
// nodes, answers, streams and embeddings cross over one pinned TLS
// connection, reused from request to request; QUIC carries none of them.
func TestTCPCarriesInference(t *testing.T) {
	up := proxytest.New(t, proxytest.Options{Model: "served-model", Chunks: 3})
	a, b := tcpPair(t, up, tcpDeps, tcpDeps)
	askEveryKind(t, a)
	if got := up.Requests()[0].Body; !strings.Contains(string(got), `"model":"served-model"`) {
		t.Errorf("upstream body %s: model not pinned", got)
	}
	for _, c := range []struct {
		n        *meshNode
		side, tr string
		want     float64
	}{
		{a, sideForward, TransportTCP, 9}, {a, sideForward, TransportQUIC, 0},
		{b, sideServe, TransportTCP, 9}, {b, sideServe, TransportQUIC, 0},
	} {
		if got := transportCount(t, c.n, c.side, c.tr); got != c.want {
			t.Errorf("%s %s over %s: %v, want %v", c.n.Name, c.side, c.tr, got, c.want)
		}
	}
	if st := a.fwd.tcp.pool.Stats(); st.Dials != 1 || st.Reuses != 8 {
		t.Errorf("pool %+v, want one dial reused for the 8 later requests", st)
	}
}

// askEveryKind asks a, three times in turn, for an answer, an event
// stream and embeddings of a 1 MiB body (over proxy.MeshBufferedBodyBytes:
// it streams to the instance as it arrives, and read to its end, the
// connection serves again), each of which must succeed.
func askEveryKind(t *testing.T, a *meshNode) {
	t.Helper()
	for i := range 3 {
		if res, body := a.h.post("chat", "/v1/chat/completions", chatBody(false)); res.StatusCode != 200 || !strings.Contains(string(body), "hello from served-model") {
			t.Fatalf("answer %d: %d %s", i, res.StatusCode, body)
		}
		res, body := a.h.post("chat", "/v1/chat/completions", chatBody(true))
		if res.StatusCode != 200 || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
			t.Fatalf("stream %d: %d %s", i, res.StatusCode, body)
		}
		big := `{"input":"` + strings.Repeat("x", 1<<20) + `"}`
		if res, body := a.h.post("chat", "/v1/embeddings", big); res.StatusCode != 200 {
			t.Fatalf("embeddings %d: %d %s", i, res.StatusCode, body)
		}
	}
}

// TestTCPFallsBackToQUIC: a peer that serves no TCP (an older version,
// or the transport quic) is reached over QUIC; the failed dial is
// counted, and the next requests go over QUIC without dialing again
// until TCPRetryAfter has passed.
func TestTCPFallsBackToQUIC(t *testing.T) {
	up := proxytest.New(t, proxytest.Options{Model: "served-model"})
	a, b := tcpPair(t, up, tcpDeps, Deps{TCP: TCP{Transport: TransportQUIC}})
	for i := range 3 {
		if res, body := a.h.post("chat", "/v1/chat/completions", chatBody(false)); res.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, res.StatusCode, body)
		}
	}
	if got := counter(t, a, "nodeld_proxy_mesh_tcp_fallbacks_total", map[string]string{"reason": fallbackDial}); got != 1 {
		t.Errorf("fallbacks after a failed dial: %v, want 1", got)
	}
	if got := counter(t, a, "nodeld_proxy_mesh_tcp_fallbacks_total", map[string]string{"reason": fallbackDown}); got != 2 {
		t.Errorf("fallbacks while the peer is down for tcp: %v, want 2", got)
	}
	if got := transportCount(t, b, sideServe, TransportQUIC); got != 3 {
		t.Errorf("served over quic: %v, want 3", got)
	}
	if st := a.fwd.tcp.pool.Stats(); st.Dials != 1 {
		t.Errorf("pool %+v, want one dial", st)
	}
	// Past the wait, TCP is tried again.
	a.fwd.tcp.now = func() time.Time { return time.Now().Add(TCPRetryAfter) }
	if res, body := a.h.post("chat", "/v1/chat/completions", chatBody(false)); res.StatusCode != 200 {
		t.Fatalf("request after the wait: %d %s", res.StatusCode, body)
	}
	if st := a.fwd.tcp.pool.Stats(); st.Dials != 2 {
		t.Errorf("pool %+v, want a second dial after TCPRetryAfter", st)
	}
}

// TestTCPAdmitsOnlyLinkedPeers: the TCP server refuses a key that is not
// a configured peer's (default deny), and a configured peer whose link
// is not up.
func TestTCPAdmitsOnlyLinkedPeers(t *testing.T) {
	up := proxytest.New(t, proxytest.Options{Model: "served-model"})
	_, b := tcpPair(t, up, tcpDeps, tcpDeps)
	addr := b.fwd.TCPAddr().String()
	stranger := meshtest.NewIdentity(t)
	cert, err := stranger.TLSCertificate(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p, err := tlspool.NewPool(tlspool.Config{Certificate: cert, ALPN: InferALPN})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	if _, err := p.Get(ctx, addr, b.Ident.PublicKey()); !errors.Is(err, tlspool.ErrNotAdmitted) {
		t.Fatalf("a stranger's dial: %v, want ErrNotAdmitted", err)
	}
	// b's own key is never a peer.
	if _, ok := b.fwd.tcp.peers.LinkedPeerByKey(b.Ident.PublicKey()); ok {
		t.Error("b admits its own key")
	}
	// A configured peer without a live link (c is configured on b, never
	// started).
	c := newMeshNodes(t, "c")[0]
	b.Apply(append(b.Config.Peers, c.Peer())...)
	ccert, err := c.Ident.TLSCertificate(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cp, err := tlspool.NewPool(tlspool.Config{Certificate: ccert, ALPN: InferALPN})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	if _, err := cp.Get(ctx, addr, b.Ident.PublicKey()); !errors.Is(err, tlspool.ErrNotAdmitted) {
		t.Fatalf("an unlinked peer's dial: %v, want ErrNotAdmitted", err)
	}
}

// TestTCPRefusalKeepsTheConnection: a request the serving node refuses
// before its body (over capacity) is read to its end, so the connection
// serves the next exchange: no dial per refusal.
func TestTCPRefusalKeepsTheConnection(t *testing.T) {
	up, gate := blockEmbeddings(t)
	defer gate.Open()
	a, _ := tcpPair(t, up, tcpDeps, Deps{TCP: TCP{Transport: TransportTCP}, MaxInflightPerPeer: 1})
	first := make(chan int, 1)
	go func() {
		res, _ := a.h.post("chat", "/v1/embeddings", `{"input":"x"}`)
		first <- res.StatusCode
	}()
	wait(t, gate.Entered, "the blocking request upstream")
	for i := range 3 {
		res, body := a.h.post("chat", "/v1/chat/completions", chatBody(false))
		if res.StatusCode != http.StatusTooManyRequests || errorCode(t, body) != "over_capacity" {
			t.Fatalf("request %d while b is full: %d %s, want 429 over_capacity", i, res.StatusCode, body)
		}
	}
	gate.Open()
	if status := wait(t, first, "the first request"); status != 200 {
		t.Fatalf("first request: %d", status)
	}
	if res, body := a.h.post("chat", "/v1/chat/completions", chatBody(false)); res.StatusCode != 200 {
		t.Fatalf("after the refusals: %d %s", res.StatusCode, body)
	}
	if st := a.fwd.tcp.pool.Stats(); st.Dials != 2 {
		t.Errorf("pool %+v, want 2 dials (the blocked request's and one for the rest)", st)
	}
}

// TestTCPLinkLostAbortsExchanges: when the mesh reports a peer's link
// lost (a dead or cut peer, found by the liveness check), its TCP
// connections end at once on both sides: the consumer's request does not
// hang on a connection to a dead peer, and the serving node cancels the
// instance's request.
//
// The same holds for an exchange carried as a stream of a shared
// connection (the shared cases).
func TestTCPLinkLostAbortsExchanges(t *testing.T) {
	for _, c := range []struct {
		name string
		deps Deps
		side string
	}{{"consumer", tcpDeps, "consumer"}, {"server", tcpDeps, "server"},
		{"shared/consumer", tcpSharedDeps, "consumer"}, {"shared/server", tcpSharedDeps, "server"}} {
		side := c.side
		t.Run(c.name, func(t *testing.T) {
			up, entered, cancelled := heldUpstream(t)
			a, b := tcpPair(t, up, c.deps, tcpDeps)
			got := postCtx(context.Background(), a, chatBody(true))
			wait(t, entered, "the instance serving the request")
			if st := a.fwd.tcp.pool.Stats(); (st.Shared == 1) != (c.deps.TCP.sharedAfter < 0) {
				t.Fatalf("pool %+v: the exchange is not on the connection the case wants", st)
			}
			start := time.Now()
			if side == "consumer" {
				a.fwd.PeerEvent(table.PeerEvent{Kind: table.PeerLinkLost, Node: b.ID(), Loss: table.LossDropped})
			} else {
				b.fwd.PeerEvent(table.PeerEvent{Kind: table.PeerLinkLost, Node: a.ID(), Loss: table.LossDropped})
			}
			ans := wait(t, got, "the request's end")
			if ans.status == 200 && ans.err == nil {
				t.Fatalf("a request whose connection was closed: %+v", ans)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("the request ended %v after the link was lost", d)
			}
			meshtest.WaitFor(t, "the instance's request cancelled", cancelled.Load)
			meshtest.WaitFor(t, "serving slot released", func() bool { n, _ := b.fwd.Inflight(); return n == 0 })
		})
	}
}

// stuckUpstream is an instance that answers nothing until its request's
// context ends or the test does.
func stuckUpstream(t *testing.T) *httptest.Server {
	t.Helper()
	stuck := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-stuck:
		}
	}))
	t.Cleanup(up.Close)
	t.Cleanup(func() { close(stuck) })
	return up
}

// TestServeTimeoutRefuses: an instance that does not answer within the
// serving node's serve timeout is refused as upstream_timeout (the
// consumer's client gets 504), over TCP (where the exchange's one context
// carries the timeout) as over QUIC, not cut as if the consumer had gone.
func TestServeTimeoutRefuses(t *testing.T) {
	for _, tr := range []string{TransportTCP, TransportQUIC} {
		t.Run(tr, func(t *testing.T) {
			up := stuckUpstream(t)
			nodes := newMeshNodes(t, "a", "b")
			a, b := nodes[0], nodes[1]
			b.serve(up.URL, "served-model", a)
			a.Table.AllowRemoteNode("chat", b.ID(), true)
			deps := Deps{TCP: TCP{Transport: tr}}
			a.start(deps, b)
			deps.serveTimeout = 300 * time.Millisecond
			b.start(deps)
			b.admitLater(a)
			a.resolvesTo(b)
			res, body := a.h.post("chat", "/v1/chat/completions", chatBody(false))
			if res.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(body), "upstream_timeout") {
				t.Fatalf("got %d %s, want 504 upstream_timeout", res.StatusCode, body)
			}
			// b counts the exchange once it has ended it, which may be after
			// a read the answer.
			meshtest.WaitFor(t, "b to count the served upstream_timeout", func() bool {
				return counter(t, b, "nodeld_proxy_mesh_served_total", map[string]string{"role": "chat", "code": RefuseUpstreamTimeout}) == 1
			})
			if got := transportCount(t, b, sideServe, tr); got != 1 {
				t.Errorf("served over %s: %v, want 1", tr, got)
			}
		})
	}
}

// TestConsumerStallTimeout: the consumer's own stall timeout ends a
// forward whose peer does not answer in time, on either transport: its
// client gets 504 upstream_timeout naming the stall, not the silence of a
// client taken to have gone away (the forward runs on the fast reader's
// exchange context, which the watchdog cancels with its cause).
func TestConsumerStallTimeout(t *testing.T) {
	for _, tr := range []string{TransportTCP, TransportQUIC} {
		t.Run(tr, func(t *testing.T) {
			up := stuckUpstream(t)
			nodes := newMeshNodes(t, "a", "b")
			a, b := nodes[0], nodes[1]
			b.serve(up.URL, "served-model", a)
			a.Table.AllowRemoteNode("chat", b.ID(), true)
			a.proxyCfg = proxy.Config{StallTimeout: 300 * time.Millisecond}
			deps := Deps{TCP: TCP{Transport: tr}}
			a.start(deps, b)
			b.start(deps)
			b.admitLater(a)
			a.resolvesTo(b)
			res, body := a.h.post("chat", "/v1/chat/completions", chatBody(false))
			if res.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(body), "upstream_timeout") ||
				!strings.Contains(string(body), "peer did not answer within 300ms") {
				t.Fatalf("got %d %s, want 504 upstream_timeout after the 300ms stall", res.StatusCode, body)
			}
		})
	}
}

// TestTCPLastBytesLeaveEveryWay: the serving node keeps an answer's last
// bytes until its exchange ended (writeLast), and they reach the consumer
// whichever way the connection goes on: to the next request on the same
// goroutine (a quick answer), to a watcher (an answer slower than
// TCPWatchDelay), or to its close (an instance that answered a streamed
// body before it read it whole).
func TestTCPLastBytesLeaveEveryWay(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/embeddings": // early: answers without reading the body
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			_, _ = io.WriteString(w, `{"error":"too long for me"}`)
			return
		case "/v1/completions": // slow: a watcher starts meanwhile
			<-release
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"path":"`+r.URL.Path+`"}`)
	}))
	t.Cleanup(srv.Close)
	a, _ := tcpPairLargeBodies(t, srv.URL)

	ask := func(path, body string, want int) {
		t.Helper()
		res, out := a.h.post("chat", path, body)
		if res.StatusCode != want {
			t.Fatalf("%s: %d %s, want %d", path, res.StatusCode, out, want)
		}
		if want == http.StatusOK && string(out) != `{"path":"`+path+`"}` {
			t.Fatalf("%s: %s", path, out)
		}
	}
	for range 3 { // quick: the next request follows on the same connection
		ask("/v1/chat/completions", chatBody(false), http.StatusOK)
	}
	time.AfterFunc(3*TCPWatchDelay, func() { close(release) })
	ask("/v1/completions", chatBody(false), http.StatusOK) // slow: a watcher
	ask("/v1/chat/completions", chatBody(false), http.StatusOK)
	ask("/v1/embeddings", chatOfSize(4<<20, "m"), http.StatusRequestEntityTooLarge) // early: closes
	ask("/v1/chat/completions", chatBody(false), http.StatusOK)
	if got := transportCount(t, a, sideForward, TransportQUIC); got != 0 {
		t.Errorf("%v requests went over QUIC, want 0", got)
	}
	if st := a.fwd.tcp.pool.Stats(); st.Dials != 2 {
		t.Errorf("pool %+v, want two dials: the first, and one after the early answer's close", st)
	}
}

// TestServedConnReadDeadlineCoarse: a served connection's read deadline,
// re-armed for each frame, is set as httpfast.CoarseDeadline decides: the
// first exact, a later one within the slack left as it is.
func TestServedConnReadDeadlineCoarse(t *testing.T) {
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	cs := &tcpConnServer{raw: c1}
	first := time.Now().Add(10 * time.Second)
	if cs.setReadDeadline(first); !cs.rdSet.Equal(first) {
		t.Fatalf("first deadline %v, want %v exactly", cs.rdSet, first)
	}
	second := first.Add(100 * time.Millisecond)
	cs.setReadDeadline(second)
	set := cs.rdSet
	if !set.Equal(second.Add(httpfast.DeadlineSlack)) {
		t.Fatalf("second deadline %v, want %v", set, second.Add(httpfast.DeadlineSlack))
	}
	if cs.setReadDeadline(second.Add(400 * time.Millisecond)); !cs.rdSet.Equal(set) {
		t.Fatalf("the next frame's deadline moved the socket's: %v -> %v", set, cs.rdSet)
	}
	if cs.setReadDeadline(time.Time{}); !cs.rdSet.IsZero() {
		t.Fatalf("a cleared deadline left %v", cs.rdSet)
	}
}

// tcpPairLargeBodies is a over TCP to b, which serves chat from url,
// both taking bodies up to 16 MiB (streamed ones among them).
func tcpPairLargeBodies(t *testing.T, url string) (a, b *meshNode) {
	return tcpPairLargeBodiesOn(t, url, tcpDeps.TCP)
}

// tcpPairLargeBodiesOn is tcpPairLargeBodies with a's transport tcp.
func tcpPairLargeBodiesOn(t *testing.T, url string, tcp TCP) (a, b *meshNode) {
	t.Helper()
	nodes := newMeshNodes(t, "a", "b")
	a, b = nodes[0], nodes[1]
	b.serve(url, "served-model", a)
	a.Table.AllowRemoteNode("chat", b.ID(), true)
	a.proxyCfg = proxy.Config{MeshMaxBodyBytes: 16 << 20}
	a.start(Deps{MaxBodyBytes: 16 << 20, TCP: tcp}, b)
	b.start(Deps{MaxBodyBytes: 16 << 20, TCP: tcpDeps.TCP})
	b.admitLater(a)
	a.resolvesTo(b)
	return a, b
}

// TestStalePooledConnSentAgain: the consumer's idle connections, put back
// a moment ago and so handed out without the peek, were closed by the
// serving node (as a restart closes them): a held request on one fails
// before anything of the answer and is sent once more on a new connection
// (counted as resent), and a streamed one, which cannot be sent again,
// has its connection peeked and a new one dialed. Neither fails, and
// neither falls back to QUIC.
func TestStalePooledConnSentAgain(t *testing.T) {
	up := proxytest.New(t, proxytest.Options{Model: "served-model"})
	a, b := tcpPairLargeBodies(t, up.URL)
	ask := func(body string) {
		t.Helper()
		if res, out := a.h.post("chat", "/v1/chat/completions", body); res.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", res.StatusCode, out)
		}
	}
	// closeServed has b close a's connections, and waits until a's idle
	// one sees it (so that a peek would find it closed), then puts it back.
	closeServed := func() {
		t.Helper()
		ask(chatBody(false)) // one idle connection, put back just now
		if n := b.fwd.tcp.srv.ClosePeer(a.ID()); n == 0 {
			t.Fatal("b served no connection of a's")
		}
		c, why := a.fwd.tcp.conn(context.Background(), b.ID(), false)
		if c == nil {
			t.Fatalf("no pooled connection: %s", why)
		}
		if !c.Unchecked() {
			t.Fatal("a connection put back a moment ago was peeked")
		}
		meshtest.WaitFor(t, "a's connection closed by b", func() bool { return !c.Alive() })
		a.fwd.tcp.pool.Put(c)
	}

	closeServed()
	ask(chatBody(false))
	if got := counter(t, a, "nodeld_proxy_mesh_forwarded_total", map[string]string{"result": fwdResent}); got != 1 {
		t.Errorf("forwards resent: %v, want 1", got)
	}
	closeServed()
	ask(chatOfSize(1<<20, "m")) // streamed
	if got := counter(t, a, "nodeld_proxy_mesh_forwarded_total", map[string]string{"result": fwdResent}); got != 1 {
		t.Errorf("forwards resent after a streamed one: %v, want still 1 (its connection is peeked)", got)
	}
	if got := transportCount(t, a, sideForward, TransportQUIC); got != 0 {
		t.Errorf("%v requests went over QUIC, want 0", got)
	}
	if st := a.fwd.tcp.pool.Stats(); st.Dead != 2 || st.Dials != 3 {
		t.Errorf("pool %+v, want two connections found dead and three dials", st)
	}
}
