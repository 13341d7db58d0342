package meshproxy

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/proxy/proxytest"
)

// tcpSharedDeps carries every exchange as a stream of a shared connection
// (TCPSharedAfter, which the tests' one request at a time never passes,
// set to none).
var tcpSharedDeps = Deps{TCP: TCP{Transport: TransportTCP, sharedAfter: -1}}

// TestTCPStreamsCarryInference (issue 26): exchanges carried as streams
// of shared connections answer as connections of their own do: answers,
// event streams and bodies streamed both ways, one after another on a
// reused stream and many at once; QUIC carries none of them.
func TestTCPStreamsCarryInference(t *testing.T) {
	up := proxytest.New(t, proxytest.Options{Model: "served-model", Chunks: 3})
	a, b := tcpPair(t, up, tcpSharedDeps, tcpDeps)
	askEveryKind(t, a)
	if st := a.fwd.tcp.pool.Stats(); st.Shared != 1 || st.Dials != 1 {
		t.Errorf("pool %+v, want the one shared connection dialed, its stream reused", st)
	}
	const n = 8
	var got [n]<-chan answer
	for i := range n {
		got[i] = postCtx(context.Background(), a, chatBody(i%2 == 0))
	}
	for i := range n {
		if ans := wait(t, got[i], "an answer"); ans.status != 200 || ans.err != nil {
			t.Fatalf("request %d of %d at once: %+v", i, n, ans)
		}
	}
	if got, want := transportCount(t, a, sideForward, TransportTCP)+transportCount(t, a, sideForward, TransportQUIC), float64(9+n); got != want {
		t.Errorf("%v forwards, want %v", got, want)
	}
	if st := a.fwd.tcp.pool.Stats(); st.Shared < 1 || st.Shared > 2 {
		t.Errorf("pool %+v, want one or two shared connections", st)
	}
	if got := transportCount(t, b, sideServe, TransportTCP); got < 9 {
		t.Errorf("served over tcp: %v, want at least the 9 one at a time", got)
	}
}

// TestTCPStreamConsumerGoneCancels: a consumer that goes away during a
// long answer on a stream (its client closes) resets the stream, and the
// serving node's watcher cancels the instance's request, as on a
// connection of its own.
func TestTCPStreamConsumerGoneCancels(t *testing.T) {
	up, entered, cancelled := heldUpstream(t)
	a, b := tcpPair(t, up, tcpSharedDeps, tcpDeps)
	ctx, cancel := context.WithCancel(context.Background())
	got := postCtx(ctx, a, chatBody(true))
	wait(t, entered, "the instance serving the request")
	// The reset is read by the exchange's watcher, which starts
	// TCPWatchDelay after the request was read, whether before or after.
	cancel()
	wait(t, got, "the request's end")
	meshtest.WaitFor(t, "the instance's request cancelled", cancelled.Load)
	meshtest.WaitFor(t, "serving slot released", func() bool { n, _ := b.fwd.Inflight(); return n == 0 })
	// The shared connection serves on.
	if res, body := a.h.post("chat", "/v1/chat/completions", chatBody(false)); res.StatusCode != http.StatusOK {
		t.Fatalf("after the reset: %d %s", res.StatusCode, body)
	}
}

// heldUpstream is an instance whose streamed answer stops before its
// second chunk until its request's context ends: entered says it got
// there, cancelled that the context ended.
func heldUpstream(t *testing.T) (up *proxytest.Upstream, entered chan struct{}, cancelled *atomic.Bool) {
	t.Helper()
	cancelled = new(atomic.Bool)
	entered = make(chan struct{}, 1)
	up = proxytest.New(t, proxytest.Options{Chunks: 3, Hooks: proxytest.Hooks{BeforeChunk: func(ctx context.Context, i int) {
		if i == 1 {
			entered <- struct{}{}
			<-ctx.Done()
			cancelled.Store(true)
		}
	}}})
	return up, entered, cancelled
}

// TestTCPStaleSharedConnection: the serving node closed the consumer's
// shared connection (as a restart does) while its streams were idle, so
// no one read its end: the stream's Alive probes the connection and sees
// it, and the next held and streamed requests both get answers over TCP.
func TestTCPStaleSharedConnection(t *testing.T) {
	up := proxytest.New(t, proxytest.Options{Model: "served-model"})
	a, b := tcpPairLargeBodiesOn(t, up.URL, tcpSharedDeps.TCP)
	for _, body := range []string{chatBody(false), chatOfSize(1<<20, "m")} {
		if res, out := a.h.post("chat", "/v1/chat/completions", chatBody(false)); res.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", res.StatusCode, out)
		}
		if n := b.fwd.tcp.srv.ClosePeer(a.ID()); n == 0 {
			t.Fatal("b served no connection of a's")
		}
		c, why := a.fwd.tcp.conn(context.Background(), b.ID(), false)
		if c == nil || !c.Shared() {
			t.Fatalf("no pooled stream: %v %s", c, why)
		}
		meshtest.WaitFor(t, "the idle stream's connection seen closed", func() bool { return !c.Alive() })
		a.fwd.tcp.pool.Put(c) // closed, not kept: it is not alive
		if res, out := a.h.post("chat", "/v1/chat/completions", body); res.StatusCode != http.StatusOK {
			t.Fatalf("after the close: %d %s", res.StatusCode, out)
		}
	}
	if got := transportCount(t, a, sideForward, TransportQUIC); got != 0 {
		t.Errorf("%v requests went over QUIC, want 0", got)
	}
}

// TestTCPMetricsShowThePool: the TCP transport's pool and server are
// exported as they are at each scrape: the consumer's shared connection,
// its dial and reuses, its stream idle between exchanges; the serving
// node's connection.
func TestTCPMetricsShowThePool(t *testing.T) {
	up := proxytest.New(t, proxytest.Options{Model: "served-model", Chunks: 3})
	a, b := tcpPair(t, up, tcpSharedDeps, tcpDeps)
	askEveryKind(t, a)
	for _, c := range []struct {
		n      *meshNode
		name   string
		labels map[string]string
		want   float64
	}{
		{a, "nodeld_proxy_mesh_tcp_pool_shared", nil, 1},
		{a, "nodeld_proxy_mesh_tcp_pool_connections", map[string]string{"state": "idle"}, 1},
		{a, "nodeld_proxy_mesh_tcp_pool_connections", map[string]string{"state": "in_use"}, 0},
		{a, "nodeld_proxy_mesh_tcp_pool_events_total", map[string]string{"event": "dial"}, 1},
		{a, "nodeld_proxy_mesh_tcp_pool_events_total", map[string]string{"event": "reuse"}, 8},
		{a, "nodeld_proxy_mesh_tcp_pool_events_total", map[string]string{"event": "dial_failed"}, 0},
		{b, "nodeld_proxy_mesh_tcp_served", map[string]string{"kind": "connections"}, 1},
	} {
		got, ok := metricValue(t, c.n.Registry, c.name, c.labels)
		if !ok || got != c.want {
			t.Errorf("%s: %s%v = %v (found %v), want %v", c.n.Name, c.name, c.labels, got, ok, c.want)
		}
	}
}
