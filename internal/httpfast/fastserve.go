package httpfast

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Server serves a role's listener when the proxy owns its upstream
// client: each connection's requests are read by a small HTTP/1.1 reader
// of the common case (GET or POST, HTTP/1.1, a head of at most
// fastHeadBytes with a Host and at most a Content-Length for framing) and
// handed to the role's handler as net/http would hand them, on the
// connection's goroutine. The first request outside that case hands the
// connection, with every byte read so far, to the role's net/http server
// for the rest of its life, so what net/http refuses or handles specially
// (chunked or Expect bodies, HTTP/1.0, folded or malformed heads, big
// heads) is refused or handled exactly as before.
//
// A handler must not keep the request's Header or the ResponseWriter
// once it returned: both are the connection's, reused by its next
// request. A whole answer (its Content-Length written, or a chunked
// one's end) on a connection kept open leaves when the handler returned,
// with the wait for the next request (SendAwait), even if the handler
// flushed it: a handler that answers whole and then works on delays it.
//
// net/http's server starts a goroutine per request to notice a client
// that goes away (a background read) and cancels the request's context
// when it does. Here that read starts only for an exchange still running
// clientWatchDelay after its body was read, so a short exchange never pays
// for it; a client that goes away during a long one (a slow first token,
// a stream) cancels it within clientWatchDelay.
type Server struct {
	h        http.Handler
	handoff  *handoffListener
	errorLog *log.Logger
	headWait time.Duration // the role's HeaderTimeout

	mu       sync.Mutex // guards conns; stopping is set under it
	conns    map[*fastConn]bool
	stopping atomic.Bool
	wg       sync.WaitGroup // connection goroutines
}

const (
	// fastHeadBytes is the largest request head served by the fast reader
	// (its connection's read buffer); a larger one (up to MaxHeaderBytes)
	// goes to net/http.
	fastHeadBytes = 4 << 10
	// fastWriteBytes is a connection's response write buffer.
	fastWriteBytes = 4 << 10
	// clientWatchDelay is how long an exchange runs after its body was
	// read before the client's connection is watched for going away.
	clientWatchDelay = 20 * time.Millisecond
	// maxDiscardBytes is the most of a request body the handler left
	// unread that is read and dropped before the response, so the
	// connection stays in step (net/http's maxPostHandlerReadBytes); with
	// more left the connection is closed after the response.
	maxDiscardBytes = 256 << 10
	// lingerTimeout bounds reading what a client still sends after the
	// response on a connection being closed, so that closing it with
	// unread data does not reset it before the client read the response.
	lingerTimeout = 500 * time.Millisecond
)

func NewServer(h http.Handler, addr net.Addr, headWait time.Duration, errorLog *log.Logger) *Server {
	return &Server{
		h:        h,
		handoff:  newHandoffListener(addr),
		errorLog: errorLog,
		headWait: headWait,
		conns:    map[*fastConn]bool{},
	}
}

// Handoff is the listener of the connections the fast reader hands to a
// net/http server: that server serves it (and ends with ErrServerClosed
// once Shutdown closed it).
func (fs *Server) Handoff() net.Listener { return fs.handoff }

