package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Every refusal code reaches the caller as a signed refusal through Serve:
// verification codes, dispatch codes, and the handler's own.
func TestServeRefusalCodes(t *testing.T) {
	handler := func(ctx context.Context, req Request) (any, *Refusal) {
		var body struct{ Code Code }
		_ = json.Unmarshal(req.Body, &body)
		if body.Code != "" {
			return nil, NewRefusal(body.Code, "handler says no")
		}
		return map[string]bool{"ok": true}, nil
	}
	tests := []struct {
		name          string
		edit          func(e *testEnv, r *Request)
		peer          []byte // QUIC peer key; nil means the controller
		want          Code
		authenticated bool
	}{
		{"ok", nil, nil, "", true},
		{"signature", func(e *testEnv, r *Request) { r.Requester = idOf(peerKey) }, nil, CodeSignature, false},
		{"peer_mismatch", nil, pubOf(peerKey), CodePeerMismatch, false},
		{"expired", func(e *testEnv, r *Request) { r.ExpiresAtMS = t0.UnixMilli() }, nil, CodeExpired, false},
		{"not_for_me", func(e *testEnv, r *Request) { r.Target = "n-0000000000000000" }, nil, CodeNotForMe, false},
		{"invalid_request nonce", func(e *testEnv, r *Request) { r.Nonce = "" }, nil, CodeInvalidRequest, false},
		{"unknown_method", func(e *testEnv, r *Request) { r.Method = "workload.frobnicate" }, nil, CodeUnknownMethod, true},
		{"invalid_request foreign method", func(e *testEnv, r *Request) { r.Method = "dashboard.status" }, nil, CodeInvalidRequest, true},
		{"invalid_request no decision", func(e *testEnv, r *Request) { r.DecisionID = "" }, nil, CodeInvalidRequest, true},
		{"invalid_request bad decision", func(e *testEnv, r *Request) { r.DecisionID = strings.Repeat("A", 64) }, nil, CodeInvalidRequest, true},
		{"read-only with bad decision", func(e *testEnv, r *Request) { r.Method, r.DecisionID = MethodStatus, "x" }, nil, CodeInvalidRequest, true},
	}
	for _, c := range []Code{CodeGovernance, CodeAdmission, CodeFetch, CodeVerify, CodeRuntime, CodeUnknownInstance, CodeStaleTerm} {
		c := c
		tests = append(tests, struct {
			name          string
			edit          func(e *testEnv, r *Request)
			peer          []byte
			want          Code
			authenticated bool
		}{string(c), func(e *testEnv, r *Request) { r.Body = json.RawMessage(`{"Code":"` + string(c) + `"}`) }, nil, c, true})
	}
	tests = append(tests, struct {
		name          string
		edit          func(e *testEnv, r *Request)
		peer          []byte
		want          Code
		authenticated bool
	}{"handler code unknown becomes runtime", func(e *testEnv, r *Request) { r.Body = json.RawMessage(`{"Code":"nope"}`) }, nil, CodeRuntime, true})

	seen := map[Code]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEnv(t, handler)
			req := e.request(MethodPlace)
			if tt.edit != nil {
				tt.edit(e, &req)
			}
			peer := tt.peer
			if peer == nil {
				peer = pubOf(controllerKey)
			}
			served, wire := e.roundTrip(t, signRaw(t, controllerKey, req), peer)
			bind := req // the caller binds to the node it meant to reach
			bind.Target = idOf(selfKey)
			resp, key, err := VerifyResponse(wire, bind, pubOf(selfKey))
			if err != nil {
				t.Fatalf("response does not verify for its request: %v", err)
			}
			if !key.Equal(pubOf(selfKey)) {
				t.Fatal("response not signed by the target")
			}
			if got := refusalCode(resp.Refusal); got != tt.want {
				t.Fatalf("code = %q (%v), want %q", got, resp.Refusal, tt.want)
			}
			if diff := cmp.Diff(tt.want, refusalCode(served.Refusal)); diff != "" {
				t.Fatalf("Served.Refusal (-want +got):\n%s", diff)
			}
			if served.Authenticated != tt.authenticated {
				t.Fatalf("Authenticated = %v, want %v", served.Authenticated, tt.authenticated)
			}
			if tt.want == "" && string(resp.Result) != `{"ok":true}` {
				t.Fatalf("result = %s", resp.Result)
			}
			seen[tt.want] = true
		})
	}
	seen[CodeReplay] = true       // TestServeReplay
	seen[CodeUnauthorized] = true // TestServeUnauthenticatedRefusal
	for _, c := range Codes() {
		if !seen[c] {
			t.Errorf("refusal code %q not reached through Serve", c)
		}
	}
}

func TestServeReplay(t *testing.T) {
	e := newTestEnv(t, nil)
	req := e.request(MethodPlace)
	wire := signRaw(t, controllerKey, req)
	e.roundTrip(t, wire, pubOf(controllerKey))
	served, resp := e.roundTrip(t, wire, pubOf(controllerKey))
	if refusalCode(served.Refusal) != CodeReplay || served.Authenticated {
		t.Fatalf("second delivery: %+v", served)
	}
	r, _, err := VerifyResponse(resp, req, pubOf(selfKey))
	if err != nil || refusalCode(r.Refusal) != CodeReplay {
		t.Fatalf("got %+v, %v; want a signed replay", r, err)
	}
}

// An unauthenticated request gets a signed refusal that names its nonce
// and method, and the stream is closed after it.
func TestServeUnauthenticatedRefusal(t *testing.T) {
	e := newTestEnv(t, nil)
	req := e.request(MethodDescribe)
	req.Requester = idOf(strangerKey)
	c1, c2 := net.Pipe()
	defer c1.Close()
	done := make(chan error, 1)
	go func() {
		_, err := e.srv.Serve(context.Background(), c2, pubOf(strangerKey))
		done <- err
	}()
	go func() { _ = WriteMessage(c1, signRaw(t, strangerKey, req)) }()
	wire, err := ReadMessage(c1, MaxResponseBytes)
	if err != nil {
		t.Fatal(err)
	}
	resp, _, err := VerifyResponse(wire, req, pubOf(selfKey))
	if err != nil {
		t.Fatal(err)
	}
	want := Response{Version: Version, Method: MethodDescribe, Responder: idOf(selfKey), RequestNonce: req.Nonce,
		Outcome: OutcomeRefused, Refusal: &Refusal{Code: CodeUnauthorized, Reason: "key may not call this method"}}
	if diff := cmp.Diff(want, resp); diff != "" {
		t.Fatalf("refusal (-want +got):\n%s", diff)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := c1.Write([]byte{2, 0, 0, 0, 0}); err == nil {
		t.Fatal("stream still open after the refusal")
	}
}

func TestServeBadSignatureRefusalIsSigned(t *testing.T) {
	e := newTestEnv(t, nil)
	req := e.request(MethodPlace)
	wire := reenvelope(t, signRaw(t, controllerKey, req), func(en *envelope) { en.Signature = strings.Repeat("0", 128) })
	served, resp := e.roundTrip(t, wire, pubOf(controllerKey))
	if served.Authenticated || refusalCode(served.Refusal) != CodeSignature {
		t.Fatalf("served = %+v", served)
	}
	r, _, err := VerifyResponse(resp, req, pubOf(selfKey))
	if err != nil {
		t.Fatalf("refusal of a forged request must verify with the responder key: %v", err)
	}
	if refusalCode(r.Refusal) != CodeSignature || r.RequestNonce != req.Nonce {
		t.Fatalf("got %+v", r)
	}
}

func TestServeGarbageAndOversize(t *testing.T) {
	tests := []struct {
		name string
		give []byte
	}{
		{"garbage", frame(FrameLast, []byte("not an envelope"))},
		{"oversize", []byte{byte(FrameLast), 0, 0x08, 0, 0}}, // 512 KiB declared
		{"bad frame type", frame(9, []byte("x"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEnv(t, nil)
			c1, c2 := net.Pipe()
			defer c1.Close()
			done := make(chan Served, 1)
			go func() {
				s, _ := e.srv.Serve(context.Background(), c2, pubOf(controllerKey))
				done <- s
			}()
			go func() { _, _ = c1.Write(tt.give) }()
			wire, err := ReadMessage(c1, MaxResponseBytes)
			if err != nil {
				t.Fatal(err)
			}
			resp, _, err := VerifyResponse(wire, Request{Target: idOf(selfKey)}, pubOf(selfKey))
			if err != nil {
				t.Fatal(err)
			}
			if refusalCode(resp.Refusal) != CodeSignature {
				t.Fatalf("got %+v", resp)
			}
			if s := <-done; s.Authenticated {
				t.Fatal("garbage authenticated")
			}
		})
	}
}

func TestServeStreamEndsEarly(t *testing.T) {
	e := newTestEnv(t, nil)
	c1, c2 := net.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := e.srv.Serve(context.Background(), c2, pubOf(controllerKey))
		done <- err
	}()
	c1.Close()
	if err := <-done; err == nil {
		t.Fatal("Serve reported no error for a stream that ended before a request")
	}
}

func TestServeCancelClosesStream(t *testing.T) {
	e := newTestEnv(t, nil)
	c1, c2 := net.Pipe()
	defer c1.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := e.srv.Serve(ctx, c2, pubOf(controllerKey))
		done <- err
	}()
	cancel()
	if err := <-done; err == nil || !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "closed") {
		t.Fatalf("got %v, want a closed-stream error", err)
	}
}

func TestNewServerRejects(t *testing.T) {
	e := newTestEnv(t, nil)
	h := func(context.Context, Request) (any, *Refusal) { return nil, nil }
	for name, cfg := range map[string]ServerConfig{
		"no verifier": {Key: selfKey, Handler: h},
		"no handler":  {Verifier: e.v, Key: selfKey},
		"short key":   {Verifier: e.v, Key: selfKey[:10], Handler: h},
		"other key":   {Verifier: e.v, Key: peerKey, Handler: h},
	} {
		if _, err := NewServer(cfg); err == nil {
			t.Errorf("%s: NewServer accepted", name)
		}
	}
}

// A request whose payload is exactly MaxRequestPayloadBytes fits the wire
// bound and is served; one byte more is refused.
func TestServeRequestAtPayloadBound(t *testing.T) {
	for _, tt := range []struct {
		extra int
		want  Code
	}{{0, ""}, {1, CodeSignature}} {
		e := newTestEnv(t, nil)
		req := e.request(MethodStatus)
		req.Body = json.RawMessage(`""`)
		base, _ := json.Marshal(req)
		req.Body = json.RawMessage(`"` + strings.Repeat("x", MaxRequestPayloadBytes-len(base)+tt.extra) + `"`)
		p, _ := json.Marshal(req)
		if len(p) != MaxRequestPayloadBytes+tt.extra {
			t.Fatalf("payload of %d bytes", len(p))
		}
		served, _ := e.roundTrip(t, seal(controllerKey, RequestDomain, p), pubOf(controllerKey))
		if got := refusalCode(served.Refusal); got != tt.want {
			t.Fatalf("extra %d: code %q (%v), want %q", tt.extra, got, served.Refusal, tt.want)
		}
	}
}
