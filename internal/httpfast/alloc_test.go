package httpfast

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/httpfast/httpfasttest"
)

// notified counts ContextDone calls.
type notified chan struct{}

func (n notified) ContextDone() { n <- struct{}{} }

// TestRegister: a registered Notified is told once its context is
// cancelled, unless unregistered first; registered after the cancel it is
// told at once (id 0). Registering and unregistering allocate nothing.
func TestRegister(t *testing.T) {
	c := NewContext()
	n := make(notified, 4)
	if id := c.Register(n); !c.Unregister(id) || c.Unregister(id) {
		t.Fatal("unregister before cancel: want true once")
	}
	c.Register(n)
	c.Cancel(nil)
	select {
	case <-n:
	case <-time.After(testDeadline):
		t.Fatal("not told of the cancel")
	}
	if id := c.Register(n); id != 0 || c.Unregister(id) {
		t.Fatalf("registered after cancel: id %d", id)
	}
	select {
	case <-n:
	case <-time.After(testDeadline):
		t.Fatal("registered after cancel, not told")
	}
	if raceEnabled {
		return // the race detector allocates
	}
	d := NewContext()
	if a := testing.AllocsPerRun(100, func() { d.Unregister(d.Register(n)) }); a != 0 {
		t.Errorf("Register and Unregister allocate %v times", a)
	}
}

// TestPoolExchangeAllocations: an exchange on a kept connection under the
// fast reader's context costs the response head's text and its value
// slices (a field name not known but canonical is the head's text too),
// nothing for the context's watch of the connection (Register);
// the value slices are the connection's when the caller is done with
// them before the next exchange (HeaderDone).
func TestPoolExchangeAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	answer := []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Upstream: a\r\nContent-Length: 11\r\n\r\n{\"ok\":true}")
	body := []byte(`{"model":"m"}`)
	addr := httpfasttest.Start(t, answer)
	up := NewPool(nil)
	defer up.Close()
	key := PoolKey{Role: "chat", Addr: addr}
	r := &http.Request{Method: http.MethodPost, RequestURI: "/v1/chat/completions", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	req := &Request{R: r, Host: addr, Body: body, InMem: true, ContentType: "application/json"}
	ctx := NewContext()
	var got [32]byte
	one := func() {
		uc, res, stop, err := up.RoundTrip(ctx, key, req)
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.ReadFull(res.Body, got[:res.ContentLength])
		if err != nil || !bytes.Equal(got[:n], []byte(`{"ok":true}`)) {
			t.Fatalf("answer %q, %v", got[:n], err)
		}
		if !stop() {
			t.Fatal("stop: the context ended")
		}
		up.Put(uc, 4)
	}
	one()
	if n := testing.AllocsPerRun(100, one); n > 2 {
		t.Errorf("an exchange on a kept connection allocates %v times, want at most 2", n)
	}
	req.HeaderDone = true
	one()
	if n := testing.AllocsPerRun(100, one); n > 1 {
		t.Errorf("an exchange with HeaderDone allocates %v times, want at most 1", n)
	}
}
