package meshproxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/proxy"
	"github.com/nodeld/nodeld/internal/proxy/proxytest"
	"github.com/nodeld/nodeld/internal/table"
)

// pairNodes starts consumer a and serving node b (serving "chat" from up
// to a) and waits until a resolves chat to b.
func pairNodes(t testing.TB, up *proxytest.Upstream, bDeps Deps) (a, b *meshNode) {
	t.Helper()
	nodes := newMeshNodes(t, "a", "b")
	a, b = nodes[0], nodes[1]
	b.serve(up.URL, "served-model", a)
	a.Table.AllowRemoteNode("chat", b.ID(), true)
	a.start(Deps{}, b)
	b.start(bDeps)
	b.admitLater(a)
	a.resolvesTo(b)
	return a, b
}

func TestMeshForwardInferencePaths(t *testing.T) {
	up := proxytest.New(t, proxytest.Options{Model: "served-model"})
	a, b := pairNodes(t, up, Deps{})

	tests := []struct {
		method, path, body string
		wantInBody         string
		wantUpstreamBody   string
	}{
		{"POST", "/v1/chat/completions", `{"model":"client-pick","messages":[{"role":"user","content":"hi"}]}`,
			"hello from served-model", `{"model":"served-model","messages":[{"role":"user","content":"hi"}]}`},
		{"POST", "/v1/completions", `{"prompt":"hi"}`, "hello from served-model", `{"model":"served-model","prompt":"hi"}`},
		{"POST", "/v1/embeddings", `{"input":["x","y"],"model":"m"}`, `"index":1`, `{"input":["x","y"],"model":"served-model"}`},
		{"GET", "/v1/models?x=1", "", `"id":"served-model"`, ""},
	}
	for i, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, a.h.url("chat")+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer secret")
			req.Header.Set("Cookie", "session=secret")
			req.Header.Set("X-Custom", "stays home")
			res, body := a.h.do(req)
			if res.StatusCode != 200 || !strings.Contains(string(body), tt.wantInBody) {
				t.Fatalf("%d %s", res.StatusCode, body)
			}
			if got := res.Header.Get(proxy.RouteHeader); got != b.ID() {
				t.Errorf("%s = %q, want %s", proxy.RouteHeader, got, b.ID())
			}
			got := up.Requests()[i]
			if string(got.Body) != tt.wantUpstreamBody {
				t.Errorf("upstream body %q, want %q", got.Body, tt.wantUpstreamBody)
			}
			for _, h := range []string{"Authorization", "Cookie", "X-Custom"} {
				if v := got.Header.Get(h); v != "" {
					t.Errorf("upstream got %s: %q", h, v)
				}
			}
			if got.Header.Get("Content-Type") != "application/json" {
				t.Errorf("upstream Content-Type %q", got.Header.Get("Content-Type"))
			}
			if wantPath, wantQuery, _ := strings.Cut(tt.path, "?"); got.Path != wantPath || got.Query != wantQuery {
				t.Errorf("upstream target %s?%s", got.Path, got.Query)
			}
		})
	}
	// The serving side counts a request after its last frame is written,
	// which can be after the client has read the whole response.
	meshtest.WaitFor(t, "four requests counted as served ok", func() bool {
		v, _ := metricValue(t, b.Registry, "nodeld_proxy_mesh_served_total", map[string]string{"role": "chat", "code": "ok"})
		return v == 4
	})
}

func TestMeshAllowlistMatrix(t *testing.T) {
	for _, useFrom := range []bool{true, false} {
		for _, serveTo := range []bool{true, false} {
			for _, expose := range []bool{true, false} {
				for _, admitted := range []bool{true, false} {
					name := fmt.Sprintf("use_from=%v,serve_to=%v,expose=%v,admitted=%v", useFrom, serveTo, expose, admitted)
					t.Run(name, func(t *testing.T) {
						allowlistCase(t, useFrom, serveTo, expose, admitted)
					})
				}
			}
		}
	}
}

