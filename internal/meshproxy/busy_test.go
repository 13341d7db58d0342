package meshproxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/proxy"
	"github.com/nodeld/nodeld/internal/proxy/proxytest"
)

// expectChat is a Holds that expects role chat back, for maxWait.
type expectChat struct{ maxWait time.Duration }

func (e expectChat) Expect(role string) (time.Duration, bool) { return e.maxWait, role == "chat" }
func (expectChat) Want(string)                                {}

// busyPair is consumer a holding requests for chat up to maxWait, and b
// serving chat from up to a one request at a time.
func busyPair(t *testing.T, up *proxytest.Upstream, maxWait time.Duration, aDeps ...Deps) (a, b *meshNode) {
	t.Helper()
	nodes := newMeshNodes(t, "a", "b")
	a, b = nodes[0], nodes[1]
	b.serve(up.URL, "served-model", a)
	a.Table.AllowRemoteNode("chat", b.ID(), true)
	a.proxyCfg = proxy.Config{Hold: proxy.HoldConfig{MaxWait: maxWait}}
	a.holds = expectChat{maxWait: maxWait}
	var ad Deps
	if len(aDeps) > 0 {
		ad = aDeps[0]
	}
	a.start(ad, b)
	b.start(Deps{MaxInflightPerPeer: 1})
	b.admitLater(a)
	a.resolvesTo(b)
	return a, b
}

// blockEmbeddings is an upstream whose /v1/embeddings requests wait for
// the gate to open (or their end).
func blockEmbeddings(t *testing.T) (*proxytest.Upstream, *proxytest.Gate) {
	g := proxytest.NewGate("/v1/embeddings", 4)
	return proxytest.New(t, proxytest.Options{Hooks: proxytest.Hooks{OnRequest: g.Hook}}), g
}

// answer is a client's view of a response.
type answer struct {
	status int
	body   string
	err    error
}

// postCtx posts a chat request to a's role port in the background.
func postCtx(ctx context.Context, a *meshNode, body string) <-chan answer {
	got := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, a.h.url("chat")+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		res, err := a.h.client.Do(req)
		if err != nil {
			got <- answer{err: err}
			return
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		got <- answer{status: res.StatusCode, body: string(b), err: err}
	}()
	return got
}

// holdNext makes a's next requests for chat find no route (held), runs
// send, waits until n are held, and gives the route back.
func holdNext(t *testing.T, a, b *meshNode, n int, send func()) {
	t.Helper()
	a.Table.AllowRemoteNode("chat", b.ID(), false)
	if _, ok := a.Table.Resolve("chat"); ok {
		t.Fatal("chat still resolves with b not allowed")
	}
	send()
	meshtest.WaitFor(t, "requests held", func() bool {
		v, _ := metricValue(t, a.Registry, "nodeld_proxy_hold_queue_depth", map[string]string{"role": "chat"})
		return v == float64(n)
	})
	a.Table.AllowRemoteNode("chat", b.ID(), true)
}

func busyRetries(t *testing.T, a *meshNode) float64 {
	v, _ := metricValue(t, a.Registry, "nodeld_proxy_hold_busy_retries_total", map[string]string{"role": "chat"})
	return v
}

