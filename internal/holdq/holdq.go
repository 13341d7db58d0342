package holdq

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Holds says which roles are expected to be served again soon, so that a
// request finding no route (or whose every candidate failed before
// answering) is held until the role's route appears instead of refused.
// The proxy has one built in, always asked first (Recent): a role that
// had a live route here within Config.Remember is expected back for up
// to Config.MaxWait (a workload the controller is moving). proxy.Deps.Holds
// adds others (a controller's standby adverts, later). Both methods are
// called from request handlers, concurrently, and must not block.
type Holds interface {
	// Expect reports whether role is expected to get a route, and how
	// long a request may wait for it (capped to MaxWait).
	Expect(role string) (maxWait time.Duration, ok bool)
	// Want tells that a request for role is waiting: a nudge, never
	// blocking (it may start the role).
	Want(role string)
}

// Watcher is what changes are awaited on: the placement table.
type Watcher interface {
	// Generation counts the changes so far.
	Generation() uint64
	// Subscribe returns a channel that receives after changes (coalesced)
	// and a cancel func.
	Subscribe() (<-chan struct{}, func())
}

// Gauge is the queue depth metric of one key.
type Gauge interface {
	Inc()
	Dec()
}

// Result is how a wait ended.
type Result int

// Results of Queues.Wait.
const (
	Released Result = iota // the watcher changed past the mark and the key is ready
	TimedOut               // the deadline passed
	Full                   // the key's queue was full
	Gone                   // the waiter's context ended
	Stopped                // the Queues stop
)

// Queues are the per-key queues of held waiters.
type Queues struct {
	w     Watcher
	ready func(key string) bool
	depth func(key string) Gauge

	mu      sync.Mutex // guards queues, stopped
	queues  map[string]*queue
	stopped bool
	quit    chan struct{}
	wg      sync.WaitGroup // the dispatchers
}

// queue is one key's waiters.
type queue struct {
	mu      sync.Mutex // guards waiters, running
	waiters []*Ticket
	running bool          // a dispatcher watches for this key
	kick    chan struct{} // wakes the dispatcher: a waiter joined
	depth   Gauge
}

// Ticket is one waiter. Once released, its holder calls Done when it
// resolved again, and the next waiter is released.
type Ticket struct {
	after    uint64
	ready    chan struct{} // closed on release
	ack      chan struct{}
	acked    atomic.Bool
	released bool // guarded by queue.mu
}

// Done lets the next waiter go; safe on a nil Ticket and more than once.
func (t *Ticket) Done() {
	if t != nil && t.acked.CompareAndSwap(false, true) {
		close(t.ack)
	}
}

// New returns Queues over w; ready says whether a key resolves now, depth
// gives a key's depth gauge (called once per key).
func New(w Watcher, ready func(key string) bool, depth func(key string) Gauge) *Queues {
	return &Queues{w: w, ready: ready, depth: depth, queues: make(map[string]*queue), quit: make(chan struct{})}
}

// Generation is the watcher's: the mark a waiter joins with is read before
// the resolve that failed, so no change after it is missed.
func (qs *Queues) Generation() uint64 { return qs.w.Generation() }

func (qs *Queues) queue(key string) *queue {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	q, ok := qs.queues[key]
	if !ok {
		q = &queue{kick: make(chan struct{}, 1), depth: qs.depth(key)}
		qs.queues[key] = q
	}
	return q
}

// Wait queues a waiter for key (at most max waiting) and waits until the
// watcher's generation is past after and key is ready, until deadline,
// until ctx ends or until Stop. joined (if not nil) runs once the waiter
// is queued; while it waits, onTick (if not nil) runs every tick. Both
// run in the waiter's goroutine. On Released the caller must call the
// Ticket's Done once it resolved again.
func (qs *Queues) Wait(ctx context.Context, key string, after uint64, deadline time.Time, max int, joined func(), tick time.Duration, onTick func()) (Result, *Ticket) {
	q := qs.queue(key)
	t := &Ticket{after: after, ready: make(chan struct{}), ack: make(chan struct{})}
	q.mu.Lock()
	if len(q.waiters) >= max {
		q.mu.Unlock()
		return Full, nil
	}
	if !q.running {
		qs.mu.Lock()
		stopped := qs.stopped
		if !stopped {
			q.running = true
			qs.wg.Add(1)
		}
		qs.mu.Unlock()
		if stopped {
			q.mu.Unlock()
			return Stopped, nil
		}
		go qs.dispatch(key, q)
	}
	q.waiters = append(q.waiters, t)
	q.depth.Inc()
	q.mu.Unlock()
	select {
	case q.kick <- struct{}{}:
	default:
	}
	if joined != nil {
		joined()
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var ticks <-chan time.Time
	if onTick != nil && tick > 0 {
		tk := time.NewTicker(tick)
		defer tk.Stop()
		ticks = tk.C
	}
	for {
		var res Result
		select {
		case <-t.ready:
			return Released, t
		case <-ticks:
			onTick()
			continue
		case <-timer.C:
			res = TimedOut
		case <-ctx.Done():
			res = Gone
		case <-qs.quit:
			res = Stopped
		}
		if q.leave(t) {
			return res, nil
		}
		return Released, t // released as it gave up: it goes on
	}
}

// Depth returns how many waiters key's queue holds now (the depth gauge's
// value); 0 on nil Queues.
func (qs *Queues) Depth(key string) int {
	if qs == nil {
		return 0
	}
	qs.mu.Lock()
	q, ok := qs.queues[key]
	qs.mu.Unlock()
	if !ok {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiters)
}

// leave takes t out of the queue unless it was released already.
func (q *queue) leave(t *Ticket) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if t.released {
		return false
	}
	if i := slices.Index(q.waiters, t); i >= 0 {
		q.waiters = slices.Delete(q.waiters, i, i+1)
		q.depth.Dec()
	}
	return true
}

// next releases the first waiter that generation gen frees, if any.
func (q *queue) next(gen uint64) *Ticket {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, t := range q.waiters {
		if t.after < gen {
			q.waiters = slices.Delete(q.waiters, i, i+1)
			q.depth.Dec()
			t.released = true
			close(t.ready)
			return t
		}
	}
	return nil
}

// dispatch watches for key while its queue is not empty and releases
// waiters in arrival order once key is ready, each after the one before
// it is Done.
func (qs *Queues) dispatch(key string, q *queue) {
	defer qs.wg.Done()
	sub, cancel := qs.w.Subscribe()
	defer cancel()
	for {
		gen := qs.w.Generation()
		if qs.ready(key) {
			for t := q.next(gen); t != nil; t = q.next(gen) {
				select {
				case <-t.ack:
				case <-qs.quit:
				}
			}
		}
		q.mu.Lock()
		if len(q.waiters) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		select {
		case <-sub:
		case <-q.kick:
		case <-qs.quit:
			// Waiters leave on their own.
			q.mu.Lock()
			q.running = false
			q.mu.Unlock()
			return
		}
	}
}

// Stop answers every waiter Stopped (and any later one), and waits for
// the dispatchers. It may be called once.
func (qs *Queues) Stop() {
	qs.mu.Lock()
	qs.stopped = true
	qs.mu.Unlock()
	close(qs.quit)
	qs.wg.Wait()
}

// Bounds of a Backoff's waits.
const (
	BackoffFirst = 5 * time.Millisecond
	BackoffMax   = 50 * time.Millisecond
)

// Backoff spaces the tries of a released waiter that found its key ready
// but full (no free slot): BackoffFirst, doubling up to BackoffMax, each
// drawn in its upper half so that waiters refused together do not come
// back together. The zero Backoff is ready; it is used by one goroutine.
type Backoff struct {
	Tries int // waits so far
	next  time.Duration
}

// Wait waits for the next try, at most until deadline (the last try is
// then), and reports false, at once, when ctx ends first.
func (b *Backoff) Wait(ctx context.Context, deadline time.Time) bool {
	b.Tries++
	if b.next == 0 {
		b.next = BackoffFirst
	}
	d := b.next/2 + rand.N(b.next/2+1)
	b.next = min(2*b.next, BackoffMax)
	t := time.NewTimer(min(d, time.Until(deadline)))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Recent keeps which keys were ready lately, from the watcher's changes,
// so that asking costs two atomic loads.
type Recent struct {
	mu   sync.Mutex // guards keys
	keys map[string]*recent
}

type recent struct {
	live     atomic.Bool  // ready at the last look
	lastLive atomic.Int64 // unix nanos of the last look that saw it ready, or of its loss
}

func (r *Recent) key(k string) *recent {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keys == nil {
		r.keys = make(map[string]*recent)
	}
	e, ok := r.keys[k]
	if !ok {
		e = &recent{}
		r.keys[k] = e
	}
	return e
}

// Look records, for each key, whether it is ready now.
func (r *Recent) Look(keys []string, ready func(string) bool, now time.Time) {
	for _, k := range keys {
		e := r.key(k)
		ok := ready(k)
		if ok || e.live.Load() {
			e.lastLive.Store(now.UnixNano())
		}
		e.live.Store(ok)
	}
}

// Live reports whether key was ready at the last look.
func (r *Recent) Live(key string) bool { return r.key(key).live.Load() }

// Within reports whether key is ready, or was within d before now.
func (r *Recent) Within(key string, d time.Duration, now time.Time) bool {
	e := r.key(key)
	return e.live.Load() || now.Sub(time.Unix(0, e.lastLive.Load())) < d
}

// Watch calls look once, then after every change of w, until ctx is done.
func Watch(ctx context.Context, sub <-chan struct{}, look func()) {
	for {
		look()
		select {
		case <-sub:
		case <-ctx.Done():
			return
		}
	}
}

// Stream is the client side of a held streaming request: SSE comment
// lines while it waits, the 200 text/event-stream head sent with the
// first of them.
type Stream struct {
	W       http.ResponseWriter
	Comment string // the comment line, without ": " and the blank line
	Started bool   // the head was sent
}

// Tick sends one comment line, and the head before the first.
func (s *Stream) Tick() {
	if !s.Started {
		s.Started = true
		h := s.W.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		s.W.WriteHeader(http.StatusOK)
	}
	_, _ = io.WriteString(s.W, ": "+s.Comment+"\n\n") // a gone client ends the wait by its context
	_ = http.NewResponseController(s.W).Flush()
}

// SSEWriter is what a held stream whose head was sent is answered into:
// a later head only sets the mode, and a body under a failure status is
// sent as SSE "data:" events, which a client reads as the stream's error.
type SSEWriter struct {
	http.ResponseWriter
	failed bool
}

// WriteHeader records whether the answer is a failure; the head was sent.
func (s *SSEWriter) WriteHeader(code int) {
	if code >= 200 {
		s.failed = code >= 300
	}
}

// Write sends b, as one data: event under a failure status.
func (s *SSEWriter) Write(b []byte) (int, error) {
	if !s.failed {
		return s.ResponseWriter.Write(b)
	}
	ev := make([]byte, 0, len(b)+8)
	ev = append(ev, "data: "...)
	ev = append(ev, bytes.ReplaceAll(bytes.TrimRight(b, "\n"), []byte("\n"), []byte("\ndata: "))...)
	ev = append(ev, "\n\n"...)
	if _, err := s.ResponseWriter.Write(ev); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Flush sends buffered bytes to the client now.
func (s *SSEWriter) Flush() { _ = http.NewResponseController(s.ResponseWriter).Flush() }

// Unwrap lets http.ResponseController reach the server's ResponseWriter.
func (s *SSEWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// WantsStream reports whether a request body asks for a streamed answer
// ("stream": true). A body that is not a JSON object does not.
func WantsStream(body []byte) bool {
	var v struct {
		Stream bool `json:"stream"`
	}
	return json.Unmarshal(body, &v) == nil && v.Stream
}