func allowlistCase(t *testing.T, useFrom, serveTo, expose, admitted bool) {
	up := proxytest.New(t, proxytest.Options{Model: "served-model"})
	nodes := newMeshNodes(t, "a", "b")
	a, b := nodes[0], nodes[1]
	if _, err := b.Table.RegisterLocal(table.OriginAdopted, "chat", up.URL, "served-model", "openai", "llama.cpp"); err != nil {
		t.Fatal(err)
	}
	b.Table.ExposeToMesh("chat", expose)
	b.Table.AllowMeshPeer("chat", a.ID(), serveTo)
	a.Table.AllowRemoteNode("chat", b.ID(), useFrom)
	a.start(Deps{}) // admits b later, or never
	b.start(Deps{}, a)
	if admitted {
		a.admitLater(b)
	}
	if useFrom && serveTo && expose && admitted {
		a.resolvesTo(b)
		res, body := a.h.post("chat", "/v1/chat/completions", chatBody(false))
		if res.StatusCode != 200 {
			t.Fatalf("%d %s", res.StatusCode, body)
		}
		return
	}
	res, body := a.h.post("chat", "/v1/chat/completions", chatBody(false))
	if res.StatusCode == 200 {
		t.Fatalf("served through the proxy: %s", body)
	}
	// Bypass a's table: the serving side must refuse on its own.
	rec := &bufferedWriter{header: http.Header{}}
	req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1/v1/chat/completions", nil)
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	err := a.fwd.ForwardRemote(ctx, b.ID(), "chat", req, []byte(chatBody(false)), rec)
	e, ok := asError(err)
	switch {
	case !admitted:
		if !ok || e.Code != CodePeerUnreachable {
			t.Errorf("direct forward without admission: %v, want %s", err, CodePeerUnreachable)
		}
	case !serveTo || !expose:
		if !ok || e.Code != CodePeerRefused {
			t.Errorf("direct forward: %v, want %s", err, CodePeerRefused)
		}
		meshtest.WaitFor(t, "refusal audited", func() bool { return len(b.audit.all()) > 0 })
		got := b.audit.all()[0]
		want := auditRec{AuditSource, AuditKindMeshRefused, MeshRefusedEvent{Peer: a.ID(), Role: "chat", Code: RefuseNotServed}}
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(auditRec{})); diff != "" {
			t.Errorf("audit (-want +got):\n%s", diff)
		}
		// Keyed by the peer and the code; the role is the peer's choice.
		b.audit.mu.Lock()
		key := b.audit.keys[0]
		b.audit.mu.Unlock()
		if key != (chain.RecordKey{Sender: a.ID(), Kind: AuditKindMeshRefused, Reason: RefuseNotServed}) {
			t.Errorf("refusal key = %+v", key)
		}
	default: // only use_from is missing: the serving side allows it
		if err != nil || rec.status != 200 {
			t.Errorf("direct forward: %v %d", err, rec.status)
		}
	}
	if !(admitted && serveTo && expose) && up.Count() != 0 {
		t.Errorf("upstream reached %d times", up.Count())
	}
}

// bufferedWriter is a minimal http.ResponseWriter for direct forwards.
type bufferedWriter struct {
	header http.Header
	status int
	body   strings.Builder
}

func (w *bufferedWriter) Header() http.Header { return w.header }
func (w *bufferedWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}
func (w *bufferedWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = 200
	}
	return w.body.Write(b)
}

