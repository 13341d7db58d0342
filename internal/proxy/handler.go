package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/httpfast"
	"github.com/nodeld/nodeld/internal/table"
	"github.com/nodeld/nodeld/internal/usage"
)

// RouteHeader is added to every forwarded response: "local", or the serving
// peer's node id.
const RouteHeader = "X-Nodeld-Route"

// exchange is the per-request state of a local forward.
type exchange struct {
	role     string
	upstream string          // "ip:port" of the local instance
	client   context.Context // the client's request's
	ctx      context.Context // the forward's: client's, or a child of it
	wd       *httpfast.Watchdog
	body     *bodyReader // nil when the request has no body
}

// requestState is what serving one request allocates, in one allocation:
// the part both routes use, inside a localState or a remoteState. Each
// route's own part is only in its own, so a request allocates 416 or
// 576 bytes (their size classes), not the 768 of one struct holding both.
type requestState struct {
	rec  recorder
	body bodyReader
	wd   httpfast.Watchdog
}

// localState is a local forward's requestState.
type localState struct {
	requestState
	fw localForward
}

// remoteState is a remote forward's requestState.
type remoteState struct {
	requestState
	out  http.Request // a remote forward's request on the fast reader
	node [1]string    // RouteHeader's value on a remote forward: Set would allocate it
}

