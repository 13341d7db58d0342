package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/proxy/proxytest"
	"github.com/nodeld/nodeld/internal/table"
	"github.com/nodeld/nodeld/internal/testport"
)

func TestForwardsToLocalInstance(t *testing.T) {
	up := proxytest.New(t, proxytest.Options{Model: "llama"})
	h := startProxy(t, Config{}, Deps{})
	h.resolver.local("chat", up.URL)

	tests := []struct {
		name, method, path, body string
		wantInBody               string
		wantPath                 string
	}{
		{"chat", http.MethodPost, "/v1/chat/completions", chatBody(false), `"content":"hello from llama"`, "/v1/chat/completions"},
		{"completions", http.MethodPost, "/v1/completions", `{"model":"m","prompt":"hi"}`, `"text":"hello from llama"`, "/v1/completions"},
		{"embeddings", http.MethodPost, "/v1/embeddings", `{"model":"m","input":["a","b"]}`, `"index":1`, "/v1/embeddings"},
		{"models", http.MethodGet, "/v1/models", "", `"id":"llama"`, "/v1/models"},
		{"health", http.MethodGet, "/health", "", `"status":"ok"`, "/health"},
		{"ollama version", http.MethodGet, "/api/version", "", `"version":"0.0.0-proxytest"`, "/api/version"},
		{"other v1 path with query", http.MethodGet, "/v1/props?x=1", "", `"query":"x=1"`, "/v1/props"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, h.url("chat")+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if tt.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			req.Header.Set("Authorization", "Bearer sk-local")
			before := up.Count()
			res, body := h.do(req)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d, body %s", res.StatusCode, body)
			}
			if !strings.Contains(string(body), tt.wantInBody) {
				t.Errorf("body %s does not contain %s", body, tt.wantInBody)
			}
			if got := res.Header.Get(RouteHeader); got != "local" {
				t.Errorf("%s = %q, want local", RouteHeader, got)
			}
			if got := res.Header.Get("Content-Type"); got != "application/json" {
				t.Errorf("Content-Type = %q", got)
			}
			reqs := up.Requests()
			if up.Count() != before+1 {
				t.Fatalf("upstream saw %d requests, want %d", up.Count(), before+1)
			}
			got := reqs[len(reqs)-1]
			if got.Path != tt.wantPath || got.Method != tt.method || string(got.Body) != tt.body {
				t.Errorf("upstream got %s %s %q, want %s %s %q", got.Method, got.Path, got.Body, tt.method, tt.wantPath, tt.body)
			}
			if a := got.Header.Get("Authorization"); a != "Bearer sk-local" {
				t.Errorf("upstream Authorization = %q, want it passed through", a)
			}
			if xf := got.Header.Get("X-Forwarded-For"); xf != "" {
				t.Errorf("upstream X-Forwarded-For = %q, want none", xf)
			}
			if got.Host != strings.TrimPrefix(up.URL, "http://") {
				t.Errorf("upstream Host = %q, want the instance's address", got.Host)
			}
		})
	}
}