func TestMeshOverCapacity(t *testing.T) {
	gate := proxytest.NewGate("/v1/embeddings", 1)
	defer gate.Open()
	up := proxytest.New(t, proxytest.Options{Hooks: proxytest.Hooks{OnRequest: gate.Hook}})
	a, b := pairNodes(t, up, Deps{MaxInflightPerPeer: 1})
	first := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, a.h.url("chat")+"/v1/embeddings", strings.NewReader(`{"input":"x"}`))
		res, err := a.h.client.Do(req)
		if err != nil {
			first <- 0
			return
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		first <- res.StatusCode
	}()
	wait(t, gate.Entered, "first request upstream")
	if in, capacity := b.fwd.Inflight(); in != 1 || capacity != DefaultMeshMaxInflightTotal {
		t.Errorf("Inflight = %d, %d", in, capacity)
	}
	res, body := a.h.post("chat", "/v1/chat/completions", chatBody(false))
	if res.StatusCode != http.StatusTooManyRequests || apiError(t, res, body).Code != proxy.CodeOverCapacity {
		t.Errorf("second request: %d %s, want 429 over_capacity", res.StatusCode, body)
	}
	gate.Open()
	if got := wait(t, first, "first response"); got != 200 {
		t.Errorf("first request: %d", got)
	}
	meshtest.WaitFor(t, "one request counted as over capacity", func() bool {
		v, _ := metricValue(t, b.Registry, "nodeld_proxy_mesh_served_total", map[string]string{"role": "chat", "code": RefuseOverCapacity})
		return v == 1
	})
}

// readEvents reads SSE events ("data: ...\n\n") from r, sending each on
// out, until EOF or an error, which it returns.
func readEvents(r io.Reader, out chan<- string) error {
	br := bufio.NewReader(r)
	var ev strings.Builder
	for {
		line, err := br.ReadString('\n')
		ev.WriteString(line)
		if err != nil {
			return err
		}
		if line == "\n" {
			out <- ev.String()
			ev.Reset()
		}
	}
}