// Serve accepts connections until ln is closed, serving each on its own
// goroutine.
func (fs *Server) Serve(ln net.Listener) error {
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			fs.mu.Lock()
			stopping := fs.stopping.Load()
			fs.mu.Unlock()
			if stopping || errors.Is(err, net.ErrClosed) {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporaryAccept(err) {
				// Out of descriptors or a connection reset while queued:
				// wait a little, as net/http does.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				fs.errorLog.Printf("accept: %v; retrying in %v", err, backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		fc := &fastConn{fs: fs, c: c}
		fs.mu.Lock()
		if fs.stopping.Load() {
			fs.mu.Unlock()
			_ = c.Close()
			continue
		}
		fs.conns[fc] = false
		fs.wg.Add(1)
		fs.mu.Unlock()
		go fc.serve()
	}
}

// Shutdown stops serving: idle connections are closed now, busy ones
// after their current exchange. It returns true once all are closed, or
// false when ctx ends first; then it closes them all, cancelling their
// exchanges.
func (fs *Server) Shutdown(ctx context.Context) bool {
	fs.mu.Lock()
	fs.stopping.Store(true)
	for fc := range fs.conns {
		if !fc.busy.Load() {
			_ = fc.c.Close()
		}
	}
	fs.mu.Unlock()
	done := make(chan struct{})
	go func() { fs.wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
	}
	fs.mu.Lock()
	for fc := range fs.conns {
		_ = fc.c.Close()
		fc.cancelExchange()
	}
	fs.mu.Unlock()
	<-done
	return false
}

// setBusy marks fc busy (an exchange runs) or idle, and reports false when
// the server is stopping and an idle fc must close instead. Without a
// lock: fc stores its state before it loads stopping, shutdown stores
// stopping before it loads the states, so either fc sees it stopping or
// shutdown sees fc idle and closes it.
func (fs *Server) setBusy(fc *fastConn, busy bool) bool {
	fc.busy.Store(busy)
	return busy || !fs.stopping.Load()
}

func (fs *Server) forget(fc *fastConn) {
	fs.mu.Lock()
	delete(fs.conns, fc)
	fs.mu.Unlock()
	fs.wg.Done()
}

func (fs *Server) isStopping() bool { return fs.stopping.Load() }

// fastConn is one client connection on the fast reader.
type fastConn struct {
	fs *Server
	c  net.Conn
	br *bufio.Reader
	bw *bufio.Writer

	remote string
	linger bool        // close the connection lingering (an unread body)
	busy   atomic.Bool // an exchange runs (see setBusy)

	mu        sync.Mutex // guards the fields below
	ctx       *Context   // the running exchange's, nil between exchanges
	active    bool       // an exchange runs
	bodyDone  bool       // its body was read to the end
	due       bool       // clientWatchDelay passed since the exchange started
	watching  bool       // the background read runs
	aborting  bool       // the background read is being stopped
	watchDone chan struct{}
	hasByte   bool // the background read got a byte of the next request
	byteBuf   [1]byte
	// watchT starts the background read clientWatchDelay after an
	// exchange's start (Check); wdt is the timer of the running
	// exchange's Watchdog. Both are the connection's (ConnTimer): a
	// quick exchange costs no timer.
	watchT ConnTimer
	wdt    ConnTimer
	// The read deadline is set on the connection only before a read
	// that reaches it: most requests arrive whole, so the head's and the
	// body's deadlines are rarely needed.
	rdWant time.Time // the read deadline in force
	rdSet  time.Time // the one set on the connection

	w      fastWriter  // the running exchange's
	header http.Header // w's, cleared for each exchange
	// The request's header map and the slices of its values, reused by
	// each request as the writer's map is: a handler does not keep a
	// request's Header once it returned.
	reqHeader http.Header
	reqStrs   []string
}

// maxReusedHeaders bounds the header map a connection keeps for its
// next request: a larger one (a request with many fields) is dropped.
const maxReusedHeaders = 32

// setReadDeadline sets the read deadline of the reads from the
// connection that follow (fc.Read, the background read).
func (fc *fastConn) setReadDeadline(t time.Time) {
	fc.mu.Lock()
	fc.rdWant = t
	fc.mu.Unlock()
}

// applyDeadlineLocked sets the wanted read deadline on the connection
// as CoarseDeadline decides: the idle deadline, wanted anew after each
// request, then changes the runtime's timer about once a second, not
// once a request. fc.mu must be held.
func (fc *fastConn) applyDeadlineLocked() {
	if next, change := CoarseDeadline(fc.rdSet, fc.rdWant); change {
		_ = fc.c.SetReadDeadline(next)
		fc.rdSet = next
	}
}

// setConnDeadline sets t on the connection now, as the deadline in force.
func (fc *fastConn) setConnDeadline(t time.Time) {
	fc.mu.Lock()
	fc.rdWant, fc.rdSet = t, t
	fc.mu.Unlock()
	_ = fc.c.SetReadDeadline(t)
}

// Read feeds the connection's bufio.Reader: a byte the background read
// got first, then the connection.
func (fc *fastConn) Read(p []byte) (int, error) {
	fc.mu.Lock()
	if fc.hasByte && len(p) > 0 {
		p[0] = fc.byteBuf[0]
		fc.hasByte = false
		fc.mu.Unlock()
		return 1, nil
	}
	fc.applyDeadlineLocked()
	fc.mu.Unlock()
	return fc.c.Read(p)
}

func (fc *fastConn) serve() {
	defer fc.fs.forget(fc)
	handedOff := false
	defer func() {
		if handedOff {
			return
		}
		if fc.bw != nil && fc.bw.Buffered() > 0 {
			_ = fc.bw.Flush() // the last answer, left by finish
		}
		if fc.linger {
			// The client may still be sending a body nobody read: stop
			// writing, and read until it stops, so it sees the response
			// rather than a reset.
			if cw, ok := fc.c.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
				_ = fc.c.SetReadDeadline(time.Now().Add(lingerTimeout))
				_, _ = io.Copy(io.Discard, fc.c)
			}
		}
		_ = fc.c.Close()
	}()
	fc.remote = fc.c.RemoteAddr().String()
	fc.br = bufio.NewReaderSize(fc, fastHeadBytes)
	fc.bw = bufio.NewWriterSize(fc.c, fastWriteBytes)
	defer fc.watchT.Stop()
	defer fc.wdt.Stop()
	// A new connection gets the head timeout for its first request,
	// the wait for it included, as net/http gives ReadHeaderTimeout: a
	// silent connection holds a goroutine and a descriptor for no
	// longer. Between requests it may stay idle for clientIdleTimeout.
	fc.wdt.base = time.Now() // before any exchange's Watchdog starts
	fc.setReadDeadline(fc.wdt.base.Add(fc.fs.headWait))
	for first := true; ; first = false {
		if !fc.fs.setBusy(fc, false) {
			return
		}
		if !first {
			fc.setReadDeadline(fc.now().Add(clientIdleTimeout))
		}
		if fc.bw.Buffered() > 0 {
			if err := fc.sendAnswer(); err != nil {
				return
			}
		}
		if _, err := fc.br.Peek(1); err != nil {
			return
		}
		if !fc.fs.setBusy(fc, true) {
			return
		}
		// One clock read gives the head its deadline and, when the head
		// was in the buffer whole (readHead read nothing more, as it
		// most often is), the exchange its start.
		now := fc.now()
		if !first {
			fc.setReadDeadline(now.Add(fc.fs.headWait))
		}
		held := fc.br.Buffered()
		req, n, err := fc.readHead()
		if err != nil {
			return // a timeout, or the client went away mid-head
		}
		if req == nil {
			handedOff = fc.handOff()
			return
		}
		if fc.br.Buffered() != held {
			now = fc.now() // the rest of the head came later
		}
		_, _ = fc.br.Discard(n)
		if !fc.exchange(req, now) {
			return
		}
	}
}