func TestStreamsChunksBeforeUpstreamFinishes(t *testing.T) {
	const chunks = 5
	tests := []struct {
		name, path, body, contentType, tail string
		chunk                               func(i int) string
		read                                func(*bufio.Reader) (string, error)
	}{
		{
			name: "sse", path: "/v1/chat/completions", body: chatBody(true), contentType: "text/event-stream",
			tail:  "data: [DONE]\n\n",
			chunk: func(i int) string { return proxytest.Chunk("test-model", i, true) },
			read:  readEvent,
		},
		{
			name: "chunked ndjson", path: "/api/chat", body: `{"model":"m","messages":[]}`, contentType: "application/x-ndjson",
			tail:  `{"model":"test-model","done":true}` + "\n",
			chunk: func(i int) string { return proxytest.NDJSONChunk("test-model", i) },
			read:  func(br *bufio.Reader) (string, error) { return br.ReadString('\n') },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			release := make([]chan struct{}, chunks)
			for i := range release {
				release[i] = make(chan struct{})
			}
			var produced atomic.Int64 // chunks the upstream has been allowed to write
			up := proxytest.New(t, proxytest.Options{Chunks: chunks, Hooks: proxytest.Hooks{
				BeforeChunk: func(ctx context.Context, i int) {
					if i > 0 {
						select {
						case <-release[i]:
						case <-ctx.Done():
							return
						}
					}
					produced.Add(1)
				},
			}})
			h := startProxy(t, Config{}, Deps{})
			h.resolver.local("chat", up.URL)

			ctx, cancel := context.WithTimeout(context.Background(), testDeadline)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.url("chat")+tt.path, strings.NewReader(tt.body))
			res, err := h.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			if ct := res.Header.Get("Content-Type"); ct != tt.contentType {
				t.Errorf("Content-Type = %q, want %q", ct, tt.contentType)
			}
			if got := res.Header.Get(RouteHeader); got != "local" {
				t.Errorf("%s = %q", RouteHeader, got)
			}
			br := bufio.NewReader(res.Body)
			for i := range chunks {
				// Chunk i+1 is only produced after the client has read chunk
				// i: a buffering proxy deadlocks here until the deadline.
				got, err := tt.read(br)
				if err != nil {
					t.Fatalf("reading chunk %d: %v", i, err)
				}
				if want := tt.chunk(i); got != want {
					t.Fatalf("chunk %d = %q, want %q", i, got, want)
				}
				if n := produced.Load(); n != int64(i+1) {
					t.Fatalf("client read chunk %d when the upstream had produced %d chunks, want %d", i, n, i+1)
				}
				if i+1 < chunks {
					close(release[i+1])
				}
			}
			rest, err := io.ReadAll(br)
			if err != nil {
				t.Fatal(err)
			}
			if string(rest) != tt.tail {
				t.Errorf("stream tail = %q, want %q", rest, tt.tail)
			}
		})
	}
}

// readEvent reads one SSE event ("data: ...\n\n").
func readEvent(br *bufio.Reader) (string, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return "", err
	}
	blank, err := br.ReadString('\n')
	return line + blank, err
}

func TestClientCancelReachesUpstream(t *testing.T) {
	sawCancel := make(chan struct{})
	up := proxytest.New(t, proxytest.Options{Chunks: 3, Hooks: proxytest.Hooks{
		BeforeChunk: func(ctx context.Context, i int) {
			if i == 1 {
				<-ctx.Done()
				close(sawCancel)
			}
		},
	}})
	h := startProxy(t, Config{}, Deps{})
	h.resolver.local("chat", up.URL)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.url("chat")+"/v1/chat/completions", strings.NewReader(chatBody(true)))
	res, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if _, err := bufio.NewReader(res.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	wait(t, sawCancel, "the upstream to see its request cancelled")
}

