package mesh

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// TestMaxStreamsRaisesTheStreamLimit: a node whose Config.MaxStreams is
// above MaxStreamsPerPeer lets a peer hold that many streams open at once
// (a consumer forwarding more than 64 requests, say); below it, the peer's
// opens wait for a stream to end. Without MaxStreams the 64th open blocks
// and the test times out waiting for the streams held.
func TestMaxStreamsRaisesTheStreamLimit(t *testing.T) {
	const want = MaxStreamsPerPeer * 3
	a, b := newNode(t, "a"), newNode(t, "b")
	a.maxStreams = want
	a.start()
	b.start()
	a.apply(b.peer(true))
	waitFor(t, "b refusing a", func() bool { return a.state(b.listen).LastError != "" })
	b.apply(a.peer(true))
	waitFor(t, "link a-b", func() bool { return linked(a, b) })

	var held atomic.Int64
	release := make(chan struct{})
	a.m.Handle(KindCtl, func(ctx context.Context, _ PeerInfo, s *Stream) {
		defer s.CloseWrite()
		if _, _, err := ReadFrame(s, 16); err != nil {
			return
		}
		held.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, want)
	for range want {
		wg.Go(func() {
			s, err := b.m.OpenStream(ctx, a.id(), KindCtl)
			if err != nil {
				errs <- err
				return
			}
			defer s.Close()
			if err := WriteFrame(s, 1, []byte("x")); err != nil {
				errs <- err
				return
			}
			<-release
		})
	}
	waitFor(t, "a peer holding MaxStreams streams at once", func() bool { return held.Load() == want })
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	if err := (Config{Listen: "127.0.0.1:0", MaxStreams: MaxStreamsLimit + 1}).Validate(nil); err == nil || !strings.Contains(err.Error(), "max streams") {
		t.Errorf("Validate of MaxStreams over the limit = %v", err)
	}
}