// now returns the time for the connection's deadlines and timers, on
// the monotonic clock from the connection's start (monoNow): the clock
// of its timer, which its watchdogs read too. It is never a Date.
func (fc *fastConn) now() time.Time { return fc.wdt.now() }

// sendAnswer sends the last answer's bytes, which finish left in the
// buffer, and, unless the next request is here already, waits for it in
// the same poller window (SendAwait): its first read then finds it
// rather than nothing.
func (fc *fastConn) sendAnswer() error {
	fc.mu.Lock()
	fc.applyDeadlineLocked() // the idle deadline bounds the wait
	waits := !fc.hasByte && fc.br.Buffered() == 0
	fc.mu.Unlock()
	if !waits {
		return fc.bw.Flush()
	}
	return SendAwait(fc.c, (*answerSend)(fc))
}

// answerSend is a fastConn as the Sender of its buffered answer.
type answerSend fastConn

func (a *answerSend) Send() error { return a.bw.Flush() }

// handOff gives the connection, with what was read of it, to net/http.
func (fc *fastConn) handOff() bool {
	fc.fs.mu.Lock()
	delete(fc.fs.conns, fc)
	fc.fs.mu.Unlock()
	fc.setConnDeadline(time.Time{}) // net/http sets its own from here
	return fc.fs.handoff.push(&handedConn{Conn: fc.c, r: fc.br})
}

// handedConn is a connection net/http serves: reads come from what the
// fast reader buffered first.
type handedConn struct {
	net.Conn
	r io.Reader
}

