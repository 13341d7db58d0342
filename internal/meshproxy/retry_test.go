package meshproxy

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/proxy"
	"github.com/nodeld/nodeld/internal/proxy/proxytest"
)

// A forward has one retry owner, the proxy's routing loop: a request that
// meets the stateless reset of its peer's new run fails in the mesh (which
// does not send an inference stream again), and the proxy sends it once
// more, to the same peer (PeerRestarted), through a new stream that waits
// for the new run's link. Counted at both ends: two streams opened for the
// request, one retry, nothing replayed by the mesh, one request at the
// upstream. Fails if the mesh replays the stream as well (then the proxy
// never retries) or if either retries again.
func TestMeshForwardRetriedOnceByTheProxy(t *testing.T) {
	up := proxytest.New(t, proxytest.Options{Model: "served-model"})
	// Quiet links (no keep-alive or heartbeat for the test's length): the
	// request is the first packet b's new run gets, as the mesh's own
	// replay needs, so a mesh that replayed inference streams would take
	// this one.
	nodes := newMeshNodesOpts(t, meshtest.Options{Keepalive: 20 * time.Second}, "a", "b")
	a, b := nodes[0], nodes[1]
	for _, n := range nodes {
		n.Config.LivenessTimeout = mesh.MaxLivenessTimeout
	}
	var ws *watchStreams
	a.wrapStreams = func(ms MeshStreams) MeshStreams { ws = newWatchStreams(ms); return ws }
	b.serve(up.URL, "served-model", a)
	a.Table.AllowRemoteNode("chat", b.ID(), true)
	linkFrom(t, a, b) // a cannot link to b's new run before b admits it
	a.resolvesTo(b)
	if res, body := a.h.post("chat", "/v1/chat/completions", chatBody(false)); res.StatusCode != http.StatusOK {
		t.Fatalf("before the restart: %d %s", res.StatusCode, body)
	}
	before := len(ws.openedTo())
	upBefore := len(up.Requests())

	restartUnlinked(b) // b's new run answers a's link with a stateless reset
	got := a.postAsync()
	meshtest.WaitFor(t, "a's link to b's previous run reset", func() bool { return !a.Connected(b.Node) })
	b.Apply(a.Peer())
	r := response(t, got)
	if r.res.StatusCode != http.StatusOK || r.res.Header.Get(proxy.RouteHeader) != b.ID() || !strings.Contains(string(r.body), "served-model") {
		t.Fatalf("after the restart: %d %s via %q, want 200 from b", r.res.StatusCode, r.body, r.res.Header.Get(proxy.RouteHeader))
	}

	opened := ws.openedTo()[before:]
	if len(opened) != 2 || opened[0] != b.ID() || opened[1] != b.ID() {
		t.Errorf("streams opened for the request: %v, want two to b (the forward and the proxy's one retry)", opened)
	}
	meshtest.WaitFor(t, "nodeld_proxy_mesh_retries_total{result=ok} = 1", func() bool {
		v, _ := metricValue(t, a.Registry, "nodeld_proxy_mesh_retries_total", map[string]string{"result": "ok"})
		return v == 1
	})
	if v, _ := metricValue(t, a.Registry, "nodeld_mesh_streams_total", map[string]string{"kind": "infer", "result": "replayed"}); v != 0 {
		t.Errorf("the mesh sent %v inference streams again, want none: the proxy owns the retry", v)
	}
	if n := len(up.Requests()) - upBefore; n != 1 {
		t.Errorf("the upstream saw %d requests after the restart, want 1", n)
	}
}

// A forward whose retry fails too is not tried a third time: with both
// serving peers stopping while they hold the request, the client gets an
// error after exactly two attempts, one at each peer's model server, and
// one retry counted as failed. Fails if anything below the proxy retries
// or reroutes as well.
func TestMeshForwardNotRetriedTwice(t *testing.T) {
	nodes := newMeshNodes(t, "a", "b", "c")
	a, b, c := nodes[0], nodes[1], nodes[2]
	var ws *watchStreams
	a.wrapStreams = func(ms MeshStreams) MeshStreams { ws = newWatchStreams(ms); return ws }
	entered := make(chan struct{}, 2)
	hang := proxytest.Hooks{OnRequest: func(ctx context.Context, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		entered <- struct{}{}
		<-ctx.Done()
	}}
	upB := proxytest.New(t, proxytest.Options{Model: "b", Hooks: hang})
	upC := proxytest.New(t, proxytest.Options{Model: "c", Hooks: hang})
	b.serve(upB.URL, "b", a)
	c.serve(upC.URL, "c", a)
	startConsumerOfTwo(t, a, b, c)
	first, second := b, c
	if c.ID() < b.ID() {
		first, second = c, b
	}
	a.resolvesTo(first)

	got := a.postAsync()
	wait(t, entered, "the request at the first peer's model server")
	first.stop()
	wait(t, entered, "the retry at the second peer's model server")
	second.stop()
	r := response(t, got)
	if r.res.StatusCode == http.StatusOK {
		t.Fatalf("with both peers gone: %d %s, want an error", r.res.StatusCode, r.body)
	}
	if opened := ws.openedTo(); len(opened) != 2 || opened[0] != first.ID() || opened[1] != second.ID() {
		t.Errorf("streams opened for the request: %v, want one to %s then one to %s", opened, first.Name, second.Name)
	}
	// Count, not Requests: a request is recorded only once its hook
	// returns, which the stops above make happen at some later moment;
	// Count is taken when the request arrives.
	if nb, nc := upB.Count(), upC.Count(); nb != 1 || nc != 1 {
		t.Errorf("model servers saw %d and %d requests, want one each", nb, nc)
	}
	meshtest.WaitFor(t, "nodeld_proxy_mesh_retries_total{result=failed} = 1", func() bool {
		v, _ := metricValue(t, a.Registry, "nodeld_proxy_mesh_retries_total", map[string]string{"result": "failed"})
		return v == 1
	})
	if v, _ := metricValue(t, a.Registry, "nodeld_proxy_mesh_retries_total", map[string]string{"result": "ok"}); v != 0 {
		t.Errorf("retries ok = %v, want 0", v)
	}
}
