package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/table"
)

// Holds says which roles are expected to be served again soon, so that a
// request finding no route (or whose every candidate failed before
// answering) is held until the role's route appears instead of refused.
// The proxy has one built in, always asked first: a role that had a live
// route here within HoldConfig.Remember is expected back for up to
// HoldConfig.MaxWait (a workload the controller is moving). Deps.Holds
// adds others (a controller's standby adverts, later). Both methods are
// called from request handlers, concurrently, and must not block.
type Holds interface {
	// Expect reports whether role is expected to get a route, and how
	// long a request may wait for it (capped to MaxHoldWait).
	Expect(role string) (maxWait time.Duration, ok bool)
	// Want tells that a request for role is waiting: a nudge, never
	// blocking (it may start the role).
	Want(role string)
}

// routeWatcher is a Resolver whose changes can be awaited: the table.
// Holding needs it; with a Resolver that is not one, nothing is held.
type routeWatcher interface {
	Generation() uint64
	Subscribe() (<-chan struct{}, func())
}

// Reasons a held request was refused (nodeld_proxy_hold_refused_total).
const (
	holdRefusedQueue = "queue_full"
	holdRefusedWait  = "max_wait"
)

// Retry-After values (seconds) of the hold's refusals.
const (
	retryAfterLoading   = "5"
	retryAfterQueueFull = "1"
)

// roleHold is one role's hold state: whether it was lately served (the
// built-in Holds) and its queue of held requests. It outlives reloads
// (keyed by role name).
type roleHold struct {
	live     atomic.Bool  // resolved at the watcher's last look
	lastLive atomic.Int64 // unix nanos of the last look that saw it live, or of its loss

	mu      sync.Mutex // guards queue and running
	queue   []*holdWaiter
	running bool          // a dispatcher watches the table for this role
	kick    chan struct{} // wakes the dispatcher: a waiter joined

	held    prometheus.Counter
	depth   prometheus.Gauge
	waited  prometheus.Observer
	refused map[string]prometheus.Counter
}

// holdWaiter is one held request in a role's queue.
type holdWaiter struct {
	after    uint64        // released only once the table's generation is past it
	ready    chan struct{} // closed on release
	ack      chan struct{} // closed by the request once it resolved again
	released bool          // guarded by roleHold.mu
}

// holdState returns role's hold state, made on first use.
func (p *Proxy) holdState(role string) *roleHold {
	p.holdMu.Lock()
	defer p.holdMu.Unlock()
	rh, ok := p.holdRoles[role]
	if !ok {
		rh = &roleHold{
			kick:   make(chan struct{}, 1),
			held:   p.metrics.held.WithLabelValues(role),
			depth:  p.metrics.holdDepth.WithLabelValues(role),
			waited: p.metrics.holdWait.WithLabelValues(role),
			refused: map[string]prometheus.Counter{
				holdRefusedQueue: p.metrics.holdRefused.WithLabelValues(role, holdRefusedQueue),
				holdRefusedWait:  p.metrics.holdRefused.WithLabelValues(role, holdRefusedWait),
			},
		}
		p.holdRoles[role] = rh
	}
	return rh
}

// watchRoutes keeps each role's liveness (the built-in Holds) from the
// table's changes until ctx is done: no cost on the request path.
func (p *Proxy) watchRoutes(ctx context.Context, sub <-chan struct{}) {
	for {
		p.lookLive()
		select {
		case <-sub:
		case <-ctx.Done():
			return
		}
	}
}

// lookLive records, for every configured role, whether it resolves now.
func (p *Proxy) lookLive() {
	now := time.Now().UnixNano()
	for _, rc := range p.settings.Load().Roles {
		rh := p.holdState(rc.Name)
		_, ok := p.resolver.Resolve(rc.Name)
		if ok || rh.live.Load() {
			rh.lastLive.Store(now)
		}
		rh.live.Store(ok)
	}
}

// mayHold reports whether a request for role that finds no route is held,
// and for how long at most.
func (p *Proxy) mayHold(role string) (time.Duration, bool) {
	set := p.settings.Load()
	if set.Hold.MaxWait <= 0 || p.watch == nil {
		return 0, false
	}
	rh := p.holdState(role)
	if rh.live.Load() || time.Since(time.Unix(0, rh.lastLive.Load())) < set.Hold.Remember {
		return set.Hold.MaxWait, true
	}
	if p.holds != nil {
		if d, ok := p.holds.Expect(role); ok && d > 0 {
			return min(d, MaxHoldWait), true
		}
	}
	return 0, false
}

// holdResult is how a wait in a role's queue ended.
type holdResult int

const (
	holdReleased holdResult = iota // the table changed and the role resolves
	holdTimedOut                   // max wait passed
	holdFull                       // the queue was full
	holdGone                       // the client went away
	holdStopped                    // the proxy stops
)

// waitRoute queues the request and waits, in FIFO order per role, until
// the table's generation is past after and role resolves. On
// holdReleased the caller must close the waiter's ack once it resolved
// again (the dispatcher releases the next waiter then).
func (p *Proxy) waitRoute(ctx context.Context, rh *roleHold, role string, after uint64, deadline time.Time, queueMax int, sse *heldStream) (holdResult, *holdWaiter) {
	w := &holdWaiter{after: after, ready: make(chan struct{}), ack: make(chan struct{})}
	rh.mu.Lock()
	if len(rh.queue) >= queueMax {
		rh.mu.Unlock()
		return holdFull, nil
	}
	if !rh.running {
		p.holdMu.Lock()
		stopped := p.holdStopped
		if !stopped {
			rh.running = true
			p.holdWG.Add(1)
		}
		p.holdMu.Unlock()
		if stopped {
			rh.mu.Unlock()
			return holdStopped, nil
		}
		go p.dispatch(role, rh)
	}
	rh.queue = append(rh.queue, w)
	rh.depth.Inc()
	rh.mu.Unlock()
	select {
	case rh.kick <- struct{}{}:
	default:
	}
	if p.holds != nil {
		p.holds.Want(role)
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var tick <-chan time.Time
	if sse != nil {
		t := time.NewTicker(sse.every)
		defer t.Stop()
		tick = t.C
	}
	for {
		var res holdResult
		select {
		case <-w.ready:
			return holdReleased, w
		case <-tick:
			sse.comment()
			continue
		case <-timer.C:
			res = holdTimedOut
		case <-ctx.Done():
			res = holdGone
		case <-p.holdQuit:
			res = holdStopped
		}
		if rh.leave(w) {
			return res, nil
		}
		return holdReleased, w // released as it gave up: it goes on
	}
}

// leave takes w out of the queue unless it was released already.
func (rh *roleHold) leave(w *holdWaiter) bool {
	rh.mu.Lock()
	defer rh.mu.Unlock()
	if w.released {
		return false
	}
	if i := slices.Index(rh.queue, w); i >= 0 {
		rh.queue = slices.Delete(rh.queue, i, i+1)
		rh.depth.Dec()
	}
	return true
}

// dispatch watches the table for role while its queue is not empty, and
// releases waiters in arrival order once the role resolves, each after
// the one before it resolved again.
func (p *Proxy) dispatch(role string, rh *roleHold) {
	defer p.holdWG.Done()
	sub, cancel := p.watch.Subscribe()
	defer cancel()
	for {
		gen := p.watch.Generation()
		if _, ok := p.resolver.Resolve(role); ok {
			for {
				w := rh.next(gen)
				if w == nil {
					break
				}
				select {
				case <-w.ack:
				case <-p.holdQuit:
				}
			}
		}
		rh.mu.Lock()
		if len(rh.queue) == 0 {
			rh.running = false
			rh.mu.Unlock()
			return
		}
		rh.mu.Unlock()
		select {
		case <-sub:
		case <-rh.kick:
		case <-p.holdQuit:
			// Waiters leave on their own; this one must be seen to stop.
			rh.mu.Lock()
			rh.running = false
			rh.mu.Unlock()
			return
		}
	}
}

// next releases the first waiter the generation gen frees, if any.
func (rh *roleHold) next(gen uint64) *holdWaiter {
	rh.mu.Lock()
	defer rh.mu.Unlock()
	for i, w := range rh.queue {
		if w.after < gen {
			rh.queue = slices.Delete(rh.queue, i, i+1)
			rh.depth.Dec()
			w.released = true
			close(w.ready)
			return w
		}
	}
	return nil
}

// heldStream is the client side of a held streaming request: SSE comment
// lines while it waits, the head sent with the first of them.
type heldStream struct {
	w       http.ResponseWriter
	role    string
	every   time.Duration
	started bool // the 200 text/event-stream head was sent
}

// comment sends one keep-alive comment line, and the head before the first.
func (s *heldStream) comment() {
	if !s.started {
		s.started = true
		h := s.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		s.w.WriteHeader(http.StatusOK)
	}
	_, _ = io.WriteString(s.w, ": waiting for "+s.role+"\n\n") // a gone client ends the wait by its context
	_ = http.NewResponseController(s.w).Flush()
}

// sseWriter is what a held stream whose head was sent forwards into: the
// head is already sent, so a later one only sets the mode, and a body
// under a failure status is sent as SSE "data:" events, which a client
// reads as the stream's error.
type sseWriter struct {
	http.ResponseWriter
	failed bool
}

func (s *sseWriter) WriteHeader(code int) {
	if code >= 200 {
		s.failed = code >= 300
	}
}

func (s *sseWriter) Write(b []byte) (int, error) {
	if !s.failed {
		return s.ResponseWriter.Write(b)
	}
	ev := make([]byte, 0, len(b)+8)
	ev = append(ev, "data: "...)
	ev = append(ev, bytes.TrimRight(b, "\n")...)
	ev = append(ev, "\n\n"...)
	if _, err := s.ResponseWriter.Write(ev); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Flush sends buffered bytes to the client now.
func (s *sseWriter) Flush() { _ = http.NewResponseController(s.ResponseWriter).Flush() }

// Unwrap lets http.ResponseController reach the server's ResponseWriter.
func (s *sseWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// wantsStream reports whether a request body asks for a streamed answer
// ("stream": true). A body that is not a JSON object does not.
func wantsStream(body []byte) bool {
	var v struct {
		Stream bool `json:"stream"`
	}
	return json.Unmarshal(body, &v) == nil && v.Stream
}

// errModelLoading answers a request held past its wait.
func errModelLoading(role string, waited time.Duration) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: TypeUnavailable, Code: CodeModelLoading,
		Message: "role '" + role + "' is not served yet (waited " + waited.Round(time.Millisecond).String() + "); retry later"}
}

// errQueueFull answers a request that found its role's hold queue full.
func errQueueFull(role string, n int) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: TypeUnavailable, Code: CodeQueueFull,
		Message: "role '" + role + "' already has " + strconv.Itoa(n) + " requests waiting for it; retry later"}
}

// serveHeld serves a request whose role did not resolve (failedNode "")
// or whose forward to failedNode failed before anything was relayed,
// with its body already read when bodyRead (data). It waits in the
// role's queue for the table to change, then forwards, up to the role's
// max wait; a forward that fails again before answering waits again.
func (h *roleHandler) serveHeld(w http.ResponseWriter, r *http.Request, start time.Time, set *Config, class routeClass,
	maxWait time.Duration, data []byte, bodyRead bool, failedNode string) {
	p, role := h.p, h.rs.name
	if !bodyRead {
		// The body is read before waiting: its deadline runs from the
		// request's start, and a streaming request is known by it.
		if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
			var body bodyReader
			body.init(w, r.Body, start, set.BodyTimeout)
			var err error
			if data, err = readBody(w, &body, r.ContentLength, set.MaxBodyBytes); err != nil {
				p.refuse(w, r, role, routeNone, bodyError(err, &body))
				return
			}
		}
	}
	rh := h.p.holdState(role)
	var sse *heldStream
	if wantsStream(data) {
		sse = &heldStream{w: w, role: role, every: set.Hold.Keepalive}
	}
	deadline := start.Add(maxWait)
	counted := false
	failedGen := p.watch.Generation()
	var pending *holdWaiter
	ack := func() {
		if pending != nil {
			close(pending.ack)
			pending = nil
		}
	}
	defer ack()
	for {
		gen := p.watch.Generation()
		target, hold, ok := p.resolveHeld(role)
		ack()
		if ok && !(failedNode != "" && target.Kind == table.TargetRemote && target.NodeID == failedNode && gen == failedGen) {
			if counted {
				rh.waited.Observe(time.Since(start).Seconds())
			}
			var out http.ResponseWriter = w
			if sse != nil && sse.started {
				out = &sseWriter{ResponseWriter: w}
			}
			again, _ := h.forward(out, r, time.Now(), set, class, target, hold, data, true)
			if !again {
				return
			}
			failedNode, failedGen = target.NodeID, gen
			continue
		}
		hold.Done()
		if !counted {
			counted = true
			rh.held.Inc()
			p.log.Debug("request held", zap.String("role", role))
		}
		res, wt := p.waitRoute(r.Context(), rh, role, gen, deadline, set.Hold.Queue, sse)
		if res == holdReleased {
			pending = wt
			if ts := p.onHoldRelease; ts != nil {
				ts(role, data)
			}
			continue
		}
		rh.waited.Observe(time.Since(start).Seconds())
		var e *Error
		switch res {
		case holdGone:
			p.metrics.requests.WithLabelValues(role, routeNone, strconv.Itoa(statusClientClosed)).Inc()
			return
		case holdFull:
			rh.refused[holdRefusedQueue].Inc()
			w.Header().Set("Retry-After", retryAfterQueueFull)
			e = errQueueFull(role, set.Hold.Queue)
		default: // timed out, or the proxy stops
			rh.refused[holdRefusedWait].Inc()
			w.Header().Set("Retry-After", retryAfterLoading)
			e = errModelLoading(role, time.Since(start))
		}
		if sse != nil && sse.started {
			// The head was sent: the error is the stream's last event.
			sw := &sseWriter{ResponseWriter: w}
			writeError(sw, r, e)
			p.metrics.requests.WithLabelValues(role, routeNone, strconv.Itoa(e.Status)).Inc()
			return
		}
		p.refuse(w, r, role, routeNone, e)
		return
	}
}