func (c *handedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// exchange serves one request, which started at start (its head was
// read), and reports whether the connection may serve another.
func (fc *fastConn) exchange(r *http.Request, start time.Time) (keep bool) {
	ctx := r.Context().(*Context)
	body := r.Body.(*fastBody)
	fc.mu.Lock()
	fc.ctx = ctx
	fc.active, fc.bodyDone, fc.due = true, body.left == 0, false
	if body.left == 0 {
		fc.rdWant = time.Time{}
	}
	fc.mu.Unlock()
	fc.watchT.Watch(fc, start.Add(clientWatchDelay))
	if body.left == 0 {
		r.Body = http.NoBody
	}
	// The writer and its header map are the connection's, reused by each
	// exchange: a handler does not keep them once it returned.
	if fc.header == nil {
		fc.header = make(http.Header, 8)
	}
	clear(fc.header)
	fc.w = fastWriter{fc: fc, req: r, body: body, header: fc.header, contentLength: -1}
	w := &fc.w
	defer func() {
		fc.stopWatch()
		ctx.Cancel(nil)
		fc.mu.Lock()
		fc.ctx = nil
		fc.mu.Unlock()
		if v := recover(); v != nil {
			keep = false
			_ = fc.bw.Flush() // what was written goes out before the cut, as with net/http
			if v != http.ErrAbortHandler {
				buf := make([]byte, 16<<10)
				buf = buf[:runtime.Stack(buf, false)]
				fc.fs.errorLog.Printf("panic serving %s: %v\n%s", fc.remote, v, buf)
			}
		}
	}()
	fc.fs.h.ServeHTTP(w, r)
	ok := w.finish()
	if body.left != 0 || body.err != nil {
		// The rest of the body was not read: the connection is out of step.
		w.closeAfter = true
		fc.linger = body.err == nil
	}
	keep = ok && !r.Close && !w.closeAfter && !fc.fs.isStopping()
	if !keep && fc.bw.Buffered() > 0 {
		_ = fc.bw.Flush() // no next request to send it with
	}
	return keep
}

// cancelExchange cancels the running exchange, if any.
func (fc *fastConn) cancelExchange() {
	fc.mu.Lock()
	ctx := fc.ctx
	fc.mu.Unlock()
	if ctx != nil {
		ctx.Cancel(nil)
	}
}

// Check is watchT firing clientWatchDelay after the running exchange
// started (ConnTimer's Checker): it is due for its watch. Between
// exchanges there is nothing to do.
func (fc *fastConn) Check(time.Time) time.Time {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.active {
		fc.due = true
		fc.startWatchLocked()
	}
	return time.Time{}
}

// startWatchLocked starts the background read when an exchange is due
// for it and its body is read, unless the next request's bytes are
// already here. fc.mu must be held.
func (fc *fastConn) startWatchLocked() {
	if !fc.active || !fc.due || !fc.bodyDone || fc.watching || fc.hasByte || fc.br.Buffered() > 0 {
		return
	}
	fc.watching, fc.aborting = true, false
	fc.applyDeadlineLocked()
	fc.watchDone = make(chan struct{})
	done, ctx := fc.watchDone, fc.ctx
	go func() {
		defer close(done)
		n, err := fc.c.Read(fc.byteBuf[:])
		fc.mu.Lock()
		defer fc.mu.Unlock()
		if n == 1 {
			fc.hasByte = true // a pipelined request: the client is there
			return
		}
		if err != nil && !fc.aborting {
			ctx.Cancel(nil) // the client went away
		}
	}()
}

// stopWatch ends the exchange's background read and waits for it.
func (fc *fastConn) stopWatch() {
	fc.mu.Lock()
	fc.active = false
	watching, done := fc.watching, fc.watchDone
	fc.watching = false
	fc.aborting = true
	fc.mu.Unlock()
	if !watching {
		return
	}
	_ = fc.c.SetReadDeadline(time.Unix(1, 0))
	<-done
	fc.setConnDeadline(time.Time{})
}

// bodyRead is called when the request body has been read to its end:
// net/http clears the body's read deadline there, and the exchange may
// now be watched.
func (fc *fastConn) bodyRead() {
	fc.mu.Lock()
	fc.rdWant = time.Time{}
	fc.bodyDone = true
	fc.startWatchLocked()
	fc.mu.Unlock()
}

// fastBody is a request body of a known length read from the connection.
type fastBody struct {
	fc   *fastConn
	left int64
	err  error
}

func (b *fastBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.fc.br.Read(p)
	b.left -= int64(n)
	if b.left == 0 {
		b.fc.bodyRead()
		return n, nil
	}
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		b.err = err
		b.fc.cancelExchange() // as net/http does on a body read error
	}
	return n, err
}

