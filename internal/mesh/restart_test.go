package mesh

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/table"
	"github.com/nodeld/nodeld/internal/testport"
)

// crash stops n the way SIGKILL does: its socket closes before anything
// can tell its peers, so they keep their links to this run until a packet
// they send is answered with a stateless reset (or their liveness timeout).
func (n *testNode) crash() {
	n.t.Helper()
	n.m.mu.Lock()
	tr := n.m.tr
	n.m.mu.Unlock()
	_ = tr.Conn.Close()
	n.stop()
}

// echoCtl makes n answer each ctl stream with "echo:" and the frame it
// read, counting the requests it read.
func echoCtl(n *testNode, seen *atomic.Int64) {
	n.m.Handle(KindCtl, func(ctx context.Context, peer PeerInfo, s *Stream) {
		defer s.CloseWrite()
		_, p, err := ReadFrame(s, 4096)
		if err != nil {
			s.Reset(StreamCodeMalformed)
			return
		}
		seen.Add(1)
		_ = WriteFrame(s, 2, append([]byte("echo:"), p...))
	})
}

// request is a ctl request's size: a packet this small (under 43 bytes)
// draws no stateless reset, a real request does.
var request = strings.Repeat("r", 300)

// callEcho opens a ctl stream from n to peer, writes one request frame
// and reads the answer, as the ctl client does.
func callEcho(ctx context.Context, n *testNode, peer, body string) (string, error) {
	s, err := n.m.OpenStream(ctx, peer, KindCtl)
	if err != nil {
		return "", err
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(dl)
	}
	if err := WriteFrame(s, 1, []byte(body)); err != nil {
		return "", err
	}
	_, got, err := ReadFrame(s, 4096)
	return string(got), err
}

// quiet makes n send nothing on its links on its own for the length of a
// test: no keep-alive and no liveness heartbeat, so the first packet to a
// restarted peer is the test's request.
func quiet(n *testNode) {
	n.keepalive = 20 * time.Second
	n.liveness = MaxLivenessTimeout
}

// A peer killed and restarted on the same key and port is first reached
// through the caller's link to its previous run: the request is answered
// with a stateless reset, which proves no run of the peer read it. The
// call is replayed once on the restarted peer's link rather than failing.
func TestCallAfterPeerRestartIsReplayedOnTheNewLink(t *testing.T) {
	a, b := newNode(t, "a"), newNode(t, "b")
	quiet(a)
	quiet(b)
	a.start()
	b.start()
	var seen1, seen2 atomic.Int64
	echoCtl(b, &seen1)
	a.apply(b.peer(true))
	waitFor(t, "b refusing a", func() bool { return a.state(b.listen).LastError != "" })
	b.apply(a.peer(true))
	waitFor(t, "link a-b", func() bool { return linked(a, b) })
	old := a.link(b.id())
	warm(t, a, b, old)

	b.crash()
	// The new run knows no peers yet, so it does not dial a: a's only
	// link to b is the one to the dead run.
	b.start()
	echoCtl(b, &seen2)

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	type result struct {
		got string
		err error
	}
	done := make(chan result, 1)
	go func() {
		got, err := callEcho(ctx, a, b.id(), request)
		done <- result{got, err}
	}()
	// The request met the stateless reset: a's old link is gone.
	waitFor(t, "a's old link to end", func() bool { return old.conn.Context().Err() != nil })
	b.apply(a.peer(true))
	r := <-done
	if r.err != nil || r.got != "echo:"+request {
		t.Fatalf("call after the restart = %q, %v; want the echo", r.got, r.err)
	}
	if n1, n2 := seen1.Load(), seen2.Load(); n1 != 8 || n2 != 1 {
		t.Errorf("requests read: old run %d, new run %d; want 8 (the warm-up) and 1", n1, n2)
	}
	if l := a.link(b.id()); l == nil || l == old {
		t.Errorf("a's link to b after the call = %v, want a new one", l)
	}
}

// A request the peer may have read is never sent again: when the link
// ends after the peer heard it (here the peer's run stops, which closes
// the link), the call fails and is not replayed.
func TestCallIsNotReplayedWhenThePeerMayHaveReadIt(t *testing.T) {
	a, b := newNode(t, "a"), newNode(t, "b")
	quiet(a)
	quiet(b)
	a.start()
	b.start()
	read := make(chan struct{})
	var seen atomic.Int64
	b.m.Handle(KindCtl, func(ctx context.Context, peer PeerInfo, s *Stream) {
		if _, _, err := ReadFrame(s, 4096); err != nil {
			s.Reset(StreamCodeMalformed)
			return
		}
		seen.Add(1)
		close(read)
		<-ctx.Done() // never answers
		s.Reset(StreamCodeCancelled)
	})
	a.apply(b.peer(true))
	waitFor(t, "b refusing a", func() bool { return a.state(b.listen).LastError != "" })
	b.apply(a.peer(true))
	waitFor(t, "link a-b", func() bool { return linked(a, b) })

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := callEcho(ctx, a, b.id(), request)
		done <- err
	}()
	<-read
	b.crash()
	b.start(a.peer(true))
	err := <-done
	if err == nil || !LinkFailed(err) {
		t.Fatalf("call whose request was read = %v, want a link failure", err)
	}
	if n := seen.Load(); n != 1 {
		t.Errorf("requests read = %d, want 1", n)
	}
}