func TestMeshStreamingPreservesChunks(t *testing.T) {
	const chunks = 5
	received := make(chan string, chunks+2)
	gate := make(chan struct{}, 1)
	up := proxytest.New(t, proxytest.Options{Model: "served-model", Chunks: chunks, Hooks: proxytest.Hooks{
		// Chunk k goes out only once the client holds chunk k-1: the
		// stream can complete only if every chunk crosses on its own.
		BeforeChunk: func(ctx context.Context, i int) {
			if i == 0 {
				return
			}
			select {
			case <-gate:
			case <-ctx.Done():
			}
		},
	}})
	a, _ := pairNodes(t, up, Deps{})
	req, _ := http.NewRequest(http.MethodPost, a.h.url("chat")+"/v1/chat/completions", strings.NewReader(chatBody(true)))
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	res, err := a.h.client.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	done := make(chan error, 1)
	go func() { done <- readEvents(res.Body, received) }()
	var got []string
	for i := range chunks {
		got = append(got, wait(t, received, fmt.Sprintf("chunk %d", i)))
		gate <- struct{}{}
	}
	got = append(got, wait(t, received, "[DONE]"))
	if err := wait(t, done, "end of stream"); err != io.EOF {
		t.Errorf("stream ended with %v", err)
	}
	var want []string
	for i := range chunks {
		want = append(want, proxytest.Chunk("served-model", i, true))
	}
	want = append(want, "data: [DONE]\n\n")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestMeshClientCancelReachesUpstream(t *testing.T) {
	upstreamDone := make(chan struct{})
	up := proxytest.New(t, proxytest.Options{Chunks: 3, Hooks: proxytest.Hooks{BeforeChunk: func(ctx context.Context, i int) {
		if i == 1 {
			<-ctx.Done() // the test ends only if the client's cancel arrives
			close(upstreamDone)
		}
	}}})
	a, b := pairNodes(t, up, Deps{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, a.h.url("chat")+"/v1/chat/completions", strings.NewReader(chatBody(true)))
	res, err := a.h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	received := make(chan string, 4)
	go func() { _ = readEvents(res.Body, received) }()
	wait(t, received, "chunk 0")
	cancel()
	wait(t, upstreamDone, "upstream request context cancelled")
	meshtest.WaitFor(t, "serving slot released", func() bool { n, _ := b.fwd.Inflight(); return n == 0 })
}

func TestMeshPeerDiesMidStream(t *testing.T) {
	up := proxytest.New(t, proxytest.Options{Chunks: 3, Hooks: proxytest.Hooks{BeforeChunk: func(ctx context.Context, i int) {
		if i == 1 {
			<-ctx.Done()
		}
	}}})
	a, b := pairNodes(t, up, Deps{})
	req, _ := http.NewRequest(http.MethodPost, a.h.url("chat")+"/v1/chat/completions", strings.NewReader(chatBody(true)))
	ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
	defer cancel()
	res, err := a.h.client.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	received := make(chan string, 4)
	done := make(chan error, 1)
	go func() { done <- readEvents(res.Body, received) }()
	wait(t, received, "chunk 0")
	start := time.Now()
	b.stop()
	if err := wait(t, done, "cut stream"); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("stream ended with %v, want a cut (unexpected EOF)", err)
	}
	if d := time.Since(start); d > mesh.IdleTimeoutFactor*testKeepalive+time.Second {
		t.Errorf("cut after %v", d)
	}
}

func TestMeshPeerDiesBeforeHead(t *testing.T) {
	entered := make(chan struct{}, 1)
	up := proxytest.New(t, proxytest.Options{Hooks: proxytest.Hooks{OnRequest: func(ctx context.Context, r *http.Request) {
		// Read the body first: net/http notices a closed client
		// connection (and cancels ctx) only once the body is consumed.
		_, _ = io.Copy(io.Discard, r.Body)
		entered <- struct{}{}
		<-ctx.Done()
	}}})
	a, b := pairNodes(t, up, Deps{})
	got := make(chan *http.Response, 1)
	bodies := make(chan []byte, 1)
	go func() {
		res, body := a.h.post("chat", "/v1/chat/completions", chatBody(false))
		got <- res
		bodies <- body
	}()
	wait(t, entered, "request upstream")
	b.stop()
	res := wait(t, got, "response")
	body := <-bodies
	if res.StatusCode != http.StatusBadGateway || apiError(t, res, body).Type != proxy.TypeUpstream {
		t.Errorf("%d %s, want a 502 JSON error", res.StatusCode, body)
	}
}

// startConsumerOfTwo starts consumer a using role chat from b and c (both
// already serving it to a) and waits until a holds both advertisements.
func startConsumerOfTwo(t *testing.T, a, b, c *meshNode) {
	t.Helper()
	a.Table.AllowRemoteNode("chat", b.ID(), true)
	a.Table.AllowRemoteNode("chat", c.ID(), true)
	a.start(Deps{}, b, c)
	b.start(Deps{})
	c.start(Deps{})
	b.admitLater(a)
	c.admitLater(a)
	meshtest.WaitFor(t, "both peers advertised", func() bool {
		return len(a.Table.Snapshot().Roles) > 0 && len(a.Table.Snapshot().Roles[0].Remote) == 2
	})
}

func TestMeshFailover(t *testing.T) {
	upB := proxytest.New(t, proxytest.Options{Model: "b-model"})
	upC := proxytest.New(t, proxytest.Options{Model: "c-model"})
	nodes := newMeshNodes(t, "a", "b", "c")
	a, b, c := nodes[0], nodes[1], nodes[2]
	b.serve(upB.URL, "b-model", a)
	c.serve(upC.URL, "c-model", a)
	startConsumerOfTwo(t, a, b, c)
	res, body := a.h.post("chat", "/v1/chat/completions", chatBody(false))
	first := res.Header.Get(proxy.RouteHeader)
	if res.StatusCode != 200 || (first != b.ID() && first != c.ID()) {
		t.Fatalf("%d %s via %q", res.StatusCode, body, first)
	}
	gone, other := b, c
	if first == c.ID() {
		gone, other = c, b
	}
	gone.stop()
	// The consumer drops the lost peer's adverts as soon as its mesh sees
	// the link close; the next request then goes to the other peer.
	a.resolvesTo(other)
	res, body = a.h.post("chat", "/v1/chat/completions", chatBody(false))
	if res.StatusCode != 200 || res.Header.Get(proxy.RouteHeader) != other.ID() {
		t.Fatalf("after %s stopped: %d %s via %q, want %s", gone.Name, res.StatusCode, body, res.Header.Get(proxy.RouteHeader), other.Name)
	}
}

func TestMeshBodyTooLargeNoStream(t *testing.T) {
	up := proxytest.New(t, proxytest.Options{})
	a, _ := pairNodes(t, up, Deps{})
	big := `{"input":"` + strings.Repeat("x", int(proxy.DefaultMeshMaxBodyBytes)) + `"}`
	res, body := a.h.post("chat", "/v1/embeddings", big)
	if res.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("through the proxy: %d %s", res.StatusCode, body)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1/v1/embeddings", nil)
	err := a.fwd.ForwardRemote(context.Background(), "n-0000000000000000", "chat", req, []byte(big), &bufferedWriter{header: http.Header{}})
	if e, ok := asError(err); !ok || e.Status != http.StatusRequestEntityTooLarge {
		t.Errorf("ForwardRemote: %v, want 413", err)
	}
	if v, _ := metricValue(t, a.Registry, "nodeld_mesh_streams_total", map[string]string{"kind": "infer", "result": "opened"}); v != 0 {
		t.Errorf("infer streams opened: %v, want 0", v)
	}
	if up.Count() != 0 {
		t.Errorf("upstream reached")
	}
}

func TestMeshMalformedStreamReset(t *testing.T) {
	up := proxytest.New(t, proxytest.Options{})
	a, b := pairNodes(t, up, Deps{})
	tests := []struct {
		name     string
		give     []byte
		wantRole string // role label on b: the head's role only once it validated
		wantCode string // served_total code on b
	}{
		{"garbage first frame", frames(t, frameRespBody, "x"), unknownRole, servedMalformed},
		{"oversized head", append([]byte{byte(frameReqHead), 0, 1, 0, 0}, make([]byte, 16)...), unknownRole, servedMalformed},
		{"bad head json", frames(t, frameReqHead, `{"v":1,"role":"chat","x":1}`), unknownRole, RefuseBadRequest},
		{"forbidden path", frames(t, frameReqHead, meshRequestHead{V: 1, Role: "chat", Method: "GET", Path: "/health"}), unknownRole, RefuseForbiddenPath},
		{"body over the limit", frames(t, frameReqHead, meshRequestHead{V: 1, Role: "chat", Method: "POST", Path: "/v1/embeddings", BodyBytes: proxy.DefaultMeshMaxBodyBytes + 1}), "chat", RefuseTooLarge},
		{"not an object", frames(t, frameReqHead, meshRequestHead{V: 1, Role: "chat", Method: "POST", Path: "/v1/embeddings", BodyBytes: 5}, frameReqBody, "[1,2]", frameReqEnd, nil), "chat", RefuseBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
			defer cancel()
			s, err := a.Mesh.OpenStream(ctx, b.ID(), mesh.KindInfer)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = s.Write(tt.give)
			_ = s.CloseWrite()
			_, _ = io.Copy(io.Discard, s) // until the refusal ends or the reset
			meshtest.WaitFor(t, "outcome counted", func() bool {
				v, _ := metricValue(t, b.Registry, "nodeld_proxy_mesh_served_total", map[string]string{"role": tt.wantRole, "code": tt.wantCode})
				return v >= 1
			})
		})
	}
	if up.Count() != 0 {
		t.Errorf("upstream reached %d times", up.Count())
	}
	var payload []byte
	for _, r := range b.audit.all() {
		payload, _ = json.Marshal(r.payload)
	}
	if len(payload) == 0 {
		t.Error("no refusal audited")
	}
}

