package mesh

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nodeld/nodeld/internal/table"
	"github.com/nodeld/nodeld/internal/testport"
)

// gate is a peer events consumer that hands each event on to the table,
// except while closed: then the first event to come waits at the gate
// (and the mesh queues the rest behind it) until open.
type gate struct {
	apply func(table.PeerEvent)
	mu    sync.Mutex
	open  chan struct{} // nil while the gate lets events through
	held  []table.PeerEvent
}

func (g *gate) consume(ev table.PeerEvent) {
	g.mu.Lock()
	open := g.open
	if open != nil {
		g.held = append(g.held, ev)
	}
	g.mu.Unlock()
	if open != nil {
		<-open
	}
	g.apply(ev)
}

// holds reports whether an event of kind about peer waits at the gate.
func (g *gate) holds(kind table.PeerEventKind, peer string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, ev := range g.held {
		if ev.Kind == kind && ev.Node == peer {
			return true
		}
	}
	return false
}

func (g *gate) close() {
	g.mu.Lock()
	g.open = make(chan struct{})
	g.mu.Unlock()
}

func (g *gate) release() {
	g.mu.Lock()
	if g.open != nil {
		close(g.open)
	}
	g.open, g.held = nil, nil
	g.mu.Unlock()
}

// queued reports whether n's mesh holds an event of kind about peer that
// it has not handed to its consumer yet.
func queued(n *testNode, kind table.PeerEventKind, peer string) bool {
	n.m.events.mu.Lock()
	defer n.m.events.mu.Unlock()
	for _, q := range n.m.events.pending {
		if q.ev.Kind == kind && q.ev.Node == peer {
			return true
		}
	}
	return false
}

// A send on the mesh never changes routing under its caller: when a's
// inference request meets the stateless reset of b's new run, the call
// fails (the proxy, which owns a forward's retry, decides what next) and
// the stream is not sent again on b's next link; the loss reaches a's
// table only through the events consumer, after the call returned, and
// the table alone decides that b's route waits for its link. The
// consumer is held shut: the table must not have changed while the mesh
// already knows the link is gone. Fails if OpenStream, a stream or
// linkLost touches the table, or if inference streams are replayed.
func TestLinkLossReachesTheTableOnlyAsAnEvent(t *testing.T) {
	a, b := newNode(t, "a"), newNode(t, "b")
	quiet(a)
	quiet(b)
	g := &gate{apply: a.tbl.ApplyPeerEvent}
	a.events = g.consume
	a.start()
	t.Cleanup(g.release) // before a stops: its Run delivers what is left
	b.start()
	b.serveChat("chat", a.id())
	a.tbl.AllowRemoteNode("chat", b.id(), true)
	// a knows b at an address where nothing listens: every link is b's
	// dial, so a cannot link to b's new run before b admits it.
	pc := b.peer(true)
	pc.Addr = freeUDP(t)
	a.apply(pc)
	b.apply(a.peer(true))
	waitFor(t, "link a-b", func() bool { return a.link(b.id()) != nil })
	waitFor(t, "a resolving chat to b", func() bool { return a.resolvesRemote("chat", b.id()) })
	old := a.link(b.id())

	g.close()
	b.crash()
	b.start() // admits nobody yet: answers a's link with a stateless reset
	var served atomic.Int64
	b.m.Handle(KindInfer, func(_ context.Context, _ PeerInfo, s *Stream) {
		served.Add(1)
		s.Reset(StreamCodeCancelled)
	})

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	calls := make(chan error, 1)
	go func() {
		s, err := a.m.OpenStream(ctx, b.id(), KindInfer)
		if err != nil {
			calls <- err
			return
		}
		defer s.Close()
		if err := WriteFrame(s, 1, []byte(request)); err != nil {
			calls <- err
			return
		}
		_, _, err = ReadFrame(s, 4096)
		calls <- err
	}()
	waitFor(t, "a's link to b's previous run retired", func() bool {
		return old.conn.Context().Err() != nil && a.link(b.id()) == nil
	})
	waitFor(t, "the loss reported, waiting for the consumer", func() bool {
		return g.holds(table.PeerLinkLost, b.id()) || queued(a, table.PeerLinkLost, b.id())
	})
	tg, ok := a.tbl.Resolve("chat")
	if !ok || tg.NodeID != b.id() || tg.WaitingForLink {
		t.Fatalf("a's route while its consumer is held = %+v %v: the table changed without the consumer", tg, ok)
	}
	// b's new run links now: a stream the mesh sent again would reach it.
	b.apply(a.peer(true)) // b's table still serves chat to a
	waitFor(t, "b's new run linked to a", func() bool { return a.link(b.id()) != nil })
	select {
	case err := <-calls:
		if !PeerRestarted(err) {
			t.Fatalf("request on the link to b's previous run: %v, want the stateless reset (PeerRestarted)", err)
		}
	case <-ctx.Done():
		t.Fatal("the request did not return while a's consumer was held")
	}
	if tg, ok := a.tbl.Resolve("chat"); !ok || tg.NodeID != b.id() || tg.WaitingForLink {
		t.Fatalf("a's route while its consumer is held = %+v %v: the table changed without the consumer", tg, ok)
	}

	g.release()
	// In order: the loss (the table keeps b's route waiting), the new
	// link, its first round (the wait ends).
	waitFor(t, "b's route live after its new run's first round", func() bool {
		tg, ok := a.tbl.Resolve("chat")
		return ok && tg.NodeID == b.id() && !tg.WaitingForLink
	})
	if n := served.Load(); n != 0 {
		t.Errorf("b's new run was sent %d inference streams, want none: only the proxy sends a forward again", n)
	}
}

// freeUDP is a loopback UDP address where nothing listens, reserved so
// that no other test's socket is handed it meanwhile.
func freeUDP(t *testing.T) string {
	t.Helper()
	return testport.Addr(t)
}

// Without a consumer of its events the routes to a lost peer would never
// go: New refuses.
func TestNewRefusesNoEventsConsumer(t *testing.T) {
	self := newIdentity(t)
	if _, err := New(Config{Listen: "127.0.0.1:0"}, Deps{Identity: self, DataDir: t.TempDir(),
		Table: table.New(self.ID(), table.Options{})}); err == nil {
		t.Error("New accepted deps without a consumer of peer events")
	}
}

// A peer removed from the config while the mesh is not running loses its
// routes all the same: the event is delivered at once, with no event loop.
func TestRemovedPeerReportedWithoutRun(t *testing.T) {
	a, b := newNode(t, "a"), newNode(t, "b")
	var got []table.PeerEvent
	m, err := New(a.config([]PeerConfig{b.peer(true)}), Deps{Identity: a.ident, DataDir: a.dir, Table: a.tbl,
		PeerEvents: func(ev table.PeerEvent) { got = append(got, ev) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.ApplyConfig(a.config(nil)); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Kind != table.PeerRemoved || got[0].Node != b.id() {
		t.Fatalf("events = %+v, want b removed", got)
	}
}
