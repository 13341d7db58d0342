package dispatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
)

// Inside a synctest bubble, time moves only when every goroutine waits on
// a timer, so "served with no time passed" means served without waiting
// for any timeout.

// slotStream is one artifact stream to a dispatcher: the test holds the
// fetcher's end; done is closed when ServeArtifact returned err.
type slotStream struct {
	c    net.Conn
	done chan struct{}
	err  error
}

func openSlotStream(ctx context.Context, d *Dispatcher, peer string) *slotStream {
	ours, theirs := net.Pipe()
	s := &slotStream{c: ours, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.err = d.ServeArtifact(ctx, peer, theirs)
		theirs.Close()
	}()
	return s
}

// send writes a fetch request and reads nothing: the answer's first frame
// then blocks the server, which keeps its slots.
func (s *slotStream) send(t *testing.T, req ctl.FetchRequest) {
	t.Helper()
	b, _ := json.Marshal(req)
	if err := mesh.WriteFrame(s.c, ctl.FrameFetch, b); err != nil {
		t.Fatalf("send fetch: %v", err)
	}
}

// end closes the fetcher's end and waits for the server.
func (s *slotStream) end() {
	s.c.Close()
	<-s.done
}

// slotDispatcher offers one package to testTarget under testDecided and
// to otherPeer under a second decision, which it returns.
func slotDispatcher(t *testing.T) (*Dispatcher, []byte, string) {
	t.Helper()
	data := []byte("0123456789")
	d := newDispatcher(t, meshtest.NewIdentity(t), nil, nil)
	v, err := verifyLocal(context.Background(), makePackage(t, map[string][]byte{"bin/echo": data}))
	if err != nil {
		t.Fatal(err)
	}
	other := strings.Repeat("2", 64)
	for decision, peer := range map[string]string{testDecided: testTarget, other: otherPeer} {
		if _, err := d.offers.add(decision, peer, v, OfferGrace); err != nil {
			t.Fatal(err)
		}
	}
	return d, data, other
}

// Streams that never send a request hold no slot: more of them than there
// are slots do not delay another peer's authorised fetch.
func TestArtifactIdleStreamsHoldNoSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, data, _ := slotDispatcher(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var idle []*slotStream
		for range MaxConcurrentArtifactStreams + 2 {
			idle = append(idle, openSlotStream(ctx, d, otherPeer))
		}
		synctest.Wait()
		start := time.Now()
		s := openSlotStream(ctx, d, testTarget)
		got, err := fetchFrom(s.c, ctl.FetchRequest{V: 1, DecisionID: testDecided, Path: "bin/echo"})
		if err != nil || !bytes.Equal(got.data, data) {
			t.Fatalf("authorised fetch: %+v %v", got, err)
		}
		if waited := time.Since(start); waited != 0 {
			t.Errorf("authorised fetch waited %s behind idle streams", waited)
		}
		s.end()
		for _, s := range idle {
			select {
			case <-s.done:
				t.Errorf("idle stream ended before its request timeout: %v", s.err)
			default:
			}
		}
		for _, s := range idle {
			s.end()
		}
	})
}

// Requests that are not authorised are refused at once, also while every
// slot is taken: they never wait for one nor take one.
func TestArtifactRefusalTakesNoSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, _, _ := slotDispatcher(t)
		for range MaxConcurrentArtifactStreams {
			d.slots <- struct{}{}
		}
		start := time.Now()
		tests := []struct {
			peer string
			req  ctl.FetchRequest
			want string
		}{
			{otherPeer, ctl.FetchRequest{V: 1, DecisionID: testDecided, Path: "bin/echo"}, ctl.ArtifactNotOffered},
			{testTarget, ctl.FetchRequest{V: 1, DecisionID: strings.Repeat("3", 64), Path: "bin/echo"}, ctl.ArtifactNotOffered},
			{testTarget, ctl.FetchRequest{V: 1, DecisionID: testDecided, Path: "bin/other"}, ctl.ArtifactNotListed},
			{testTarget, ctl.FetchRequest{V: 1, DecisionID: testDecided, Path: "bin/echo", Offset: 99}, ctl.ArtifactBadRequest},
		}
		for _, tt := range tests {
			s := openSlotStream(context.Background(), d, tt.peer)
			got, err := fetchFrom(s.c, tt.req)
			if err != nil || got.refusal == nil || got.refusal.Code != tt.want {
				t.Errorf("%s asking %+v: %+v %v, want %s", tt.peer, tt.req, got.refusal, err, tt.want)
			}
			s.end()
		}
		if waited := time.Since(start); waited != 0 {
			t.Errorf("refusals waited %s for a slot", waited)
		}
		if len(d.slots) != MaxConcurrentArtifactStreams || d.peerSlots.peers() != 0 {
			t.Errorf("slots held: %d global, %d peers", len(d.slots), d.peerSlots.peers())
		}
		for range MaxConcurrentArtifactStreams {
			<-d.slots
		}
	})
}

// One peer is served MaxArtifactStreamsPerPeer files at once: its further
// fetches wait (at most ArtifactSlotWait, then their stream is reset)
// while another peer is served at once.
func TestArtifactPerPeerSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, data, other := slotDispatcher(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		mine := ctl.FetchRequest{V: 1, DecisionID: testDecided, Path: "bin/echo"}
		start := time.Now()
		var held []*slotStream
		for range MaxArtifactStreamsPerPeer {
			s := openSlotStream(ctx, d, testTarget)
			s.send(t, mine)
			synctest.Wait() // its slots taken, it blocks on its answer
			held = append(held, s)
		}
		next := openSlotStream(ctx, d, testTarget)
		next.send(t, mine)
		synctest.Wait()
		select {
		case <-next.done:
			t.Errorf("a fetch over the peer's cap ended: %v", next.err)
		default:
		}

		theirs := openSlotStream(ctx, d, otherPeer)
		got, err := fetchFrom(theirs.c, ctl.FetchRequest{V: 1, DecisionID: other, Path: "bin/echo"})
		if err != nil || !bytes.Equal(got.data, data) {
			t.Fatalf("other peer's fetch: %+v %v", got, err)
		}
		theirs.end()

		// One of the held fetches ends: the waiting one is served.
		held[0].end()
		got, err = readFetched(next.c)
		if err != nil || !bytes.Equal(got.data, data) {
			t.Fatalf("waiting fetch: %+v %v", got, err)
		}
		next.end()
		if waited := time.Since(start); waited != 0 {
			t.Errorf("fetches waited %s", waited)
		}

		// With the cap taken again, a further fetch gives up after
		// ArtifactSlotWait.
		held[0] = openSlotStream(ctx, d, testTarget)
		held[0].send(t, mine)
		synctest.Wait()
		late := openSlotStream(ctx, d, testTarget)
		late.send(t, mine)
		mark := time.Now()
		<-late.done
		if !errors.Is(late.err, errArtifactBusy) {
			t.Errorf("late fetch: %v, want errArtifactBusy", late.err)
		}
		if waited := time.Since(mark); waited != ArtifactSlotWait {
			t.Errorf("late fetch waited %s, want %s", waited, ArtifactSlotWait)
		}
		late.end()
		for _, s := range held {
			s.end()
		}
		if got := testutil.ToFloat64(d.met.artifactStreams.WithLabelValues("busy")); got != 1 {
			t.Errorf("busy streams counted %v, want 1", got)
		}
		if len(d.slots) != 0 || d.peerSlots.peers() != 0 {
			t.Errorf("slots left held: %d global, %d peers", len(d.slots), d.peerSlots.peers())
		}
	})
}