// TestMeshHeldRequestWaitsForABusyPeer (issue 24 acceptance 2): a held
// request that the serving peer refuses over_capacity before anything was
// relayed waits for a slot and is sent once when one frees; one whose
// client goes away while it waits leaves at once and is never sent; an
// ordinary request (not held) keeps the immediate 429 over_capacity.
func TestMeshHeldRequestWaitsForABusyPeer(t *testing.T) {
	up, gate := blockEmbeddings(t)
	a, b := busyPair(t, up, testDeadline)
	defer gate.Open()
	// The one request b serves a at a time.
	blocker := make(chan int, 1)
	go func() {
		res, _ := a.h.post("chat", "/v1/embeddings", `{"input":"x"}`)
		blocker <- res.StatusCode
	}()
	wait(t, gate.Entered, "the blocking request upstream")

	res, body := a.h.post("chat", "/v1/chat/completions", chatBody(false))
	if res.StatusCode != http.StatusTooManyRequests || apiError(t, res, body).Code != proxy.CodeOverCapacity {
		t.Fatalf("an ordinary request past b's limit: %d %s, want 429 over_capacity", res.StatusCode, body)
	}
	if n := busyRetries(t, a); n != 0 {
		t.Fatalf("an ordinary request counted %v busy retries", n)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var kept, gone <-chan answer
	holdNext(t, a, b, 2, func() {
		kept = postCtx(context.Background(), a, chatBody(false))
		gone = postCtx(ctx, a, chatBody(false))
	})
	meshtest.WaitFor(t, "both held requests waiting for b's slot", func() bool { return busyRetries(t, a) >= 4 })
	cancel()
	if ans := wait(t, gone, "the gone client's request"); !errors.Is(ans.err, context.Canceled) {
		t.Fatalf("the gone client: %+v, want canceled", ans)
	}
	meshtest.WaitFor(t, "the gone client's request to leave", func() bool {
		// Counted under route none while it waits, remote if it went
		// while a try was on its way.
		n, _ := metricValue(t, a.Registry, "nodeld_proxy_requests_total", map[string]string{"role": "chat", "route": "none", "code": "499"})
		r, _ := metricValue(t, a.Registry, "nodeld_proxy_requests_total", map[string]string{"role": "chat", "route": "remote", "code": "499"})
		return n+r == 1
	})
	select {
	case ans := <-kept:
		t.Fatalf("the held request was answered while b's slot was taken: %+v", ans)
	default:
	}
	before := up.Count()
	gate.Open()
	if s := wait(t, blocker, "the blocking request"); s != http.StatusOK {
		t.Fatalf("the blocking request: %d", s)
	}
	ans := wait(t, kept, "the held request")
	if ans.err != nil || ans.status != http.StatusOK || !strings.Contains(ans.body, `"chat.completion"`) {
		t.Fatalf("the held request: %+v, want 200 from b's instance", ans)
	}
	if n := up.Count() - before; n != 1 {
		t.Errorf("b's instance got %d requests after the slot freed, want 1 (the held one, once)", n)
	}
	if chats := up.CountPath("/v1/chat/completions"); chats != 1 {
		t.Errorf("b's instance got %d chat requests, want 1: refused tries never reach it, the gone one was never sent", chats)
	}
	// Observed once the handler returns, which may be after its client
	// read the answer.
	meshtest.WaitFor(t, "one hold wait observed per held request", func() bool {
		v, _ := metricValue(t, a.Registry, "nodeld_proxy_hold_wait_seconds", map[string]string{"role": "chat"})
		return v == 2
	})
}

// TestMeshHeldBusyPastMaxWait: a held request whose peer stays busy is
// tried until its max wait, then answered the peer's 429 over_capacity.
func TestMeshHeldBusyPastMaxWait(t *testing.T) {
	const maxWait = 300 * time.Millisecond
	up, gate := blockEmbeddings(t)
	a, b := busyPair(t, up, maxWait)
	// The blocking request is answered before the test ends: the nodes
	// stopping under it (the cleanup) would fail its post.
	blocker := make(chan int, 1)
	go func() {
		res, _ := a.h.post("chat", "/v1/embeddings", `{"input":"x"}`)
		blocker <- res.StatusCode
	}()
	defer func() {
		gate.Open()
		if s := wait(t, blocker, "the blocking request"); s != http.StatusOK {
			t.Errorf("the blocking request: %d, want 200", s)
		}
	}()
	wait(t, gate.Entered, "the blocking request upstream")
	var got <-chan answer
	start := time.Now()
	holdNext(t, a, b, 1, func() { got = postCtx(context.Background(), a, chatBody(false)) })
	ans := wait(t, got, "the held request")
	if ans.err != nil || ans.status != http.StatusTooManyRequests || !strings.Contains(ans.body, `"code":"over_capacity"`) {
		t.Fatalf("past max wait with b busy: %+v, want 429 over_capacity", ans)
	}
	if d := time.Since(start); d < maxWait {
		t.Errorf("answered after %s, before its max wait %s", d, maxWait)
	}
	if n := busyRetries(t, a); n < 2 {
		t.Errorf("%v busy retries, want the request tried again while it waited", n)
	}
}

// TestMeshHeldNotResentAfterTheAnswerStarted: a peer that sends a
// response head (and, for a stream, relays a first chunk) and then
// refuses over_capacity has taken the request: the held request is not
// sent again (the stream is cut, the other answered 502), and nothing
// counts as a wait for a busy peer.
func TestMeshHeldNotResentAfterTheAnswerStarted(t *testing.T) {
	for _, stream := range []bool{true, false} {
		t.Run(map[bool]string{true: "stream", false: "json"}[stream], func(t *testing.T) {
			up := proxytest.New(t, proxytest.Options{})
			// b's stream handler is replaced: a sends over QUIC.
			a, b := busyPair(t, up, testDeadline, Deps{TCP: TCP{Transport: TransportQUIC}})
			var served atomic.Int32
			b.Mesh.Handle(mesh.KindInfer, func(ctx context.Context, peer mesh.PeerInfo, s *mesh.Stream) {
				served.Add(1)
				if _, err := readRequestHead(s); err != nil {
					t.Errorf("request head: %v", err)
					return
				}
				ct := "application/json"
				if stream {
					ct = "text/event-stream"
				}
				w, _ := appendResponseHeadFrame(nil, http.StatusOK, http.Header{"Content-Type": {ct}})
				if stream {
					w = mesh.AppendFrameHeader(w, frameRespBody, len("data: 1\n\n"))
					w = append(w, "data: 1\n\n"...)
				}
				if _, err := s.Write(w); err != nil {
					t.Errorf("write: %v", err)
					return
				}
				if err := writeJSONFrame(s, frameRefusal, meshRefusal{V: MeshWireVersion, Code: RefuseOverCapacity}); err != nil {
					t.Errorf("write refusal: %v", err)
				}
				_ = s.CloseWrite()
				s.StopReading(mesh.StreamCodeCancelled)
			})
			var got <-chan answer
			holdNext(t, a, b, 1, func() { got = postCtx(context.Background(), a, chatBody(stream)) })
			ans := wait(t, got, "the held request")
			if stream {
				if ans.status != http.StatusOK || !errors.Is(ans.err, io.ErrUnexpectedEOF) || !strings.Contains(ans.body, "data: 1") {
					t.Fatalf("a stream refused midway: %+v, want 200, the first chunk, then a cut", ans)
				}
			} else if ans.status != http.StatusBadGateway {
				t.Fatalf("an answer refused after its head: %+v, want 502", ans)
			}
			if n := served.Load(); n != 1 {
				t.Errorf("b was sent the request %d times, want once", n)
			}
			if n := busyRetries(t, a); n != 0 {
				t.Errorf("%v busy retries for a refusal after the head", n)
			}
		})
	}
}