// A forward whose link fails before the peer answered (here the serving
// node stops with the request at its model server) is retried once on the
// next candidate, and the client gets that peer's answer: nothing of the
// first forward was relayed, and the body is held.
func TestMeshRetriesNextPeerWhenLinkFails(t *testing.T) {
	nodes := newMeshNodes(t, "a", "b", "c")
	a, b, c := nodes[0], nodes[1], nodes[2]
	// Candidates of equal health and load resolve by node id: the lower
	// id is tried first, and its model server never answers.
	first, second := b, c
	if c.ID() < b.ID() {
		first, second = c, b
	}
	entered := make(chan struct{}, 1)
	hung := proxytest.New(t, proxytest.Options{Model: "first", Hooks: proxytest.Hooks{OnRequest: func(ctx context.Context, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		entered <- struct{}{}
		<-ctx.Done()
	}}})
	good := proxytest.New(t, proxytest.Options{Model: "second"})
	first.serve(hung.URL, "first", a)
	second.serve(good.URL, "second", a)
	startConsumerOfTwo(t, a, b, c)
	a.resolvesTo(first)

	got := make(chan *http.Response, 1)
	bodies := make(chan []byte, 1)
	go func() {
		res, body := a.h.post("chat", "/v1/chat/completions", chatBody(false))
		got <- res
		bodies <- body
	}()
	wait(t, entered, "request at the first peer's model server")
	first.stop()
	res := wait(t, got, "response")
	body := <-bodies
	if res.StatusCode != http.StatusOK || res.Header.Get(proxy.RouteHeader) != second.ID() || !strings.Contains(string(body), "second") {
		t.Fatalf("after %s failed mid-request: %d %s via %q, want 200 from %s", first.Name, res.StatusCode, body, res.Header.Get(proxy.RouteHeader), second.Name)
	}
	// Counted when the handler returns, which may be after the client read
	// a response whose length it knew.
	meshtest.WaitFor(t, "nodeld_proxy_mesh_retries_total{result=ok} = 1", func() bool {
		v, _ := metricValue(t, a.Registry, "nodeld_proxy_mesh_retries_total", map[string]string{"result": "ok"})
		return v == 1
	})
}