// A restarted peer's new link replaces the link to its previous run at
// once, even within DuplicateSettleWindow and whoever dialed: the two
// links carry different certificates, so they are not a simultaneous
// dial. Before, a's link dialed by the lower id kept winning and a held
// the dead link until a packet on it met a stateless reset.
func TestRestartedPeersLinkReplacesTheOldOneAtOnce(t *testing.T) {
	a, b := newNode(t, "a"), newNode(t, "b")
	for a.id() > b.id() {
		b = newNode(t, "b")
	}
	quiet(a)
	quiet(b)
	a.start()
	b.start()
	var seen1, seen2 atomic.Int64
	echoCtl(b, &seen1)
	// a dials: b knows a first.
	b.apply(a.peer(true))
	waitFor(t, "a refusing b", func() bool { return b.state(a.listen).LastError != "" })
	a.apply(b.peer(true))
	waitFor(t, "link a-b dialed by a", func() bool { return linked(a, b) && a.link(b.id()).outbound })
	old := a.link(b.id())
	// Nothing in flight on the old link when b dies (the advert exchange
	// is over and acknowledged), so no retransmission meets b's new run
	// and a only learns of it from b's new link.
	waitSettled(t, old)

	b.crash()
	b.start(a.peer(true)) // dials a within DuplicateSettleWindow
	echoCtl(b, &seen2)
	waitFor(t, "b's new run linked", func() bool { return b.link(a.id()) != nil })
	// Well within DuplicateDrain, after which a would have dropped the
	// new link it was holding as a duplicate and taken b's redial.
	waitForWithin(t, "a taking the restarted b's link", DuplicateDrain/2, func() bool {
		l := a.link(b.id())
		return l != nil && l != old && linked(a, b)
	})
	waitFor(t, "the old link closed", func() bool { return old.conn.Context().Err() != nil })
	if err := context.Cause(old.conn.Context()); !staleLink(err) {
		t.Errorf("the link to b's previous run ended with %v, want it closed as stale", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if got, err := callEcho(ctx, a, b.id(), "x"); err != nil || got != "echo:x" {
		t.Fatalf("call = %q, %v", got, err)
	}
	if n := seen2.Load(); n != 1 {
		t.Errorf("new run read %d requests, want 1", n)
	}
}

// warm exchanges a few calls on l, from a to b, each after l settled:
// QUIC's path MTU discovery sends its probes along with them and is done
// after, so that the next request is the only packet a sends.
func warm(t *testing.T, a, b *testNode, l *link) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for range 8 {
		waitSettled(t, l)
		if _, err := callEcho(ctx, a, b.id(), request); err != nil {
			t.Fatal(err)
		}
	}
	waitSettled(t, l)
}

// waitSettled waits until l's connection has sent and received nothing for
// a few polls in a row: no packet is in flight or awaiting acknowledgement.
func waitSettled(t *testing.T, l *link) {
	t.Helper()
	var last [2]uint64
	still := 0
	waitFor(t, "link settled", func() bool {
		st := l.conn.ConnectionStats()
		now := [2]uint64{st.PacketsSent, st.PacketsReceived}
		if now == last {
			still++
		} else {
			still, last = 0, now
		}
		return still >= 10 // 50 ms, twice the ACK delay
	})
}

// waitForWithin is waitFor with its own bound.
func waitForWithin(t *testing.T, what string, bound time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, bound)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// heldAdverts is a table whose advertisements are not handed to the mesh
// while held: the first round of a new link is not sent until release.
type heldAdverts struct {
	*table.Table
	held    atomic.Bool
	release chan struct{}
}

func (h *heldAdverts) Advertisements(now time.Time) []table.Advertisement {
	if h.held.Load() {
		<-h.release
	}
	return h.Table.Advertisements(now)
}

// A peer that restarted keeps its routes waiting for its link, ranked
// last, until the new link's first advertisement round: a new run that is
// linked but has not said what it serves is not preferred to a node that
// does. The round ends the wait.
func TestRestartedPeerRoutesWaitForTheFirstRound(t *testing.T) {
	a, b := newNode(t, "a"), newNode(t, "b")
	hb := &heldAdverts{Table: b.tbl, release: make(chan struct{})}
	b.advTable = hb
	// release lets a held round go; it runs before b's run is stopped
	// (registered after each start), or the stop would wait for it.
	release := func() {
		if hb.held.Swap(false) {
			close(hb.release)
		}
	}
	a.start()
	b.start()
	b.serveChat("chat", a.id())
	a.tbl.AllowRemoteNode("chat", b.id(), true)
	// a knows b at an address where nothing listens: every link is b's
	// dial, so a's redial after the reset cannot reach b's new run (which
	// would link before refusing a, as TLS 1.3 tells the client last).
	pc := b.peer(true)
	pc.Addr = testport.Addr(t)
	a.apply(pc)
	b.apply(a.peer(true))
	waitFor(t, "link a-b", func() bool { return a.link(b.id()) != nil })
	waitFor(t, "a resolving chat to b", func() bool { return a.resolvesRemote("chat", b.id()) })
	waiting := func() bool {
		tg, ok := a.tbl.Resolve("chat")
		return ok && tg.NodeID == b.id() && tg.WaitingForLink
	}

	b.crash()
	hb.held.Store(true)
	b.start() // admits nobody yet: answers a's link with a stateless reset
	t.Cleanup(release)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	calls := make(chan error, 1)
	go func() {
		// A request-sized packet on a's link to b's previous run draws
		// the reset.
		_, err := callEcho(ctx, a, b.id(), request)
		calls <- err
	}()
	waitFor(t, "a keeping b's route waiting for its link", waiting)

	b.apply(a.peer(true))
	waitFor(t, "b's new run linked to a", func() bool { return a.link(b.id()) != nil })
	if !waiting() {
		t.Fatal("b's route counts as live before its new run's first round")
	}
	release()
	waitFor(t, "b's route live after its first round", func() bool {
		tg, ok := a.tbl.Resolve("chat")
		return ok && tg.NodeID == b.id() && !tg.WaitingForLink
	})
	cancel()
	<-calls
}