// forwardContext is a forward's context, cancelled by st.wd (started
// here) and by the returned cancel. On the fast reader it is the exchange
// context itself: the watchdog's cause is one clientGone tells apart, and
// it ends with the exchange. Else it is a child of r's.
func (st *requestState) forwardContext(r *http.Request, set *Config) (context.Context, context.CancelCauseFunc) {
	if ec, ok := r.Context().(*httpfast.Context); ok {
		st.wd.Start(set.StallTimeout, set.RequestTimeout, nil, ec)
		return ec, func(error) {}
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	st.wd.Start(set.StallTimeout, set.RequestTimeout, cancel, nil)
	return ctx, cancel
}

// localForward is the state of a local forward.
type localForward struct {
	ex  exchange
	req httpfast.Request
}

// clientGone reports whether the client's context ended (the client went
// away, or the server stopped): not the forward's own timeouts when the
// forward shares the client's context.
func (ex *exchange) clientGone() bool {
	if ex.ctx != ex.client {
		return ex.client.Err() != nil
	}
	switch httpfast.Cause(ex.client) {
	case nil, httpfast.ErrStalled, httpfast.ErrRequestTimeout:
		return false
	}
	return true
}

// routeLocalValue is RouteHeader's value on the local path, shared by
// every response (its capacity is its length: an Add copies it).
var routeLocalValue = []string{routeLocal}[:1:1]

// upstreamAddr returns the "ip:port" of a local base URL, which must be
// a loopback address; the last one is cached.
func (rs *roleServer) upstreamAddr(base string) (string, error) {
	if c := rs.lastBase.Load(); c != nil && c.base == base {
		return c.addr, nil
	}
	ap, err := grammar.ParseLoopbackURL(base)
	if err != nil {
		return "", err
	}
	c := &baseAddr{base: base, addr: ap.String()}
	rs.lastBase.Store(c)
	return c.addr, nil
}

// baseAddr is a local base URL and its address.
type baseAddr struct{ base, addr string }

// roleHandler serves one role's listener.
type roleHandler struct {
	p  *Proxy
	rs *roleServer
}

func (h *roleHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, role := h.p, h.rs.name
	start := time.Now()
	h.rs.handlers.add()
	defer h.rs.handlers.done()

	if r.RequestURI == "/" && (r.Method == http.MethodGet || r.Method == http.MethodHead) && checkAuthority(r) == nil {
		if target, ok := p.resolver.Resolve(role); ok && answerOllamaRoot(w, r, target) {
			p.metrics.requests.WithLabelValues(role, routeNone, "200").Inc()
			return
		}
	}
	if e := checkMethod(r); e != nil {
		// A management path is refused as such whatever the method
		// (Ollama's CLI deletes with DELETE), so its client says why.
		if _, pe := classifyPath(r.RequestURI); pe != nil && pe.Code == CodeForbiddenPath {
			e = pe
		} else {
			w.Header().Set("Allow", "GET, POST")
		}
		p.refuse(w, r, role, routeNone, e)
		return
	}
	class, e := classifyPath(r.RequestURI)
	if e != nil {
		p.refuse(w, r, role, routeNone, e)
		return
	}
	if e := checkAuthority(r); e != nil {
		p.refuse(w, r, role, routeNone, e)
		return
	}
	set := p.settings.Load()
	if r.ContentLength > set.MaxBodyBytes {
		p.refuse(w, r, role, routeNone, TooLargeError(set.MaxBodyBytes))
		return
	}
	if p.answerStandbyModels(w, r, role) { // a cold on-demand role lists its model
		return
	}
	target, hold, ok := p.resolveHeld(role)
	if !ok {
		if maxWait, can := p.mayHold(role); can {
			h.serveHeld(w, r, start, set, class, maxWait, nil, false, "")
			return
		}
		p.refuse(w, r, role, routeNone, errNoInstance(role))
		return
	}
	again, held := h.forward(w, r, start, set, class, target, hold, nil, false, false)
	if again == resendOnRoute {
		// Every candidate failed before anything was relayed, and the
		// role is expected back: wait for its next route.
		maxWait, _ := p.mayHold(role)
		h.serveHeld(w, r, start, set, class, maxWait, held, true, target.NodeID)
	}
}

// forward serves r on target: admission, then the local or remote
// forward. hold is given back once the exchange has ended. body, when
// bodyRead, is the request's body already read (a held request's);
// else the body is read from r as it is forwarded. It returns again
// resendOnRoute (and the body it read) when a remote forward failed
// before anything was relayed and the request may be held (mayHold),
// and, only when waitFree (a held request within its wait), again
// resendWhenFree when the role's own slots or the serving peer's were
// all taken: nothing was answered or counted then.
func (h *roleHandler) forward(w http.ResponseWriter, r *http.Request, start time.Time, set *Config, class routeClass,
	target table.Target, hold table.Hold, data []byte, bodyRead, waitFree bool) (again resend, held []byte) {
	p, role := h.p, h.rs.name
	// Given back once the exchange has ended (cut streams included): a
	// stop of the local instance waits for it before stopping the process.
	defer hold.Done()
	rm := &h.rs.local
	switch target.Kind {
	case table.TargetLocal:
	case table.TargetRemote:
		rm = &h.rs.peer
		if p.remote == nil {
			p.refuse(w, r, role, routeNone, errMeshNotRunning(role))
			return resendNo, nil
		}
		if why := MeshPathRefusal(r.URL.Path, target.Runtime); class == routeLocalOnly || why != "" {
			p.refuse(w, r, role, routeNone, &Error{Status: http.StatusNotFound, Type: TypeNotFound, Code: CodeLocalOnly,
				Message: "role '" + role + "' is served by a peer, " + why})
			return resendNo, nil
		}
	default:
		p.refuse(w, r, role, routeNone, errNoInstance(role))
		return resendNo, nil
	}
	if !h.rs.acquire() {
		if waitFree {
			return resendWhenFree, nil
		}
		p.refuse(w, r, role, routeNone, &Error{Status: http.StatusTooManyRequests, Type: TypeRateLimit, Code: CodeOverCapacity,
			Message: "role '" + role + "' has " + strconv.FormatInt(h.rs.capacity.Load(), 10) + " requests in flight; retry later"})
		return resendNo, nil
	}
	h.rs.gauge.Inc()
	var (
		st     *requestState
		local  *localState
		remote *remoteState
	)
	if rm.route == routeLocal {
		local = &localState{requestState: requestState{rec: recorder{ResponseWriter: w, start: start, limit: set.MaxResponseBytes}}}
		st = &local.requestState
	} else {
		remote = &remoteState{requestState: requestState{rec: recorder{ResponseWriter: w, start: start, limit: set.MaxResponseBytes}}}
		st = &remote.requestState
	}
	rec := &st.rec
	measure, reportsUsage := measured(r)
	perf := measure && rm.route == routeLocal
	if reportsUsage && (perf || p.activity != nil) { // the activity log reads both routes' usage
		rec.tail = usage.GetTail()
	}
	defer func() {
		// Runs also when the stream is cut with http.ErrAbortHandler.
		h.rs.gauge.Dec()
		h.rs.release()
		if again != resendNo {
			return // to be held: neither answered nor counted yet
		}
		total := time.Since(start) // one clock read for both
		p.observe(role, rm, rec, total)
		p.afterForward(h.rs, target, rec, start, total, perf)
	}()
	// The slot is held from here: a client trickling its body must not
	// keep it past BodyTimeout.
	var body *bodyReader
	switch {
	case bodyRead:
		// Read before the request was held; its deadline is behind it.
		r.ContentLength = int64(len(data))
		if len(data) > 0 {
			body = &st.body
			body.r, body.timeout = io.NopCloser(bytes.NewReader(data)), set.BodyTimeout
		}
	case r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody:
		body = &st.body
		body.init(rec, r.Body, start, set.BodyTimeout)
	}
	if local != nil {
		p.forwardLocal(local, r, h.rs, target, set, body, pinsModel(r, target, h.rs.passthrough.Load()))
		return resendNo, nil
	}
	held, again = p.forwardRemote(remote, r, role, target, set, body, waitFree)
	return again, held
}

// resend says whether a forward that was not answered may be sent again,
// and when.
type resend uint8

const (
	resendNo       resend = iota // answered, or refused for good
	resendOnRoute                // failed before an answer: wait for the role's next route
	resendWhenFree               // no slot, here or at the peer: wait for one (serveHeld)
)

// heldResolver is a Resolver that holds a local target's registration
// while it is forwarded to (the table), so the host stops that instance
// only once the requests resolved to it are answered.
type heldResolver interface {
	ResolveHeld(role string) (table.Target, table.Hold, bool)
}

// resolveHeld resolves role, holding a local target when the Resolver can.
func (p *Proxy) resolveHeld(role string) (table.Target, table.Hold, bool) {
	if hr, ok := p.resolver.(heldResolver); ok {
		return hr.ResolveHeld(role)
	}
	target, ok := p.resolver.Resolve(role)
	return target, table.Hold{}, ok
}

// refuse answers a request that is not forwarded and counts it.
func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, role, route string, e *Error) {
	writeError(w, r, e)
	p.metrics.requests.WithLabelValues(role, route, strconv.Itoa(e.Status)).Inc()
}

