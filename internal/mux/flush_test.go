package mux

import (
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
)

// gateConn holds every Write until the test releases it, and tells which
// goroutine wrote.
type gateConn struct {
	net.Conn
	entered chan uint64   // the writer's goroutine id, as a Write starts
	release chan struct{} // lets one Write through
}

func (c *gateConn) Write(p []byte) (int, error) {
	c.entered <- goid()
	<-c.release
	return c.Conn.Write(p)
}

// TestFlushHandsOff checks the coalescing writer's bound: a flusher that
// keeps finding others' bytes queued writes them in one conn.Write per
// round, and after its own bytes and maxFlushRounds more hands the flush to
// the next writer that queues, which then writes the rest.
func TestFlushHandsOff(t *testing.T) {
	c, _ := tcpPair(t)
	gc := &gateConn{Conn: c, entered: make(chan uint64), release: make(chan struct{})}
	client, err := Client(gc, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	first, _ := client.Open()
	other, _ := client.Open()
	g := newGroup(t, client)
	g.Go(func() { first.Write([]byte("first")) })
	flusher := <-gc.entered // first writes its own bytes
	for range maxFlushRounds + 1 {
		// Queued while the flusher writes: the Write returns at once,
		// and the bytes go in the flusher's next round.
		if _, err := other.Write([]byte("queued")); err != nil {
			t.Fatal(err)
		}
		gc.release <- struct{}{}
		if id := <-gc.entered; id != flusher {
			t.Fatalf("round written by goroutine %d, want the flusher %d", id, flusher)
		}
	}
	// The flusher is past its rounds: the next writer takes over.
	succeeded := make(chan error, 1)
	third, _ := client.Open()
	g.Go(func() {
		_, err := third.Write([]byte("successor"))
		succeeded <- err
	})
	waitUntil(t, "a successor", func() bool {
		client.mu.Lock()
		defer client.mu.Unlock()
		return client.successor
	})
	gc.release <- struct{}{}
	if id := <-gc.entered; id == flusher {
		t.Fatal("the flusher kept writing past its rounds with a successor waiting")
	}
	gc.release <- struct{}{}
	if err := <-succeeded; err != nil {
		t.Fatal(err)
	}
	client.mu.Lock()
	defer client.mu.Unlock()
	if client.flushing || len(client.wq) != 0 {
		t.Errorf("after the successor: flushing %v, %d bytes queued; want idle and empty", client.flushing, len(client.wq))
	}
}

// TestFlushGathersWritersReady (issue 26): the goroutines ready to write
// when a flush starts go out in its one write (the flusher yields once
// first): with one processor, 16 streams written at once cost one write
// of the connection, where each would otherwise write its own.
func TestFlushGathersWritersReady(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	c, s := tcpPair(t)
	cc := &countingConn{Conn: c}
	client, server := sessionPair(t, cc, s, Config{})
	const n = 16
	sts := make([]*Stream, n)
	for i := range sts {
		var err error
		if sts[i], err = client.Open(); err != nil {
			t.Fatal(err)
		}
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			if _, err := sts[i].Write([]byte("request")); err != nil {
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	// One write; two when the scheduler's fairness tick (one schedule in
	// 61 takes the global queue first) hands the yielding flusher its
	// processor back before the others ran. Without the yield: 16.
	if got := cc.writes.Load(); got > 2 {
		t.Errorf("%d streams written at once took %d writes of the connection, want 1 (2 at most)", n, got)
	}
	for range n {
		sst, err := server.Accept()
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len("request"))
		if _, err := io.ReadFull(sst, buf); err != nil || string(buf) != "request" {
			t.Fatalf("stream %d read %q, %v", sst.ID(), buf, err)
		}
	}
}
