package ctl

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func newTestClient(t *testing.T, clock *fakeClock) *Client {
	t.Helper()
	c, err := NewClient(ClientConfig{Key: controllerKey, Now: clock.Now, Rand: bytes.NewReader(bytes.Repeat([]byte{7, 9, 11}, 1000))})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// pipeOpener returns an opener handing out the client end of a pipe whose
// server end is given to serve, run on its own goroutine; wait waits for it.
func pipeOpener(serve func(st net.Conn)) (open Opener, wait func()) {
	done := make(chan struct{})
	started := false
	open = func(ctx context.Context) (Stream, error) {
		c1, c2 := net.Pipe()
		started = true
		go func() {
			defer close(done)
			defer c2.Close()
			serve(c2)
		}()
		return c1, nil
	}
	return open, func() {
		if started {
			<-done
		}
	}
}

func classOf(err error) Class {
	var ce *CallError
	if errors.As(err, &ce) {
		return ce.Class
	}
	return 0
}

func TestClientCall(t *testing.T) {
	self := Target{ID: idOf(selfKey), Key: pubOf(selfKey)}
	type outcome struct {
		Class Class
		Code  Code
	}
	tests := []struct {
		name   string
		method Method
		target Target
		// serve plays the target; nil means the real Server.
		serve func(e *testEnv, st net.Conn)
		// openErr fails the open.
		openErr error
		want    outcome
	}{
		{name: "ok place", method: MethodPlace, target: self, want: outcome{}},
		{name: "ok wildcard describe", method: MethodDescribe, target: Target{ID: WildcardTarget}, want: outcome{}},
		{name: "refused", method: MethodStart, target: self, want: outcome{ClassRefused, CodeUnknownInstance}},
		{name: "open fails", method: MethodPlace, target: self, openErr: errors.New("no route"), want: outcome{ClassUnreachable, ""}},
		{name: "write fails, mutating", method: MethodPlace, target: self,
			serve: func(e *testEnv, st net.Conn) { st.Close() }, want: outcome{ClassUnreachable, ""}},
		{name: "closed without answer, mutating", method: MethodPlace, target: self,
			serve: func(e *testEnv, st net.Conn) { _, _ = ReadMessage(st, MaxRequestBytes) }, want: outcome{ClassIndeterminate, ""}},
		{name: "closed without answer, read-only", method: MethodStatus, target: self,
			serve: func(e *testEnv, st net.Conn) { _, _ = ReadMessage(st, MaxRequestBytes) }, want: outcome{ClassUnreachable, ""}},
		{name: "answer signed by another key, mutating", method: MethodStop, target: self,
			serve: answerWith(peerKey), want: outcome{ClassIndeterminate, ""}},
		{name: "answer signed by another key, read-only", method: MethodLogs, target: self,
			serve: answerWith(peerKey), want: outcome{ClassUnreachable, ""}},
		{name: "refusal from the wrong node, mutating", method: MethodUnload, target: Target{ID: idOf(selfKey)},
			serve: answerWith(peerKey), want: outcome{ClassIndeterminate, ""}},
		{name: "garbage answer, mutating", method: MethodLoad, target: self,
			serve: func(e *testEnv, st net.Conn) {
				_, _ = ReadMessage(st, MaxRequestBytes)
				_ = WriteMessage(st, []byte("{}"))
			}, want: outcome{ClassIndeterminate, ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEnv(t, func(ctx context.Context, req Request) (any, *Refusal) {
				if req.Method == MethodStart {
					return nil, NewRefusal(CodeUnknownInstance, "no such instance")
				}
				return map[string]string{"method": string(req.Method)}, nil
			})
			serve := tt.serve
			if serve == nil {
				serve = func(e *testEnv, st net.Conn) { _, _ = e.srv.Serve(context.Background(), st, pubOf(controllerKey)) }
			}
			open, wait := pipeOpener(func(st net.Conn) { serve(e, st) })
			if tt.openErr != nil {
				open = func(context.Context) (Stream, error) { return nil, tt.openErr }
			}
			ans, err := newTestClient(t, e.clock).Call(context.Background(), open, tt.target, tt.method, nil, decisionFor(tt.method))
			wait()
			var got outcome
			var ce *CallError
			if errors.As(err, &ce) {
				got = outcome{ce.Class, refusalCode(ce.Refusal)}
			} else if err != nil {
				t.Fatalf("error is not a *CallError: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("outcome (-want +got):\n%s\nerr: %v", diff, err)
			}
			if tt.want == (outcome{}) {
				if !ans.ResponderKey.Equal(pubOf(selfKey)) || ans.Response.Method != tt.method {
					t.Fatalf("answer = %+v", ans)
				}
				if want := `{"method":"` + string(tt.method) + `"}`; string(ans.Response.Result) != want {
					t.Fatalf("result = %s, want %s", ans.Response.Result, want)
				}
			}
		})
	}
}

func decisionFor(m Method) string {
	if IsMutating(m) {
		return testDecision
	}
	return ""
}

// answerWith reads the request and answers it ok, correctly bound but
// signed by key.
func answerWith(key ed25519.PrivateKey) func(e *testEnv, st net.Conn) {
	return func(e *testEnv, st net.Conn) {
		wire, err := ReadMessage(st, MaxRequestBytes)
		if err != nil {
			return
		}
		env, err := decodeEnvelope(wire, MaxRequestPayloadBytes)
		if err != nil {
			return
		}
		var req Request
		if decodeStrict(env.Payload, &req) != nil {
			return
		}
		resp, _ := SignResponse(key, Response{Method: req.Method, RequestNonce: req.Nonce, Outcome: OutcomeOK, Result: []byte(`{}`)})
		_ = WriteMessage(st, resp)
	}
}

// A call whose context ends while waiting for the answer is indeterminate
// for a mutation, and the stream is closed.
func TestClientCallCancelled(t *testing.T) {
	for _, tt := range []struct {
		method Method
		want   Class
	}{{MethodPlace, ClassIndeterminate}, {MethodDescribe, ClassUnreachable}} {
		t.Run(string(tt.method), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			open, wait := pipeOpener(func(st net.Conn) {
				_, _ = ReadMessage(st, MaxRequestBytes)
				cancel()
				// Hold the stream until the client closes it.
				_, _ = st.Read(make([]byte, 1))
			})
			_, err := newTestClient(t, newFakeClock()).Call(ctx, open, Target{ID: idOf(selfKey)}, tt.method, nil, decisionFor(tt.method))
			wait()
			if got := classOf(err); got != tt.want {
				t.Fatalf("class = %v (%v), want %v", got, err, tt.want)
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("error %v does not wrap context.Canceled", err)
			}
		})
	}
}

func TestClientCallNotAttempted(t *testing.T) {
	opened := false
	open := func(context.Context) (Stream, error) { opened = true; return nil, errors.New("unused") }
	tests := []struct {
		name     string
		target   Target
		method   Method
		decision string
		body     any
	}{
		{"no target", Target{}, MethodStatus, "", nil},
		{"wildcard place", Target{ID: WildcardTarget}, MethodPlace, testDecision, nil},
		{"key of another node", Target{ID: idOf(selfKey), Key: pubOf(peerKey)}, MethodStatus, "", nil},
		{"mutation without decision", Target{ID: idOf(selfKey)}, MethodStop, "", nil},
		{"malformed decision", Target{ID: idOf(selfKey)}, MethodStatus, "abc", nil},
		{"body does not encode", Target{ID: idOf(selfKey)}, MethodStatus, "", func() {}},
		{"body too large", Target{ID: idOf(selfKey)}, MethodStatus, "", string(make([]byte, MaxRequestPayloadBytes))},
	}
	c := newTestClient(t, newFakeClock())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Call(context.Background(), open, tt.target, tt.method, tt.body, tt.decision)
			if !errors.Is(err, ErrInvalidCall) {
				t.Fatalf("got %v, want ErrInvalidCall", err)
			}
			if opened {
				t.Fatal("stream opened for an invalid call")
			}
		})
	}
}

func TestNewClientRejects(t *testing.T) {
	for name, cfg := range map[string]ClientConfig{
		"no key":    {},
		"long ttl":  {Key: controllerKey, TTL: MaxLifetime + 1},
		"negative":  {Key: controllerKey, TTL: -1},
		"short key": {Key: controllerKey[:31]},
	} {
		if _, err := NewClient(cfg); err == nil {
			t.Errorf("%s: NewClient accepted", name)
		}
	}
}