// observe records a forwarded request's metrics.
func (p *Proxy) observe(role string, rm *routeMetrics, rec *recorder, total time.Duration) {
	switch code := rec.status; code {
	case http.StatusOK:
		rm.ok.Inc()
	case 0:
		p.metrics.requests.WithLabelValues(role, rm.route, strconv.Itoa(statusClientClosed)).Inc()
	default:
		p.metrics.requests.WithLabelValues(role, rm.route, strconv.Itoa(code)).Inc()
	}
	rm.duration.Observe(total.Seconds())
	if rec.firstByte > 0 {
		rm.ttfb.Observe(rec.firstByte.Seconds())
	}
}

// forwardLocal relays r to a local instance (relayLocal); body (nil when
// there is none) streams to the instance, unless its "model" is pinned: it
// is then read into memory (bounded by MaxBodyBytes and BodyTimeout) and
// pinned first.
func (p *Proxy) forwardLocal(st *localState, r *http.Request, rs *roleServer, target table.Target, set *Config, body *bodyReader, pin bool) {
	rec := &st.rec
	role := rs.name
	// The destination of a forward never leaves the host, whatever the
	// table holds.
	upstream, err := rs.upstreamAddr(target.Base)
	if err != nil {
		err = fmt.Errorf("local base %q: %w", target.Base, err)
		p.log.Warn("local target refused", zap.String("role", role), zap.Error(err))
		rec.Header().Set(RouteHeader, routeLocal)
		writeError(rec, r, &Error{Status: http.StatusBadGateway, Type: TypeUpstream, Code: CodeBadTarget,
			Message: "the local instance of role '" + role + "' has an invalid address"})
		return
	}
	ctx, cancel := st.forwardContext(r, set)
	defer cancel(nil)
	wd := &st.wd
	defer wd.Stop()
	rec.wd = wd
	fw := &st.fw
	fw.ex = exchange{role: role, upstream: upstream, client: r.Context(), ctx: ctx, wd: wd, body: body}
	ex := &fw.ex
	out := r // the pool's request: r's method, target and headers
	req := &fw.req
	*req = httpfast.Request{R: out, Host: ex.upstream}
	switch {
	case body == nil:
	case pin:
		body.wd = wd
		data, err := readBody(rec.ResponseWriter, body, r.ContentLength, set.MaxBodyBytes)
		if err != nil {
			rec.Header().Set(RouteHeader, routeLocal)
			writeError(rec, r, bodyError(err, body))
			return
		}
		data = pinLocal(data, target)
		req.Body, req.InMem = data, true
	default:
		body.wd = wd
		limited := http.MaxBytesReader(rec.ResponseWriter, body, set.MaxBodyBytes)
		req.Stream, req.Length = limited, r.ContentLength
	}
	p.relayLocal(rec, out, ex, req, int(rs.capacity.Load()))
}

