package mux

import (
	"io"
	"testing"
	"time"
)

// TestProbe (issue 26): an idle session is read by no one, so Probe reads
// for it: it says open while the peer is there (within its wait), keeps
// what arrived for the stream it belongs to, and says closed, failing the
// session, once the peer closed the connection.
func TestProbe(t *testing.T) {
	c, s := tlsPair(t, testTLSConfig(t))
	client, server := sessionPair(t, c, s, Config{})
	st, _ := client.Open()
	if _, err := st.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	sst, err := server.Accept()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(sst, buf); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if !client.Probe(20 * time.Millisecond) {
		t.Fatalf("Probe of an idle session with its peer there: closed (%v)", client.Err())
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Probe took %v, want about its wait", d)
	}
	// An answer that arrives while the stream's goroutine is away is
	// kept by a probe for its Read.
	if _, err := sst.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the probe to take the answer in", func() bool {
		return client.Probe(time.Millisecond) && client.br.Buffered() > 0
	})
	if _, err := io.ReadFull(st, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("Read after the probe: %q, %v", buf, err)
	}
	// The peer goes away (a restart): the next probe says so.
	server.Close()
	waitUntil(t, "a probe to see the peer gone", func() bool { return !client.Probe(10 * time.Millisecond) })
	if client.Err() == nil || st.Alive() {
		t.Errorf("after a probe saw the end: session error %v, stream alive %v", client.Err(), st.Alive())
	}
}