func TestGuards(t *testing.T) {
	up := proxytest.New(t, proxytest.Options{})
	h := startProxy(t, Config{MaxBodyBytes: 64}, Deps{})
	h.resolver.local("chat", up.URL)

	req := func(method, target, host, extra string) string {
		return method + " " + target + " HTTP/1.1\r\nHost: " + host + "\r\n" + extra + "Connection: close\r\n\r\n"
	}
	const ok = "127.0.0.1"
	tests := []struct {
		name       string
		request    string
		wantStatus int
		wantCode   string
	}{
		{"evil host", req("GET", "/v1/models", "evil.example", ""), 403, CodeForbiddenHost},
		{"localhost suffix host", req("GET", "/v1/models", "localhost.evil.example", ""), 403, CodeForbiddenHost},
		{"private ip host", req("GET", "/v1/models", "10.0.0.2:8090", ""), 403, CodeForbiddenHost},
		{"foreign origin", req("GET", "/v1/models", ok, "Origin: http://evil.example\r\n"), 403, CodeForbiddenOrigin},
		{"https origin", req("GET", "/v1/models", ok, "Origin: https://localhost\r\n"), 403, CodeForbiddenOrigin},
		{"null origin", req("GET", "/v1/models", ok, "Origin: null\r\n"), 403, CodeForbiddenOrigin},
		{"double slash", req("GET", "//x", ok, ""), 400, CodeBadPath},
		{"double slash inside", req("GET", "/v1//models", ok, ""), 400, CodeBadPath},
		{"dot dot", req("GET", "/v1/../admin", ok, ""), 400, CodeBadPath},
		{"dot segment", req("GET", "/v1/./models", ok, ""), 400, CodeBadPath},
		{"encoded dot", req("GET", "/v1/%2e%2e/admin", ok, ""), 400, CodeBadPath},
		{"encoded dot upper", req("GET", "/v1/%2E%2E/admin", ok, ""), 400, CodeBadPath},
		{"encoded slash", req("GET", "/v1/a%2fb", ok, ""), 400, CodeBadPath},
		{"non-canonical escape", req("GET", "/v1/%6dodels", ok, ""), 400, CodeBadPath},
		{"absolute form", req("GET", "http://evil.example/v1/models", ok, ""), 400, CodeBadPath},
		{"unknown path", req("GET", "/admin", ok, ""), 404, CodeNotFound},
		{"root", req("GET", "/", ok, ""), 404, CodeNotFound},
		{"put", req("PUT", "/v1/models", ok, "Content-Length: 0\r\n"), 405, CodeMethodNotAllowed},
		{"delete", req("DELETE", "/v1/models", ok, ""), 405, CodeMethodNotAllowed},
		{"options", req("OPTIONS", "/v1/models", ok, ""), 405, CodeMethodNotAllowed},
		{"oversized body", req("POST", "/v1/chat/completions", ok, "Content-Length: 65\r\n") + strings.Repeat("x", 65), 413, CodeBodyTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, body := h.raw("chat", tt.request)
			if res.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d (body %s)", res.StatusCode, tt.wantStatus, body)
			}
			if got := apiError(t, res, body); got.Code != tt.wantCode {
				t.Errorf("code %q, want %q (message %q)", got.Code, tt.wantCode, got.Message)
			}
			if tt.wantStatus == 405 && res.Header.Get("Allow") != "GET, POST" {
				t.Errorf("Allow = %q", res.Header.Get("Allow"))
			}
		})
	}
	if n := up.Count(); n != 0 {
		t.Errorf("upstream received %d requests, want 0", n)
	}
	// Accepted spellings still reach the upstream.
	for _, host := range []string{"localhost", "LOCALHOST:1", "127.0.0.1:8090", "[::1]:8090", "127.1.2.3"} {
		res, body := h.raw("chat", req("GET", "/v1/models", host, "Origin: http://localhost:3000\r\n"))
		if res.StatusCode != 200 {
			t.Errorf("Host %q: status %d, body %s", host, res.StatusCode, body)
		}
	}
}

func TestOversizedStreamedBody(t *testing.T) {
	up := proxytest.New(t, proxytest.Options{})
	h := startProxy(t, Config{MaxBodyBytes: 1024}, Deps{})
	h.resolver.local("chat", up.URL)
	// No Content-Length: the body is sent chunked and caught while
	// streaming.
	body := io.MultiReader(strings.NewReader(`{"model":"m","prompt":"`), strings.NewReader(strings.Repeat("x", 4096)), strings.NewReader(`"}`))
	req, _ := http.NewRequest(http.MethodPost, h.url("chat")+"/v1/completions", io.NopCloser(body))
	res, b := h.do(req)
	if res.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413 (body %s)", res.StatusCode, b)
	}
	if got := apiError(t, res, b); got.Code != CodeBodyTooLarge {
		t.Errorf("code %q", got.Code)
	}
}

func TestUpstreamDown(t *testing.T) {
	dead := "http://" + testport.Addr(t)
	h := startProxy(t, Config{}, Deps{})
	h.resolver.local("chat", dead)
	res, body := h.post("chat", "/v1/chat/completions", chatBody(false))
	if res.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d, want 502 (body %s)", res.StatusCode, body)
	}
	if got := apiError(t, res, body); got.Code != CodeUpstreamDown || got.Type != TypeUpstream {
		t.Errorf("error %+v", got)
	}
}