// relayLocal is forwardLocal's exchange over the proxy's own upstream
// pool, in one goroutine. The response head is relayed without hop-by-hop
// headers, plus RouteHeader; a stream (SSE, or no
// Content-Length) is flushed on every write, its head at once; a failure
// after the head cuts the stream. The connection goes back to the pool
// (at most idleCap idle) only after a whole, clean exchange.
func (p *Proxy) relayLocal(rec *recorder, out *http.Request, ex *exchange, req *httpfast.Request, idleCap int) {
	uc, res, stop, err := p.pool.RoundTrip(ex.ctx, httpfast.PoolKey{Role: ex.role, Addr: ex.upstream}, req)
	if err != nil {
		p.forwardError(rec, out, ex, err)
		return
	}
	httpfast.RemoveHop(res.Header)
	h := rec.Header()
	for k, vs := range res.Header {
		h[k] = vs
	}
	h[RouteHeader] = routeLocalValue
	if len(res.Trailer) > 0 {
		keys := make([]string, 0, len(res.Trailer))
		for k := range res.Trailer {
			keys = append(keys, k)
		}
		h.Add("Trailer", strings.Join(keys, ", "))
	}
	rec.WriteHeader(res.StatusCode)
	stream := res.ContentLength == -1 || isEventStream(httpfast.Value(res.Header, "Content-Type"))
	if stream {
		rec.Flush()
	}
	if err := relayBody(rec, res.Body, stream); err != nil {
		stop()
		_ = uc.Close()
		if !ex.clientGone() {
			p.log.Debug("local stream cut", zap.String("role", ex.role), zap.String("upstream", ex.upstream), zap.Error(err))
		}
		panic(http.ErrAbortHandler)
	}
	for k, vs := range res.Trailer {
		h[k] = vs
	}
	if !stop() || res.Close {
		_ = uc.Close()
		return
	}
	p.pool.Put(uc, idleCap)
}

// relayBody copies an upstream body to the client through a pooled
// buffer, flushing every write when flush is set. A stream, held for as
// long as it lasts and made of small events, gets a small buffer: a
// thousand streams must not hold 32 KiB each.
func relayBody(rec *recorder, body io.Reader, flush bool) error {
	pool := &copyBuffers
	if flush {
		pool = &streamBuffers
	}
	bp := pool.Get().(*[]byte)
	defer pool.Put(bp)
	buf := *bp
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if _, err := rec.Write(buf[:n]); err != nil {
				return err
			}
			if flush {
				rec.Flush()
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// Pools of the buffers relayBody copies through.
var (
	copyBuffers   = sync.Pool{New: func() any { b := make([]byte, copyBufferBytes); return &b }}
	streamBuffers = sync.Pool{New: func() any { b := make([]byte, streamBufferBytes); return &b }}
)

// isEventStream reports whether a Content-Type is text/event-stream.
func isEventStream(ct string) bool {
	base, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(base), "text/event-stream")
}

// readBody reads body (nil: none), at most limit bytes, allocating for the
// declared length only after it was checked against the limit.
func readBody(w http.ResponseWriter, body *bodyReader, declared, limit int64) ([]byte, error) {
	if body == nil {
		return nil, nil
	}
	var r io.Reader = body
	if declared >= 0 && declared <= limit {
		// The common case: exactly the declared length in one allocation,
		// its spare byte for the read past the end (an array would escape).
		data := make([]byte, declared, declared+1)
		n := 0
		for n < len(data) {
			m, err := body.Read(data[n:])
			n += m
			if err == io.EOF {
				return data[:n], nil
			}
			if err != nil {
				return nil, err
			}
		}
		m, err := body.Read(data[n : n+1])
		if m == 0 && err == io.EOF {
			return data, nil
		}
		if err != nil && err != io.EOF {
			return nil, err
		}
		// More than declared: read it all within the limit, as below.
		r = io.MultiReader(bytes.NewReader(data[:n+m]), body)
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, io.NopCloser(r), limit)); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// bodyError is the answer to a request body that could not be read.
func bodyError(err error, body *bodyReader) *Error {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return TooLargeError(mbe.Limit)
	case body.expired():
		return errBodyTimeout(body.timeout)
	default:
		// The client went away or sent a broken body; tell it if it can hear.
		return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Code: CodeBadPath,
			Message: "bad request: reading request body"}
	}
}

// forwardError answers a local forward that failed before the response
// head was sent.
func (p *Proxy) forwardError(w http.ResponseWriter, r *http.Request, ex *exchange, err error) {
	w.Header().Set(RouteHeader, routeLocal)
	// Before the client check: the body deadline cancels the client's
	// context too (net/http does on any read error from the connection).
	if ex.body != nil && ex.body.expired() {
		writeError(w, r, errBodyTimeout(ex.body.timeout))
		return
	}
	if ex.clientGone() {
		return // the client went away; counted as statusClientClosed
	}
	set := p.settings.Load()
	var e *Error
	var mbe *http.MaxBytesError
	switch cause := httpfast.Cause(ex.ctx); {
	case errors.As(err, &mbe):
		writeError(w, r, TooLargeError(mbe.Limit))
		return
	case cause == httpfast.ErrStalled:
		e = &Error{Status: http.StatusGatewayTimeout, Type: TypeTimeout, Code: CodeUpstreamTimeout,
			Message: "timeout: upstream did not answer within " + set.StallTimeout.String()}
	case cause == httpfast.ErrRequestTimeout:
		e = &Error{Status: http.StatusGatewayTimeout, Type: TypeTimeout, Code: CodeUpstreamTimeout,
			Message: "timeout: request took longer than " + set.RequestTimeout.String()}
	case httpfast.IsTimeout(err):
		e = &Error{Status: http.StatusGatewayTimeout, Type: TypeTimeout, Code: CodeUpstreamTimeout,
			Message: "timeout: connecting to the local instance of role '" + ex.role + "'"}
	case httpfast.IsDialError(err):
		e = &Error{Status: http.StatusBadGateway, Type: TypeUpstream, Code: CodeUpstreamDown,
			Message: "upstream: the local instance of role '" + ex.role + "' is unreachable"}
	default:
		e = &Error{Status: http.StatusBadGateway, Type: TypeUpstream, Code: CodeUpstreamError,
			Message: "upstream: the local instance of role '" + ex.role + "' failed to answer"}
	}
	p.log.Warn("local forward failed", zap.String("role", ex.role), zap.String("upstream", ex.upstream), zap.Error(err))
	writeError(w, r, e)
}

// bodyReader reads a client's request body within its deadline (the
// request's start plus BodyTimeout) and, on the local path, feeds the
// watchdog while the body is uploaded. The deadline is the connection's
// read deadline, so it also ends a read waiting on a client that sends
// nothing at all; a read that fails on it cancels the request's context
// (net/http does so on any read error), which is why expired is asked
// before the context. net/http clears the deadline itself once the body
// has been read to its end, when its background read (watching for the
// client going away) starts, so a long response is not cut by it.
// Read may run on the transport's goroutine; the transport returns only
// after that goroutine is done, so expired is current when the handler
// asks.
type bodyReader struct {
	r        io.ReadCloser
	timeout  time.Duration
	wd       *httpfast.Watchdog // nil, or set before the first Read
	timedOut atomic.Bool        // a read failed on the deadline
}

func (b *bodyReader) init(w http.ResponseWriter, r io.ReadCloser, start time.Time, timeout time.Duration) {
	// Only a ResponseWriter that is not net/http's (a test's recorder)
	// has no deadline to set; its body is then bounded by size alone.
	_ = http.NewResponseController(w).SetReadDeadline(start.Add(timeout))
	b.r, b.timeout = r, timeout
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if n > 0 && b.wd != nil {
		b.wd.Touch()
	}
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		b.timedOut.Store(true)
	}
	return n, err
}

func (b *bodyReader) Close() error { return b.r.Close() }

// expired reports whether reading the body failed on its deadline.
func (b *bodyReader) expired() bool { return b.timedOut.Load() }

// errResponseTooLarge cuts a response over MaxResponseBytes.
var errResponseTooLarge = errors.New("response body over the relay limit")

// recorder wraps the client's ResponseWriter to learn the status and time
// to first byte, feed the watchdog and enforce the response relay cap. It
// is used by one handler goroutine only.
type recorder struct {
	http.ResponseWriter
	start     time.Time
	limit     int64
	wd        *httpfast.Watchdog // nil until forwarding starts
	status    int                // 0 until a final head is written
	written   int64
	autoFlush bool          // flush after every write (remote: the forwarder need not)
	firstByte time.Duration // 0 until the first body byte or empty final head
	tail      *usage.Tail   // the response's end, for its usage report; nil when not measured
}

func (w *recorder) WriteHeader(code int) {
	if code >= 100 && code < 200 {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	if w.status == 0 {
		w.status = code
		if w.wd != nil {
			w.wd.Touch()
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if len(b) == 0 {
		return 0, nil
	}
	if w.firstByte == 0 {
		w.firstByte = time.Since(w.start)
	}
	if w.wd != nil {
		w.wd.Touch()
	}
	if room := w.limit - w.written; int64(len(b)) > room {
		n, _ := w.ResponseWriter.Write(b[:room])
		w.written += int64(n)
		return n, errResponseTooLarge
	}
	n, err := w.ResponseWriter.Write(b)
	w.written += int64(n)
	if w.tail != nil {
		w.tail.Keep(b[:n])
	}
	if err == nil && w.autoFlush {
		w.Flush()
	}
	return n, err
}

// Flush sends buffered bytes to the client now.
func (w *recorder) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the server's ResponseWriter.
func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }
