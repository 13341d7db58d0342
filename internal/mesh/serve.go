package mesh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
)

// streamServer serves the streams peers open: it reads each stream's kind
// byte, serves KindAdvert through the advertiser and hands every other
// kind to the Handler registered for it, on a pool of worker goroutines.
type streamServer struct {
	ps  *peerSet // peer info, and the WaitGroup of Run's goroutines
	adv *advertiser
	met *metrics
	// work hands an accepted stream to an idle worker (see goServe).
	work chan func()

	// mu guards handlers; it is never held with another lock.
	mu       sync.Mutex
	handlers map[StreamKind]Handler
}

func newStreamServer(ps *peerSet, adv *advertiser, met *metrics) *streamServer {
	return &streamServer{ps: ps, adv: adv, met: met, work: make(chan func()), handlers: make(map[StreamKind]Handler)}
}

// handle registers the handler of a stream kind (Mesh.Handle).
func (sv *streamServer) handle(kind StreamKind, h Handler) {
	if kind == KindAdvert || kind.String() == "unknown" || h == nil {
		panic(fmt.Sprintf("mesh: cannot register a handler for stream kind %d", kind))
	}
	sv.mu.Lock()
	sv.handlers[kind] = h
	sv.mu.Unlock()
}

// workerIdle is how long a stream worker waits for its next stream
// before it ends.
const workerIdle = 5 * time.Second

// goServe runs serve, an accepted stream's handling, on an idle worker
// goroutine, or on a new one when none is idle. A worker waits for its
// next stream up to workerIdle, until runCtx ends: a request's handling
// grows a goroutine's stack to tens of KiB, which a new goroutine for
// every stream copied several times over (runtime.copystack was a tenth of
// the serving node's CPU at concurrency 1). Goroutines stay one per stream
// in progress, bounded by the peers' stream limits.
func (sv *streamServer) goServe(runCtx context.Context, serve func()) {
	select {
	case sv.work <- serve:
	default:
		sv.ps.wg.Go(func() { sv.worker(runCtx, serve) })
	}
}

func (sv *streamServer) worker(runCtx context.Context, serve func()) {
	serve()
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		select {
		case serve = <-sv.work:
			serve()
			t.Reset(workerIdle)
		case <-t.C:
			return
		case <-runCtx.Done():
			return
		}
	}
}

// serveAccepted serves a stream the peer opened on l, then gives its
// credit back to cr (the peer may open another in its place): with the
// next answer written on the link, or soon anyway.
func (sv *streamServer) serveAccepted(ctx context.Context, l *link, qs *quic.Stream, cr *credits) {
	s := newStream(qs)
	s.cr = cr
	sv.serveStream(ctx, l, s)
	cr.done(qs)
}

// serveStream reads the kind byte of an incoming stream and dispatches it.
func (sv *streamServer) serveStream(ctx context.Context, l *link, s *Stream) {
	_ = s.SetReadDeadline(time.Now().Add(StreamHeadTimeout))
	kind, err := readKind(s)
	if err != nil {
		code, result := StreamCodeMalformed, resultMalformed
		var ne net.Error
		switch {
		case errors.Is(err, errUnknownKind):
			code, result = StreamCodeUnknownKind, resultUnknownKind
		case errors.As(err, &ne) && ne.Timeout():
			code, result = StreamCodeTimeout, resultTimeout
		}
		s.Reset(code)
		sv.met.stream(kind, result)
		return
	}
	_ = s.SetReadDeadline(time.Time{})
	if kind == KindAdvert {
		sv.adv.receive(ctx, l, s)
		return
	}
	sv.mu.Lock()
	h := sv.handlers[kind]
	sv.mu.Unlock()
	if h == nil {
		s.Reset(StreamCodeNoHandler)
		sv.met.stream(kind, resultNoHandler)
		return
	}
	sv.ps.mu.Lock()
	info := sv.ps.peerInfoLocked(l.peer)
	sv.ps.mu.Unlock()
	info.Addr = l.conn.RemoteAddr()
	sv.met.stream(kind, resultDispatched)
	h(ctx, info, s)
}

var errUnknownKind = errors.New("unknown stream kind")

// readKind reads the first byte of a stream: a known StreamKind or
// errUnknownKind (with the unknown kind returned for the metric label).
func readKind(r io.Reader) (StreamKind, error) {
	var b [1]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, err
	}
	k := StreamKind(b[0])
	if k.String() == "unknown" {
		return k, fmt.Errorf("kind %d: %w", b[0], errUnknownKind)
	}
	return k, nil
}