func TestNonLoopbackTargetRefused(t *testing.T) {
	h := startProxy(t, Config{}, Deps{})
	h.resolver.local("chat", "http://192.0.2.7:80")
	res, body := h.get("chat", "/v1/models")
	if res.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d, want 502 (body %s)", res.StatusCode, body)
	}
	if got := apiError(t, res, body); got.Code != CodeBadTarget {
		t.Errorf("code %q", got.Code)
	}
}

func TestNoInstance(t *testing.T) {
	h := startProxy(t, Config{}, Deps{})
	res, body := h.post("chat", "/v1/chat/completions", chatBody(false))
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", res.StatusCode)
	}
	want := errorFields{Message: "no instance serves role 'chat'", Type: TypeUnavailable, Code: CodeNoInstance}
	if diff := cmp.Diff(want, apiError(t, res, body)); diff != "" {
		t.Errorf("error (-want +got):\n%s", diff)
	}
}

func TestRemoteWithoutMesh(t *testing.T) {
	h := startProxy(t, Config{}, Deps{})
	h.resolver.set("chat", table.Target{Kind: table.TargetRemote, NodeID: "node-b"})
	res, body := h.post("chat", "/v1/chat/completions", chatBody(false))
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", res.StatusCode)
	}
	want := errorFields{Message: "role 'chat' is served by a peer but the mesh is not running", Type: TypeUnavailable, Code: CodeMeshNotRunning}
	if diff := cmp.Diff(want, apiError(t, res, body)); diff != "" {
		t.Errorf("error (-want +got):\n%s", diff)
	}
}

func TestConcurrencyLimit(t *testing.T) {
	hold := make(chan struct{})
	arrived := make(chan struct{})
	up := proxytest.New(t, proxytest.Options{Hooks: proxytest.Hooks{
		OnRequest: func(ctx context.Context, r *http.Request) {
			if r.URL.Path != "/v1/chat/completions" {
				return
			}
			arrived <- struct{}{}
			select {
			case <-hold:
			case <-ctx.Done():
			}
		},
	}})
	h := startProxy(t, Config{Roles: []RoleConfig{{Name: "chat", Listen: "127.0.0.1:0", Concurrency: 2}}}, Deps{})
	h.resolver.local("chat", up.URL)

	statuses := make(chan int, 2)
	for range 2 {
		go func() {
			req, _ := http.NewRequest(http.MethodPost, h.url("chat")+"/v1/chat/completions", strings.NewReader(chatBody(false)))
			res, err := h.client.Do(req)
			if err != nil {
				statuses <- -1
				return
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			statuses <- res.StatusCode
		}()
	}
	wait(t, arrived, "first held request")
	wait(t, arrived, "second held request")
	if n, c := h.p.Inflight("chat"); n != 2 || c != 2 {
		t.Errorf("Inflight = %d, %d; want 2, 2", n, c)
	}
	if v, _ := metricValue(t, h.reg, "nodeld_proxy_inflight_requests", map[string]string{"role": "chat"}); v != 2 {
		t.Errorf("inflight gauge = %v, want 2", v)
	}
	res, body := h.post("chat", "/v1/models", "")
	if res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429 (body %s)", res.StatusCode, body)
	}
	if got := apiError(t, res, body); got.Code != CodeOverCapacity || got.Type != TypeRateLimit {
		t.Errorf("error %+v", got)
	}
	close(hold)
	for range 2 {
		if s := wait(t, statuses, "held request"); s != http.StatusOK {
			t.Errorf("held request status %d", s)
		}
	}
	if n, _ := h.p.Inflight("chat"); n != 0 {
		t.Errorf("Inflight after release = %d", n)
	}
}

func TestKeepAlive(t *testing.T) {
	up := proxytest.New(t, proxytest.Options{})
	h := startProxy(t, Config{}, Deps{})
	h.resolver.local("chat", up.URL)
	reused := 0
	const n = 20
	for i := range n {
		trace := &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) {
			if ci.Reused {
				reused++
			}
		}}
		req, _ := http.NewRequest(http.MethodPost, h.url("chat")+"/v1/chat/completions", strings.NewReader(chatBody(i%2 == 0)))
		req = req.WithContext(httptrace.WithClientTrace(context.Background(), trace))
		if res, body := h.do(req); res.StatusCode != 200 {
			t.Fatalf("status %d: %s", res.StatusCode, body)
		}
	}
	if got := up.Conns(); got != 1 {
		t.Errorf("upstream accepted %d connections for %d sequential requests, want 1", got, n)
	}
	if reused != n-1 {
		t.Errorf("client reused its connection %d times, want %d", reused, n-1)
	}
}