// Ollama's inference paths cross the mesh when the peer's instance is an
// Ollama, pinned and stripped like the /v1 paths, streaming as NDJSON; its
// read and management paths never do, and a peer whose instance is not an
// Ollama is not asked for them at all (404 saying why, in Ollama's error
// shape on /api/ paths).
func TestMeshOllamaPaths(t *testing.T) {
	setup := func(t *testing.T, runtime string) (*meshNode, *proxytest.Upstream) {
		up := proxytest.New(t, proxytest.Options{Model: "served-model", Chunks: 3})
		nodes := newMeshNodes(t, "a", "b")
		a, b := nodes[0], nodes[1]
		b.serveAs(runtime, up.URL, "served-model", a)
		a.Table.AllowRemoteNode("chat", b.ID(), true)
		a.start(Deps{}, b)
		b.start(Deps{})
		b.admitLater(a)
		meshtest.WaitFor(t, "a resolving chat to b's "+runtime, func() bool {
			tg, ok := a.Table.Resolve("chat")
			return ok && tg.Kind == table.TargetRemote && tg.NodeID == b.ID() && tg.Runtime == runtime
		})
		return a, up
	}
	ollamaError := func(t *testing.T, body []byte) string {
		t.Helper()
		var e struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
			t.Fatalf("body %q is not Ollama's error shape", body)
		}
		return e.Error
	}

	t.Run("ollama instance", func(t *testing.T) {
		a, up := setup(t, "ollama")
		req, _ := http.NewRequest(http.MethodPost, a.h.url("chat")+"/api/chat", strings.NewReader(`{"model":"llama3:latest","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer never-forwarded")
		res, err := a.h.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "application/x-ndjson" {
			t.Fatalf("POST /api/chat via the mesh = %d %q %s", res.StatusCode, res.Header.Get("Content-Type"), body)
		}
		want := proxytest.NDJSONChunk("served-model", 0) + proxytest.NDJSONChunk("served-model", 1) + proxytest.NDJSONChunk("served-model", 2) +
			`{"model":"served-model","done":true}` + "\n"
		if string(body) != want {
			t.Errorf("NDJSON stream (-want +got):\n%s", cmp.Diff(want, string(body)))
		}
		reqs := up.Requests()
		if len(reqs) != 1 || string(reqs[0].Body) != `{"model":"served-model","messages":[{"role":"user","content":"hi"}]}` || reqs[0].Header.Get("Authorization") != "" {
			t.Fatalf("upstream saw %+v, want the model pinned and no Authorization", reqs)
		}
		for path, want := range map[string]int{"/api/show": http.StatusNotFound, "/api/pull": http.StatusForbidden} {
			res, body := a.h.post("chat", path, `{"model":"served-model"}`)
			if res.StatusCode != want {
				t.Errorf("POST %s = %d %s, want %d", path, res.StatusCode, body, want)
			}
			ollamaError(t, body)
		}
		if n := len(up.Requests()); n != 1 {
			t.Errorf("the upstream saw %d requests, want only the chat", n)
		}
	})
	t.Run("other instance", func(t *testing.T) {
		a, up := setup(t, "llama.cpp")
		res, body := a.h.post("chat", "/api/chat", `{"model":"x","messages":[]}`)
		if res.StatusCode != http.StatusNotFound || !strings.Contains(ollamaError(t, body), "not an Ollama") {
			t.Errorf("POST /api/chat to a peer's llama.cpp = %d %s, want 404 saying why", res.StatusCode, body)
		}
		if n := len(up.Requests()); n != 0 {
			t.Errorf("the upstream saw %d requests, want none", n)
		}
	})
}

// A consumer's first request after its serving peer was killed and started
// again on the same key and address meets the consumer's link to the
// peer's previous run, which the new run answers with a stateless reset:
// the request is served by the new run once it is linked, not failed.
func TestMeshForwardAfterPeerRestart(t *testing.T) {
	up := proxytest.New(t, proxytest.Options{Model: "served-model"})
	a, b := pairNodes(t, up, Deps{})
	if res, body := a.h.post("chat", "/v1/chat/completions", chatBody(false)); res.StatusCode != http.StatusOK {
		t.Fatalf("before the restart: %d %s", res.StatusCode, body)
	}

	b.Crash()
	got := make(chan *http.Response, 1)
	bodies := make(chan []byte, 1)
	go func() {
		res, body := a.h.post("chat", "/v1/chat/completions", chatBody(false))
		got <- res
		bodies <- body
	}()
	// The request leaves on a's link to b's previous run (its body held
	// by the forwarder once the stream is open) while nothing listens at
	// b's address; had b's new run started first, a packet of a's could
	// meet it before the request left, the link be gone and the role
	// unresolved (503, not what this test is about).
	meshtest.WaitFor(t, "the request sent on the link to b's previous run", func() bool { return a.fwd.held.Load() > 0 })
	// The new run admits no peer yet, so it does not dial a: it answers
	// the link's next packet with a stateless reset.
	b.start(Deps{})
	meshtest.WaitFor(t, "a's link to b's previous run reset", func() bool { return !a.Connected(b.Node) })
	b.Apply(a.Peer())
	res := wait(t, got, "response")
	body := <-bodies
	if res.StatusCode != http.StatusOK || res.Header.Get(proxy.RouteHeader) != b.ID() || !strings.Contains(string(body), "served-model") {
		t.Fatalf("after the restart: %d %s via %q, want 200 from b", res.StatusCode, body, res.Header.Get(proxy.RouteHeader))
	}
}