func (b *fastBody) Close() error { return nil }

// Header names read often, so that a head's common names cost no
// allocation.
var knownHeaders = knownNames("Host", "Content-Type", "Content-Length", "User-Agent", "Accept",
	"Accept-Encoding", "Accept-Language", "Authorization", "Connection", "Origin", "Cache-Control",
	"X-Stainless-Lang", "X-Stainless-Package-Version", "X-Stainless-Os", "X-Stainless-Arch",
	"X-Stainless-Runtime", "X-Stainless-Runtime-Version", "X-Stainless-Retry-Count",
	"X-Stainless-Timeout", "Openai-Organization", "Openai-Project")

// readHead reads a request head and returns the request, with a new
// Context as its context, and the head's length, or a nil request when net/http
// must serve the connection: the head does not fit the buffer or is
// anything but the common case. The body (its fastBody) is not read yet.
// One string holds the target and every value.
func (fc *fastConn) readHead() (*http.Request, int, error) {
	br := fc.br
	var head []byte
	var lines int // after the request line
	for {
		buf, _ := br.Peek(br.Buffered())
		end, n, bare := scanHead(buf)
		if bare {
			return nil, 0, nil
		}
		if end >= 0 {
			head, lines = buf[:end+2], n // the lines, each ending in CRLF
			break
		}
		if br.Buffered() == br.Size() {
			return nil, 0, nil
		}
		if _, err := br.Peek(br.Buffered() + 1); err != nil {
			if br.Buffered() > 0 && !isTimeoutOrClosed(err) {
				return nil, 0, nil // let net/http answer what it can
			}
			return nil, 0, err
		}
	}
	n := len(head) + 2
	line, rest := cutLine(head)
	method, target, proto, ok := splitRequestLine(line)
	if !ok || proto != "HTTP/1.1" || (method != http.MethodGet && method != http.MethodPost) ||
		len(target) == 0 || target[0] != '/' {
		return nil, 0, nil
	}
	text := string(head)
	ts := len(method) + 1
	h := fc.reqHeader
	if h == nil || len(h) > maxReusedHeaders {
		h = make(http.Header, lines)
		fc.reqHeader = h
	} else {
		clear(h)
	}
	strs := fc.reqStrs
	if len(strs) < lines {
		strs = make([]string, max(lines, 8))
		if lines <= maxReusedHeaders {
			fc.reqStrs = strs
		}
	}
	var host string
	var contentLength int64
	var hosts, lengths int
	closing := false
	var fields fieldSet
	off := len(line) + 2
	for len(rest) > 0 {
		var l []byte
		l, rest = cutLine(rest)
		start := off
		off += len(l) + 2
		colon := bytes.IndexByte(l, ':')
		if colon <= 0 || !validFieldName(l[:colon]) {
			return nil, 0, nil // a folded line, a bad name: net/http's answer
		}
		v := l[colon+1:]
		if !validFieldValue(v) {
			return nil, 0, nil
		}
		vs, ve := trimOWS(v)
		value := text[start+colon+1+vs : start+colon+1+ve]
		hn := fields.name(knownHeaders, text[start:start+colon], l[:colon])
		name := hn.name
		switch name {
		case "Host":
			hosts++
			if !validHostValue(v[vs:ve]) {
				return nil, 0, nil // net/http answers 400
			}
			host = value
			continue // net/http keeps Host out of Header
		case "Content-Length":
			lengths++
			cl, err := strconv.ParseInt(value, 10, 64)
			if err != nil || cl < 0 || value[0] == '+' {
				return nil, 0, nil
			}
			contentLength = cl
		case "Transfer-Encoding", "Expect", "Upgrade":
			return nil, 0, nil
		case "Connection":
			if headerHasToken([]string{value}, "close") {
				closing = true
			}
		}
		strs = fields.add(h, strs, hn, value)
	}
	if hosts != 1 || lengths > 1 {
		return nil, 0, nil
	}
	uri := text[ts : ts+len(target)]
	x := &fastRequest{body: fastBody{fc: fc, left: contentLength}}
	x.ctx.init()
	x.ctx.ct = &fc.wdt
	if err := requestURL(uri, &x.url); err != nil {
		return nil, 0, nil
	}
	tmpl := http.Request{
		Method: method, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, RemoteAddr: fc.remote, RequestURI: uri, Host: host, URL: &x.url,
		ContentLength: contentLength, Close: closing, Body: &x.body,
	}
	// WithContext is inlined: its copy is on the stack, copied again
	// into x, so that the request is x's too.
	x.req = *tmpl.WithContext(&x.ctx)
	return &x.req, n, nil
}

// fastRequest holds a request of the fast reader and what it points to,
// in one allocation.
type fastRequest struct {
	req  http.Request
	url  url.URL
	body fastBody
	ctx  Context
}

// errBadTarget refuses a target net/http's URL parser refuses.
var errBadTarget = errors.New("request target has a control byte")

// requestURL parses an origin-form target into u, a zero URL, as
// net/http does.
func requestURL(target string, u *url.URL) error {
	for i := 0; i < len(target); i++ {
		if c := target[i]; c < 0x20 || c == 0x7f {
			return errBadTarget // net/http answers 400
		}
	}
	if strings.IndexByte(target, '%') < 0 {
		// Two fields of the zero URL: assigning a whole url.URL literal
		// would copy all of it into the request's allocation.
		u.Path, u.RawQuery, _ = strings.Cut(target, "?")
		return nil
	}
	pu, err := url.ParseRequestURI(target)
	if err != nil {
		return err
	}
	*u = *pu
	return nil
}

// scanHead finds where a head ends in buf: end is the index of its first
// "\r\n\r\n" (-1 when buf has none yet) and lines the number of lines
// between its first line and that end. bare reports a line feed not
// preceded by a carriage return before the end (anywhere in buf without
// one): net/http accepts such heads; the fast readers leave them to it.
// One pass over the line feeds, where a search for the end, one for a
// bare line feed and a count of the lines took three.
func scanHead(buf []byte) (end, lines int, bare bool) {
	start := 0 // of the line being scanned
	for n := 0; ; n++ {
		i := bytes.IndexByte(buf[start:], '\n')
		if i < 0 {
			return -1, 0, false
		}
		i += start
		if i == 0 || buf[i-1] != '\r' {
			return -1, 0, true
		}
		// An empty line ends the head, but at buf's start: a CRLF there
		// ends the head only when another follows at once.
		if i-1 == start && start >= 2 {
			return start - 2, n - 1, false
		}
		start = i + 1
	}
}

func splitRequestLine(line []byte) (method string, target []byte, proto string, ok bool) {
	m, rest, ok1 := bytes.Cut(line, []byte(" "))
	t, p, ok2 := bytes.Cut(rest, []byte(" "))
	if !ok1 || !ok2 || bytes.IndexByte(p, ' ') >= 0 {
		return "", nil, "", false
	}
	switch string(m) {
	case http.MethodGet:
		method = http.MethodGet
	case http.MethodPost:
		method = http.MethodPost
	default:
		return "", nil, "", false
	}
	if string(p) != "HTTP/1.1" {
		return "", nil, "", false
	}
	return method, t, "HTTP/1.1", true
}

// validFieldName reports whether b is an HTTP token.
func validFieldName(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 || !tokenChars[c] {
			return false
		}
	}
	return len(b) > 0
}

// validHostValue reports whether b has only the bytes net/http's server
// accepts in a Host header (its httpguts.ValidHostHeader).
func validHostValue(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 || !hostChars[c] {
			return false
		}
	}
	return true
}

var hostChars = func() (t [128]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-32] = true, true
	}
	for _, c := range "!$%&'()*+,-.:;=[]_~" {
		t[c] = true
	}
	return t
}()

// validFieldValue reports whether b has no control byte but tab.
func validFieldValue(b []byte) bool {
	for _, c := range b {
		if (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

var tokenChars = func() (t [128]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-32] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// isTemporaryAccept reports an accept error worth retrying.
func isTemporaryAccept(err error) bool {
	return errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

func isTimeoutOrClosed(err error) bool {
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || (errors.As(err, &ne) && ne.Timeout())
}

// fastWriter is the http.ResponseWriter of a request on the fast reader.
// It writes HTTP/1.1: the head once (Date, the handler's headers, and a
// Content-Length or chunked framing), then the body; Flush sends what is
// buffered.
type fastWriter struct {
	fc            *fastConn
	req           *http.Request
	body          *fastBody
	header        http.Header
	status        int // 0 until WriteHeader
	headSent      bool
	contentLength int64 // -1: unknown
	chunked       bool
	noBody        bool
	written       int64
	closeAfter    bool
	err           error
}

func (w *fastWriter) Header() http.Header { return w.header }

func (w *fastWriter) WriteHeader(code int) {
	if w.status != 0 {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code >= 100 && code < 200 {
		return // informational heads are not relayed
	}
	w.status = code
	if cl := Value(w.header, "Content-Length"); cl != "" {
		if v, err := strconv.ParseInt(cl, 10, 64); err == nil && v >= 0 {
			w.contentLength = v
		} else {
			w.header.Del("Content-Length")
		}
	}
}

func (w *fastWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headSent {
		w.writeHead(p)
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.noBody {
		return 0, http.ErrBodyNotAllowed
	}
	if len(p) == 0 {
		return 0, nil
	}
	if w.contentLength >= 0 && w.written+int64(len(p)) > w.contentLength {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	bw := w.fc.bw
	if w.chunked {
		var size [16]byte
		bw.Write(strconv.AppendInt(size[:0], int64(len(p)), 16))
		bw.WriteString("\r\n")
		bw.Write(p)
		_, w.err = bw.WriteString("\r\n")
	} else {
		_, w.err = bw.Write(p)
	}
	if w.err != nil {
		return 0, w.err
	}
	return len(p), nil
}

// writeHead writes the response head into the buffer; first is the first
// body write, for a Content-Type when the handler set none (as net/http
// sniffs one).
func (w *fastWriter) writeHead(first []byte) {
	w.headSent = true
	if b := w.body; b.left > 0 && b.err == nil {
		// A body the handler did not read (a refusal): as net/http, read
		// and drop a small rest before answering, so a client that sends
		// its whole request before reading is not stuck, and the
		// connection stays in step; with a large rest close after.
		if b.left <= maxDiscardBytes {
			_, _ = io.Copy(io.Discard, b)
		}
		if b.left > 0 || b.err != nil {
			w.closeAfter = true
		}
	}
	h := w.header
	code := w.status
	w.noBody = code == http.StatusNoContent || code == http.StatusNotModified
	if w.contentLength < 0 && !w.noBody {
		w.chunked = true
	}
	if w.fc.fs.isStopping() || w.req.Close {
		w.closeAfter = true
	}
	bw := w.fc.bw
	b := append(bw.AvailableBuffer(), "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(code)...)
	b = append(b, "\r\n"...)
	// The whole head is appended where the buffer is free and written
	// once: a head larger than that (rare) grows b, and the one write
	// sends what does not fit. The loop notes a Date and a Content-Type
	// of the handler's, so that neither costs a lookup; ours follow its
	// (as net/http writes them after the handler's too).
	hasDate, hasType := false, false
	for k, vs := range h {
		switch k {
		case "Transfer-Encoding", "Connection":
			continue
		case "Date":
			hasDate = true
		case "Content-Type":
			hasType = true
		}
		if strings.HasPrefix(k, http.TrailerPrefix) {
			continue
		}
		for _, v := range vs {
			b = append(b, k...)
			b = append(b, ": "...)
			if hasCRorLF(v) {
				v = strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
			}
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	if !hasType && !w.noBody && Value(h, "X-Content-Type-Options") != "nosniff" {
		ct := http.DetectContentType(first)
		h.Set("Content-Type", ct) // the handler's header has it, as before
		b = append(append(append(b, "Content-Type: "...), ct...), "\r\n"...)
	}
	if !hasDate {
		b = append(b, "Date: "...)
		b = appendDate(b)
		b = append(b, "\r\n"...)
	}
	if w.chunked {
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	}
	if w.closeAfter {
		b = append(b, "Connection: close\r\n"...)
	}
	b = append(b, "\r\n"...)
	_, w.err = bw.Write(b)
}

// hasCRorLF reports whether v has a carriage return or a line feed:
// two vectorized byte searches, where strings.ContainsAny builds a set
// of its characters at each call.
func hasCRorLF(v string) bool {
	return strings.IndexByte(v, '\r') >= 0 || strings.IndexByte(v, '\n') >= 0
}

// Flush sends the head and what is buffered, except the bytes of a
// whole answer on a connection kept for another request (leftWhole):
// those go when the handler returned, with the wait for that request.
func (w *fastWriter) Flush() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headSent {
		w.writeHead(nil)
	}
	if w.err == nil && !w.leftWhole() {
		w.err = w.fc.bw.Flush()
	}
}

// leftWhole reports whether the answer is written whole (its head, and
// all of its Content-Length) on a connection that stays open: what is
// buffered of it can wait for the exchange's end (fastConn.sendAnswer).
func (w *fastWriter) leftWhole() bool {
	return w.headSent && !w.chunked && !w.closeAfter && !w.req.Close &&
		(w.noBody || (w.contentLength >= 0 && w.written == w.contentLength))
}

// FlushError is Flush with its error, for http.ResponseController.
func (w *fastWriter) FlushError() error {
	w.Flush()
	return w.err
}

// SetReadDeadline sets the connection's read deadline (the request
// body's deadline, see bodyReader).
// It takes effect at the next read that reaches the connection.
func (w *fastWriter) SetReadDeadline(t time.Time) error {
	w.fc.setReadDeadline(t)
	return nil
}

// SetWriteDeadline sets the connection's write deadline.
func (w *fastWriter) SetWriteDeadline(t time.Time) error { return w.fc.c.SetWriteDeadline(t) }

// finish ends the response as net/http does when a handler returns: an
// unwritten head is written with an empty body, a chunked body gets its
// last chunk and trailers, everything is flushed. It reports whether the
// connection is still in step for another request.
func (w *fastWriter) finish() bool {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headSent {
		if w.contentLength < 0 && w.status != http.StatusNoContent && w.status != http.StatusNotModified {
			w.contentLength = 0
			w.header.Set("Content-Length", "0")
		}
		w.writeHead(nil)
	}
	bw := w.fc.bw
	if w.err == nil && w.chunked {
		bw.WriteString("0\r\n")
		for k, vs := range w.header {
			k, ok := strings.CutPrefix(k, http.TrailerPrefix)
			if !ok {
				if !declaredTrailer(w.header, k) {
					continue
				}
			}
			for _, v := range vs {
				bw.WriteString(http.CanonicalHeaderKey(k))
				bw.WriteString(": ")
				bw.WriteString(v)
				bw.WriteString("\r\n")
			}
		}
		_, w.err = bw.WriteString("\r\n")
	}
	if w.contentLength >= 0 && w.written != w.contentLength && !w.noBody {
		w.closeAfter = true
	}
	// The answer is whole now (a chunked one has its last chunk): on a
	// connection kept open what is buffered leaves with the wait for the
	// next request (fastConn.sendAnswer).
	if w.err == nil && (w.closeAfter || w.req.Close) {
		w.err = bw.Flush()
	}
	return w.err == nil
}

// declaredTrailer reports whether k was announced in the Trailer header.
func declaredTrailer(h http.Header, k string) bool {
	return k != "Trailer" && headerHasToken(h["Trailer"], k)
}

// dateCache holds the Date header of the current second, formatted once
// a second.
var dateCache atomic.Pointer[dateText]

type dateText struct {
	sec  int64
	text []byte
}

func appendDate(b []byte) []byte {
	now := time.Now()
	d := dateCache.Load()
	if d == nil || d.sec != now.Unix() {
		d = &dateText{sec: now.Unix(), text: now.UTC().AppendFormat(nil, http.TimeFormat)}
		dateCache.Store(d)
	}
	return append(b, d.text...)
}

// handoffListener is the listener the role's net/http server serves:
// its connections are the ones the fast reader handed over.
type handoffListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newHandoffListener(addr net.Addr) *handoffListener {
	return &handoffListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

// push hands c to the server; false when the listener is closed (c is
// then closed).
func (l *handoffListener) push(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		_ = c.Close()
		return false
	}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }
