package proxy

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/holdq"
	"github.com/nodeld/nodeld/internal/table"
)

// Holds says which roles are expected back besides the built-in one: a
// role that had a live route here within HoldConfig.Remember (see
// holdq.Holds).
type Holds = holdq.Holds

// Reasons a held request was refused (nodeld_proxy_hold_refused_total),
// and the Retry-After (seconds) of each.
const (
	holdRefusedQueue    = "queue_full"
	holdRefusedWait     = "max_wait"
	retryAfterLoading   = "5"
	retryAfterQueueFull = "1"
)

// newHolding sets up holding when the Resolver's changes can be awaited
// (the table); with any other Resolver nothing is held.
func (p *Proxy) newHolding(res Resolver) {
	w, ok := res.(holdq.Watcher)
	if !ok {
		return
	}
	ready := func(role string) bool { _, ok := p.resolver.Resolve(role); return ok }
	p.holdq = holdq.New(w, ready, func(role string) holdq.Gauge { return p.metrics.holdDepth.WithLabelValues(role) })
	p.recent = &holdq.Recent{}
}

// lookLive records which configured roles resolve now (the built-in Holds).
func (p *Proxy) lookLive() {
	roles := p.settings.Load().Roles
	names := make([]string, len(roles))
	for i, rc := range roles {
		names[i] = rc.Name
	}
	p.recent.Look(names, func(role string) bool { _, ok := p.resolver.Resolve(role); return ok }, time.Now())
}

// mayHold reports whether a request for role may be held, and how long.
func (p *Proxy) mayHold(role string) (time.Duration, bool) {
	set := p.settings.Load()
	if set.Hold.MaxWait <= 0 || p.holdq == nil {
		return 0, false
	}
	if p.recent.Within(role, set.Hold.Remember, time.Now()) {
		return set.Hold.MaxWait, true
	}
	if p.holds != nil {
		if d, ok := p.holds.Expect(role); ok && d > 0 {
			return min(d, holdq.MaxWait), true
		}
	}
	return 0, false
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
// role's queue for the table to change, then forwards, up to maxWait; a
// forward that fails again before answering waits for the next change,
// and one that found no free slot (the role's own, or the serving
// peer's: ErrPeerBusy) tries again after a short backoff (waitFree). The
// last try, at maxWait, is an ordinary one: its refusal is the answer.
func (h *roleHandler) serveHeld(w http.ResponseWriter, r *http.Request, start time.Time, set *Config, class routeClass,
	maxWait time.Duration, data []byte, bodyRead bool, failedNode string) {
	p, role := h.p, h.rs.name
	if !bodyRead && r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		// Read before waiting: its deadline runs from the request's
		// start, and a streaming request is known by it.
		var body bodyReader
		body.init(w, r.Body, start, set.BodyTimeout)
		var err error
		if data, err = readBody(w, &body, r.ContentLength, set.MaxBodyBytes); err != nil {
			p.refuse(w, r, role, routeNone, bodyError(err, &body))
			return
		}
	}
	var sse *holdq.Stream
	var tick func()
	ticked := start // the last SSE comment line, or the start
	if holdq.WantsStream(data) {
		sse = &holdq.Stream{W: w, Comment: "waiting for " + role}
		tick = func() { sse.Tick(); ticked = time.Now() }
	}
	// waited observes the wait once: until the forward that answered, or
	// the refusal.
	waited := func(until time.Time) { p.metrics.holdWait.WithLabelValues(role).Observe(until.Sub(start).Seconds()) }
	deadline, held := start.Add(maxWait), false
	var free holdq.Backoff // while no slot is free
	failedGen := p.holdq.Generation()
	var ticket *holdq.Ticket
	defer func() { ticket.Done() }()
	for {
		gen := p.holdq.Generation()
		target, hold, ok := p.resolveHeld(role)
		ticket.Done() // resolved again: the next held request may go
		if ok && !(failedNode != "" && target.Kind == table.TargetRemote && target.NodeID == failedNode && gen == failedGen) {
			var out http.ResponseWriter = w
			if sse != nil && sse.Started {
				out = &holdq.SSEWriter{ResponseWriter: w}
			}
			sent := time.Now()
			again, _ := h.forward(out, r, sent, set, class, target, hold, data, true, sent.Before(deadline))
			switch again {
			case resendNo:
				if held || free.Tries > 0 {
					waited(sent)
				}
				return
			case resendWhenFree:
				p.metrics.holdBusy.WithLabelValues(role).Inc()
				if !free.Wait(r.Context(), deadline) {
					waited(time.Now())
					p.metrics.requests.WithLabelValues(role, routeNone, strconv.Itoa(statusClientClosed)).Inc()
					return
				}
				if sse != nil && time.Since(ticked) >= set.Hold.Keepalive {
					tick()
				}
				continue
			}
			failedNode, failedGen = target.NodeID, gen
			continue
		}
		hold.Done()
		var res holdq.Result
		res, ticket = p.holdq.Wait(r.Context(), role, gen, deadline, set.Hold.Queue, func() {
			if !held {
				held = true
				p.metrics.held.WithLabelValues(role).Inc()
				p.log.Debug("request held", zap.String("role", role))
				if p.holds != nil {
					p.holds.Want(role)
				}
			}
		}, set.Hold.Keepalive, tick)
		if res == holdq.Released {
			if f := p.onHoldRelease; f != nil {
				f(role, data)
			}
			continue
		}
		waited(time.Now())
		h.answerHeld(w, r, set, res, sse, start)
		return
	}
}

// answerHeld answers a held request that was not released.
func (h *roleHandler) answerHeld(w http.ResponseWriter, r *http.Request, set *Config, res holdq.Result, sse *holdq.Stream, start time.Time) {
	p, role := h.p, h.rs.name
	var e *Error
	var refused prometheus.Counter
	switch res {
	case holdq.Gone:
		p.metrics.requests.WithLabelValues(role, routeNone, strconv.Itoa(statusClientClosed)).Inc()
		return
	case holdq.Full:
		refused = p.metrics.holdRefused.WithLabelValues(role, holdRefusedQueue)
		w.Header().Set("Retry-After", retryAfterQueueFull)
		e = errQueueFull(role, set.Hold.Queue)
	default: // timed out, or the proxy stops
		refused = p.metrics.holdRefused.WithLabelValues(role, holdRefusedWait)
		w.Header().Set("Retry-After", retryAfterLoading)
		e = errModelLoading(role, time.Since(start))
	}
	refused.Inc()
	if sse != nil && sse.Started {
		// The head was sent: the error is the stream's last event.
		w = &holdq.SSEWriter{ResponseWriter: w}
	}
	p.refuse(w, r, role, routeNone, e)
}