func TestCutAfterHead(t *testing.T) {
	// An upstream that sends a head and part of a body, then drops the
	// connection: the client must see a cut stream, not a clean end.
	up := http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: part\n\n")
		http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = up.Serve(ln) }()
	t.Cleanup(func() { up.Close(); <-served })

	h := startProxy(t, Config{}, Deps{})
	h.resolver.local("chat", "http://"+ln.Addr().String())
	req, _ := http.NewRequest(http.MethodPost, h.url("chat")+"/v1/chat/completions", strings.NewReader(chatBody(true)))
	res, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("status %d", res.StatusCode)
	}
	b, err := io.ReadAll(res.Body)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("read error %v, want unexpected EOF (a cut stream)", err)
	}
	if string(b) != "data: part\n\n" {
		t.Errorf("body %q", b)
	}
}

func TestMetrics(t *testing.T) {
	up := proxytest.New(t, proxytest.Options{})
	h := startProxy(t, Config{}, Deps{})
	h.resolver.local("chat", up.URL)
	h.post("chat", "/v1/chat/completions", chatBody(false))
	h.post("chat", "/v1/chat/completions", chatBody(true))
	h.get("chat", "/admin")

	tests := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"nodeld_proxy_requests_total", map[string]string{"role": "chat", "route": "local", "code": "200"}, 2},
		{"nodeld_proxy_requests_total", map[string]string{"role": "chat", "route": "none", "code": "404"}, 1},
		{"nodeld_proxy_request_duration_seconds", map[string]string{"role": "chat", "route": "local"}, 2},
		{"nodeld_proxy_time_to_first_byte_seconds", map[string]string{"role": "chat", "route": "local"}, 2},
		{"nodeld_proxy_inflight_requests", map[string]string{"role": "chat"}, 0},
	}
	// A request is counted when its handler returns, which can be just
	// after the client has read the whole response.
	for _, tt := range tests {
		meshtest.WaitFor(t, fmt.Sprintf("%s%v = %v", tt.name, tt.labels, tt.want), func() bool {
			got, ok := metricValue(t, h.reg, tt.name, tt.labels)
			return ok && got == tt.want
		})
	}
}

