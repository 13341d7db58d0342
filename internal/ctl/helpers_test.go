package ctl

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/identity"
)

// t0 is the fake clock's start.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: t0} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// testKey returns a deterministic key.
func testKey(b byte) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{b}, ed25519.SeedSize))
}

func pubOf(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

func idOf(k ed25519.PrivateKey) string { return identity.NodeID(pubOf(k)) }

var (
	selfKey       = testKey(1) // the target node
	controllerKey = testKey(2) // an authorised controller
	peerKey       = testKey(3) // an admitted peer: read-only calls only
	strangerKey   = testKey(4) // neither
)

const testDecision = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

// nonceSeq makes distinct, well-formed nonces.
type nonceSeq struct {
	mu sync.Mutex
	n  int
}

func (s *nonceSeq) next() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	b := []byte("00000000000000000000000000000000")
	for i, v := len(b)-1, s.n; v > 0 && i >= 0; i, v = i-1, v/16 {
		b[i] = "0123456789abcdef"[v%16]
	}
	return string(b)
}

// testEnv is a target node's verifier and server on a fake clock.
type testEnv struct {
	clock  *fakeClock
	v      *Verifier
	srv    *Server
	nonces nonceSeq
}

func newTestEnv(t testing.TB, h Handler) *testEnv {
	t.Helper()
	e := &testEnv{clock: newFakeClock()}
	v, err := NewVerifier(VerifierConfig{
		Self:        pubOf(selfKey),
		Controllers: []ed25519.PublicKey{pubOf(controllerKey)},
		ReadOnly:    func(k ed25519.PublicKey, _ Method) bool { return bytes.Equal(k, pubOf(peerKey)) },
		Now:         e.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.v = v
	if h == nil {
		h = func(ctx context.Context, req Request) (any, *Refusal) {
			return map[string]string{"echo": string(req.Method)}, nil
		}
	}
	srv, err := NewServer(ServerConfig{Verifier: v, Key: selfKey, Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	return e
}

// request returns a valid request from the controller for a place.
func (e *testEnv) request(method Method) Request {
	now := e.clock.Now()
	req := Request{
		Version:     Version,
		Method:      method,
		Requester:   idOf(controllerKey),
		Target:      idOf(selfKey),
		Nonce:       e.nonces.next(),
		IssuedAtMS:  now.UnixMilli(),
		ExpiresAtMS: now.Add(time.Minute).UnixMilli(),
	}
	if IsMutating(method) {
		req.DecisionID = testDecision
	}
	return req
}

// signRaw signs a request exactly as given (no field is filled in).
func signRaw(t testing.TB, key ed25519.PrivateKey, req Request) []byte {
	t.Helper()
	payload, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return seal(key, RequestDomain, payload)
}

// roundTrip serves wire from peer on a pipe and returns what Serve
// reported and the response bytes.
func (e *testEnv) roundTrip(t *testing.T, wire []byte, peer ed25519.PublicKey) (Served, []byte) {
	t.Helper()
	c1, c2 := net.Pipe()
	defer c1.Close()
	type result struct {
		served Served
		err    error
	}
	done := make(chan result, 1)
	go func() {
		s, err := e.srv.Serve(context.Background(), c2, peer)
		done <- result{s, err}
	}()
	wrote := make(chan error, 1)
	go func() { wrote <- WriteMessage(c1, wire) }()
	resp, err := ReadMessage(c1, MaxResponseBytes)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	<-wrote
	r := <-done
	if r.err != nil {
		t.Fatalf("serve: %v", r.err)
	}
	return r.served, resp
}

// refusalCode returns the code of a refusal, "" for nil.
func refusalCode(r *Refusal) Code {
	if r == nil {
		return ""
	}
	return r.Code
}
