package mesh

import (
	"context"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

type fakeCredit struct{ released atomic.Int32 }

func (f *fakeCredit) ReleaseStreamCredit() { f.released.Add(1) }

// TestCreditsRideWithTheNextAnswer: the credit of a served stream waits
// for the next answer written on the link (beforeWrite), is released at
// once when creditBatch streams wait, and after creditFlushDelay when no
// answer comes; each credit is released once.
func TestCreditsRideWithTheNextAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCredits()
		a := &fakeCredit{}
		c.done(a)
		synctest.Wait()
		if got := a.released.Load(); got != 0 {
			t.Fatalf("released %d times before any answer or the delay", got)
		}
		c.beforeWrite()
		if got := a.released.Load(); got != 1 {
			t.Fatalf("released %d times after the next answer, want 1", got)
		}
		c.beforeWrite()
		time.Sleep(2 * creditFlushDelay)
		if got := a.released.Load(); got != 1 {
			t.Fatalf("released %d times in all, want 1", got)
		}

		// No answer: the timer gives the credit back.
		b := &fakeCredit{}
		c.done(b)
		time.Sleep(creditFlushDelay - time.Microsecond)
		synctest.Wait()
		if got := b.released.Load(); got != 0 {
			t.Fatalf("released before creditFlushDelay")
		}
		time.Sleep(time.Microsecond)
		synctest.Wait()
		if got := b.released.Load(); got != 1 {
			t.Fatalf("released %d times after creditFlushDelay, want 1", got)
		}

		// A batch is released at once.
		batch := make([]*fakeCredit, creditBatch)
		for i := range batch {
			batch[i] = &fakeCredit{}
			c.done(batch[i])
		}
		for i, f := range batch {
			if got := f.released.Load(); got != 1 {
				t.Fatalf("stream %d of a full batch released %d times, want 1", i, got)
			}
		}
		time.Sleep(2 * creditFlushDelay)
		synctest.Wait()
		for i, f := range batch {
			if got := f.released.Load(); got != 1 {
				t.Fatalf("stream %d released %d times in all, want 1", i, got)
			}
		}
	})
}

// TestServedStreamsGiveCreditBack: with stream credit released by the
// mesh (quic.Config.RequireStreamCreditRelease), a peer still opens many
// times MaxStreamsPerPeer streams one after another, whatever became of
// them: answered, refused without a handler, or ended by a handler that
// wrote nothing. A credit never released would block the peer's opens
// after MaxStreamsPerPeer of them.
func TestServedStreamsGiveCreditBack(t *testing.T) {
	a, b := pair(t)
	a.m.Handle(KindInfer, func(_ context.Context, _ PeerInfo, s *Stream) {
		typ, _, err := ReadFrame(s, 16)
		if err != nil {
			s.Reset(StreamCodeMalformed)
			return
		}
		if typ == 1 {
			_ = WriteFrame(s, 1, []byte("ok"))
		}
		_ = s.CloseWrite()
	})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 3 * MaxStreamsPerPeer {
		kind, typ := KindInfer, FrameType(1+i%2)
		if i%3 == 2 {
			kind = KindCtl // no handler: reset by the mesh
		}
		s, err := b.m.OpenStream(ctx, a.id(), kind)
		if err != nil {
			t.Fatalf("open stream %d: %v", i, err)
		}
		if err := WriteFrame(s, typ, []byte("x")); err != nil {
			t.Fatalf("write stream %d: %v", i, err)
		}
		_ = s.CloseWrite()
		wg.Go(func() {
			defer s.Close()
			var buf [64]byte
			for {
				if _, err := s.Read(buf[:]); err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
}

// goid is the id of the calling goroutine (never reused by the runtime).
func goid() string {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	f := strings.Fields(string(buf[:n]))
	if len(f) < 2 {
		return ""
	}
	return f[1]
}

// TestStreamWorkersAreReused: streams served one after another run on a
// worker goroutine that served one before (goServe), not each on a new
// goroutine whose stack grows again. Goroutine ids are never reused, so
// without workers no id repeats.
func TestStreamWorkersAreReused(t *testing.T) {
	a, b := pair(t)
	ids := make(chan string, 64)
	a.m.Handle(KindInfer, func(_ context.Context, _ PeerInfo, s *Stream) {
		ids <- goid()
		if _, _, err := ReadFrame(s, 16); err != nil {
			s.Reset(StreamCodeMalformed)
			return
		}
		_ = WriteFrame(s, 1, []byte("ok"))
		_ = s.CloseWrite()
	})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	seen := map[string]bool{}
	for i := range 20 {
		s, err := b.m.OpenStream(ctx, a.id(), KindInfer)
		if err != nil {
			t.Fatalf("open stream %d: %v", i, err)
		}
		if err := WriteFrame(s, 1, []byte("x")); err != nil {
			t.Fatalf("write stream %d: %v", i, err)
		}
		_ = s.CloseWrite()
		if _, err := io.ReadAll(s); err != nil {
			t.Fatalf("read stream %d: %v", i, err)
		}
		s.Close()
		id := <-ids
		if seen[id] {
			return
		}
		seen[id] = true
	}
	t.Fatalf("20 streams served one after another on 20 goroutines")
}