func TestPortsRecordedAndApplyConfig(t *testing.T) {
	up := proxytest.New(t, proxytest.Options{})
	h := startProxy(t, Config{}, Deps{})
	h.resolver.local("chat", up.URL)
	h.resolver.local("embed", up.URL)

	addr, _ := h.p.Addr("chat")
	if port, _ := h.ports.get("chat"); int(port) != addr.(*net.TCPAddr).Port || port == 0 {
		t.Errorf("recorded port %d, listener on %s", port, addr)
	}

	// A bind failure changes nothing: the free role is not started either.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	err = h.p.ApplyConfig(Config{Roles: []RoleConfig{
		{Name: "chat", Listen: "127.0.0.1:0"},
		{Name: "embed", Listen: "127.0.0.1:0"},
		{Name: "busy", Listen: busy.Addr().String()},
	}})
	if err == nil {
		t.Fatal("ApplyConfig with an occupied address succeeded")
	}
	if _, ok := h.p.Addr("embed"); ok {
		t.Error("embed listener started by a failed reload")
	}

	// Add embed, change chat's concurrency.
	if err := h.p.ApplyConfig(Config{Roles: []RoleConfig{
		{Name: "chat", Listen: "127.0.0.1:0", Concurrency: 7},
		{Name: "embed", Listen: "127.0.0.1:0"},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, c := h.p.Inflight("chat"); c != 7 {
		t.Errorf("chat capacity %d, want 7", c)
	}
	if after, _ := h.p.Addr("chat"); after.String() != addr.String() {
		t.Errorf("chat listener moved from %s to %s on an unrelated reload", addr, after)
	}
	if res, body := h.get("embed", "/v1/models"); res.StatusCode != 200 {
		t.Fatalf("embed: status %d %s", res.StatusCode, body)
	}
	if port, _ := h.ports.get("embed"); port == 0 {
		t.Error("embed port not recorded")
	}

	// Remove chat: its listener is gone and its port reported as 0.
	if err := h.p.ApplyConfig(Config{Roles: []RoleConfig{{Name: "embed", Listen: "127.0.0.1:0"}}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.p.Addr("chat"); ok {
		t.Error("chat still has an address after removal")
	}
	if port, ok := h.ports.get("chat"); !ok || port != 0 {
		t.Errorf("chat port reported as %d, want 0", port)
	}
	if c, err := net.Dial("tcp", addr.String()); err == nil {
		c.Close()
		t.Error("removed role still accepts connections")
	}
}

// TestPrepareAbortAndCommit: a prepared reload binds its new role's port
// and changes nothing else; Abort frees the port and leaves no trace;
// Commit of a new Prepare serves the role on that port.
func TestPrepareAbortAndCommit(t *testing.T) {
	up := proxytest.New(t, proxytest.Options{})
	h := startProxy(t, Config{}, Deps{})
	h.resolver.local("chat", up.URL)
	h.resolver.local("embed", up.URL)
	chatAddr, _ := h.p.Addr("chat")
	embedAddr := testport.Addr(t)
	next := Config{Roles: []RoleConfig{
		{Name: "chat", Listen: "127.0.0.1:0", Concurrency: 3},
		{Name: "embed", Listen: embedAddr},
	}}

	prep, err := h.p.Prepare(next)
	if err != nil {
		t.Fatal(err)
	}
	if busy, err := net.Listen("tcp", embedAddr); err == nil {
		busy.Close()
		prep.Abort()
		t.Fatal("Prepare did not bind the added role's port")
	}
	if _, ok := h.p.Addr("embed"); ok {
		t.Error("embed in force before Commit")
	}
	if _, c := h.p.Inflight("chat"); c != DefaultConcurrency {
		t.Errorf("chat capacity %d before Commit, want %d", c, DefaultConcurrency)
	}
	prep.Abort()
	prep.Abort() // idempotent

	free, err := net.Listen("tcp", embedAddr)
	if err != nil {
		t.Fatalf("embed port still bound after Abort: %v", err)
	}
	free.Close()
	if _, ok := h.ports.get("embed"); ok {
		t.Error("an aborted role's port was reported")
	}
	if _, ok := metricValue(t, h.reg, "nodeld_proxy_inflight_requests", map[string]string{"role": "embed"}); ok {
		t.Error("an aborted role left a metric series")
	}
	if res, body := h.get("chat", "/v1/models"); res.StatusCode != 200 {
		t.Fatalf("chat after Abort: %d %s", res.StatusCode, body)
	}

	prep, err = h.p.Prepare(next)
	if err != nil {
		t.Fatal(err)
	}
	prep.Commit()
	prep.Abort() // after Commit: no effect
	if addr, ok := h.p.Addr("embed"); !ok || addr.String() != embedAddr {
		t.Fatalf("embed after Commit on %v (%v), want %s", addr, ok, embedAddr)
	}
	if res, body := h.get("embed", "/v1/models"); res.StatusCode != 200 {
		t.Fatalf("embed after Commit: %d %s", res.StatusCode, body)
	}
	if after, _ := h.p.Addr("chat"); after.String() != chatAddr.String() {
		t.Errorf("chat moved from %s to %s", chatAddr, after)
	}
	if _, c := h.p.Inflight("chat"); c != 3 {
		t.Errorf("chat capacity %d after Commit, want 3", c)
	}
}

func TestRunBindFailure(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	p, err := New(Config{Roles: []RoleConfig{
		{Name: "a", Listen: "127.0.0.1:0"},
		{Name: "b", Listen: busy.Addr().String()},
	}}, Deps{Resolver: newResolver()})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(context.Background()); err == nil {
		t.Fatal("Run succeeded with an occupied address")
	}
	select {
	case <-p.Ready():
		t.Error("Ready closed after a failed bind")
	default:
	}
}
