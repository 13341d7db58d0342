package httpfast

import (
	"bufio"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Pool is an HTTP/1.1 client of local instances: one exchange at a time
// on each connection, the request head and an in-memory body
// written in one syscall, the response read on the handler's goroutine.
// Idle connections hold no goroutine; before one is reused a non-blocking
// peek checks that the instance has not closed it, and an exchange that
// fails on a reused connection before any response byte is retried once
// on a new one when its body can be sent again (none, or pinned in
// memory). The idle connections kept for a role and an instance are at
// most the role's concurrency: a model server serves no more at once.
type Pool struct {
	dial func(ctx context.Context, network, addr string) (net.Conn, error)

	mu sync.Mutex // guards idle, closed, and the idle stacks' conns
	// idle holds each key's stack, newest last: a pointer, so that taking
	// a connection or putting one back looks the key up once.
	idle   map[PoolKey]*idleStack
	closed bool
}

// idleStack is the idle connections of one key, the newest last.
type idleStack struct{ conns []*Conn }

// PoolKey names the idle connections of one role to one instance.
type PoolKey struct{ Role, Addr string }

// NewPool returns a pool that connects with dial (nil: a TCP dial
// bounded by upstreamDialTimeout).
func NewPool(dial func(ctx context.Context, network, addr string) (net.Conn, error)) *Pool {
	if dial == nil {
		d := &net.Dialer{Timeout: upstreamDialTimeout, KeepAlive: -1}
		dial = d.DialContext
	}
	return &Pool{dial: dial, idle: map[PoolKey]*idleStack{}}
}

// Conn is one connection to a local instance.
type Conn struct {
	key         PoolKey
	conn        net.Conn
	lim         *limitedReader
	br          *bufio.Reader
	reused      bool
	born        time.Time // when it was dialled: the base of idleFrom
	idleFrom    time.Time
	interruptFn func() // interrupt, made once
	// stopFn is unwatch, made once: the stop of an exchange whose
	// context is a *Context, registered under ecID (Register).
	stopFn func() bool
	ec     *Context
	ecID   uint64
	// slot is the response of the exchange running, reused by the next
	// one: a response is done with before its connection is put back.
	slot responseSlot
	wb   [2][]byte   // a request's head and body, written together
	bufs net.Buffers // over wb, consumed by the write
}

// limitedReader bounds what the response head may take from the
// connection (MaxResponseHeadBytes); after the head it is unlimited.
type limitedReader struct {
	r    io.Reader
	left int64
}

// errUpstreamHeadTooLarge fails an exchange whose response head is over
// MaxResponseHeadBytes.
var errUpstreamHeadTooLarge = errors.New("upstream response head over " + strconv.Itoa(MaxResponseHeadBytes) + " bytes")

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, errUpstreamHeadTooLarge
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

// get returns an idle connection of key that is still open, or dials one.
// A connection idle for less than freshIdle is taken without the peek when
// the request can be sent again (replay): an instance closing it in that
// window fails the exchange before any response byte, which is retried.
func (up *Pool) get(ctx context.Context, key PoolKey, replay bool) (*Conn, error) {
	for {
		up.mu.Lock()
		st := up.idle[key]
		if st == nil || len(st.conns) == 0 {
			up.mu.Unlock()
			break
		}
		stack := st.conns
		uc := stack[len(stack)-1]
		stack[len(stack)-1] = nil
		st.conns = stack[:len(stack)-1]
		up.mu.Unlock()
		// The monotonic clock alone (time.Now reads the wall clock too).
		idle := time.Since(uc.idleFrom)
		if idle < upstreamIdleTimeout && ((replay && idle < freshIdle) || ConnAlive(uc.conn)) {
			uc.reused = true
			return uc, nil
		}
		_ = uc.conn.Close() // closed by the instance, or idle too long
	}
	c, err := up.dial(ctx, "tcp", key.Addr)
	if err != nil {
		return nil, err
	}
	c = RawIO(c)
	uc := &Conn{key: key, conn: c, lim: &limitedReader{r: c, left: math.MaxInt64}, born: time.Now()}
	uc.interruptFn = uc.interrupt
	uc.stopFn = uc.unwatch
	uc.br = bufio.NewReaderSize(uc.lim, upstreamReadBufferBytes)
	return uc, nil
}

// Put keeps uc for the next exchange of its key, unless limit (the role's
// concurrency) connections are idle there already; the oldest beyond the
// limit, and any idle past upstreamIdleTimeout, are closed.
func (up *Pool) Put(uc *Conn, limit int) {
	// idleFrom is only compared with monotonic readings (get's and
	// Put's): monoNow from the connection's start serves.
	uc.idleFrom = monoNow(uc.born)
	up.mu.Lock()
	if up.closed {
		up.mu.Unlock()
		_ = uc.conn.Close()
		return
	}
	st := up.idle[uc.key]
	if st == nil {
		st = &idleStack{}
		up.idle[uc.key] = st
	}
	stack := append(st.conns, uc)
	drop := 0
	for drop < len(stack) && (len(stack)-drop > limit || uc.idleFrom.Sub(stack[drop].idleFrom) >= upstreamIdleTimeout) {
		drop++
	}
	var closing []*Conn
	if drop > 0 {
		closing = append(closing, stack[:drop]...)
		stack = append(stack[:0], stack[drop:]...)
		clear(stack[len(stack):cap(stack)])
	}
	if len(stack) == 0 {
		delete(up.idle, uc.key)
	} else {
		st.conns = stack
	}
	up.mu.Unlock()
	for _, c := range closing {
		_ = c.conn.Close()
	}
}

// IdleConns returns how many idle connections key has.
func (up *Pool) IdleConns(key PoolKey) int {
	up.mu.Lock()
	defer up.mu.Unlock()
	if st := up.idle[key]; st != nil {
		return len(st.conns)
	}
	return 0
}

// CloseIdle closes every idle connection; the pool stays usable.
func (up *Pool) CloseIdle() {
	up.mu.Lock()
	idle := up.idle
	up.idle = map[PoolKey]*idleStack{}
	up.mu.Unlock()
	for _, st := range idle {
		for _, uc := range st.conns {
			_ = uc.conn.Close()
		}
	}
}

// Close closes every idle connection; connections put back later are
// closed too.
func (up *Pool) Close() {
	up.mu.Lock()
	up.closed = true
	idle := up.idle
	up.idle = map[PoolKey]*idleStack{}
	up.mu.Unlock()
	for _, st := range idle {
		for _, uc := range st.conns {
			_ = uc.conn.Close()
		}
	}
}

// Request is what an exchange sends: R's method, target and headers, and
// either Body (in memory, sent with the head) or Stream.
type Request struct {
	R    *http.Request
	Host string // the instance's address, the Host sent
	// ContentType and Accept, when set, are sent as those fields besides
	// R.Header (which then has neither): a caller with only these needs no
	// header map. They must be valid field values.
	ContentType, Accept string
	Body                []byte
	InMem               bool // Body holds the whole request body
	Stream              io.Reader
	Length              int64 // of the streamed body; -1: unknown, sent chunked
	// HeaderDone says the caller is done with the response's Header,
	// its value slices among it, before the connection is put back or
	// closed (it copies what it keeps): they are then the connection's,
	// reused by its next exchange.
	HeaderDone bool
}

// RoundTrip sends req on a connection of key and returns the response
// head; the body is read from the returned connection. ctx ending
// interrupts the connection's reads and writes; stop must be called once
// the exchange is over, before the connection is put back or closed, and
// reports whether ctx ended before (a second call reports false).
func (up *Pool) RoundTrip(ctx context.Context, key PoolKey, req *Request) (*Conn, *http.Response, func() bool, error) {
	replayable := req.InMem || req.Stream == nil
	for attempt := 0; ; attempt++ {
		uc, err := up.get(ctx, key, replayable && attempt == 0)
		if err != nil {
			return nil, nil, nil, err
		}
		var stop func() bool
		if ec, ok := ctx.(*Context); ok {
			// The connection itself is registered, and its own stop
			// returned: nothing made for the exchange.
			uc.ec, uc.ecID = ec, ec.Register(uc)
			stop = uc.stopFn
		} else {
			stop = context.AfterFunc(ctx, uc.interruptFn)
		}
		res, err := uc.exchange(req)
		if err == nil {
			return uc, res, stop, nil
		}
		stop()
		_ = uc.conn.Close()
		if !uc.reused || attempt > 0 || !replayable || ctx.Err() != nil || !errors.Is(err, errNoResponse) {
			return nil, nil, nil, err
		}
		// The instance closed the reused connection as the request went
		// out: send it again once on a new connection.
	}
}

// errNoResponse wraps a failure to read any byte of a response head.
var errNoResponse = errors.New("upstream closed the connection without a response")

// Close closes the connection: one not given back with Put.
func (uc *Conn) Close() error { return uc.conn.Close() }

// interrupt makes the connection's blocked reads and writes return.
func (uc *Conn) interrupt() { _ = uc.conn.SetDeadline(time.Unix(1, 0)) }

// ContextDone interrupts the connection: its exchange's context ended
// (Notified).
func (uc *Conn) ContextDone() { uc.interrupt() }

// unwatch is the stop of an exchange registered with its *Context: it
// unregisters the connection once.
func (uc *Conn) unwatch() bool {
	ec, id := uc.ec, uc.ecID
	uc.ec, uc.ecID = nil, 0
	if ec == nil {
		return false
	}
	return ec.Unregister(id)
}

// Sender is what SendAwait sends with.
type Sender interface{ Send() error }

// heldSend is a Conn as the Sender of its bufs (a held request's head
// and body).
type heldSend Conn

func (h *heldSend) Send() error {
	_, err := writeBuffers(h.conn, &h.bufs)
	return err
}

// exchange writes req and reads the response head (1xx heads are skipped;
// 101 is an error: protocol switches are not relayed).
func (uc *Conn) exchange(req *Request) (*http.Response, error) {
	hb := getHeadBuf()
	head := appendRequestHead((*hb)[:0], req)
	var err error
	switch {
	case req.InMem && len(req.Body) > 0:
		// The whole request in one write, then the wait for the answer
		// in the same poller window (SendAwait).
		uc.wb = [2][]byte{head, req.Body}
		uc.bufs = uc.wb[:]
		err = SendAwait(uc.conn, (*heldSend)(uc))
		uc.wb = [2][]byte{} // the body is not held past the exchange
	default:
		_, err = uc.conn.Write(head)
		if err == nil && req.Stream != nil {
			err = writeStreamedBody(uc.conn, req.Stream, req.Length)
		}
	}
	*hb = head
	putHeadBuf(hb)
	if err != nil {
		return nil, errors.Join(errNoResponse, err)
	}
	uc.lim.left = MaxResponseHeadBytes
	for {
		if _, err := uc.br.Peek(1); err != nil {
			if errors.Is(err, errUpstreamHeadTooLarge) {
				return nil, err
			}
			return nil, errors.Join(errNoResponse, err)
		}
		uc.slot.headerDone = req.HeaderDone
		res := parseResponseHead(uc.br, req.R, &uc.slot)
		if res != nil {
			uc.lim.left = math.MaxInt64
			return res, nil
		}
		res, err := http.ReadResponse(uc.br, req.R)
		if err != nil {
			return nil, err
		}
		switch {
		case res.StatusCode == http.StatusSwitchingProtocols:
			return nil, errors.New("upstream switched protocols")
		case res.StatusCode >= 100 && res.StatusCode < 200:
			continue // informational heads are not relayed
		}
		uc.lim.left = math.MaxInt64
		return res, nil
	}
}

// writeStreamedBody copies a client's body to the instance: length bytes,
// or chunked when the length is unknown (-1).
func writeStreamedBody(w io.Writer, body io.Reader, length int64) error {
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	buf := *bp
	if length >= 0 {
		n, err := io.CopyBuffer(writerOnly{w}, io.LimitReader(body, length), buf)
		if err == nil && n < length {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	cw := bufio.NewWriterSize(w, 512)
	for {
		n, rerr := body.Read(buf[:len(buf)-32])
		if n > 0 {
			cw.WriteString(strconv.FormatInt(int64(n), 16))
			cw.WriteString("\r\n")
			cw.Write(buf[:n])
			if _, err := cw.WriteString("\r\n"); err != nil {
				return err
			}
			if err := cw.Flush(); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			_, _ = cw.WriteString("0\r\n\r\n")
			return cw.Flush()
		}
		if rerr != nil {
			return rerr
		}
	}
}

// writerOnly hides the connection's ReadFrom, so a copy goes through the
// pooled buffer rather than the kernel's splice path for tiny bodies.
type writerOnly struct{ io.Writer }

// hopHeaders are removed from what is relayed in both directions, with
// the headers a Connection header names (RFC 9110 7.6.1).
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// dropHeader reports the headers not forwarded to an instance besides
// the hop-by-hop ones: the client's forwarding claims (as ReverseProxy
// with Rewrite), and the framing and Host that the proxy writes itself.
// A switch, where a map's lookup hashed each forwarded name.
func dropHeader(k string) bool {
	switch k {
	case "Host", "Content-Length", "Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto":
		return true
	}
	return false
}

// appendRequestHead writes the request head sent to an instance: the
// client's method and target, Host the instance's address, the client's
// headers but hop-by-hop and forwarding ones, and the body's framing.
func appendRequestHead(b []byte, req *Request) []byte {
	r := req.R
	b = append(b, r.Method...)
	b = append(b, ' ')
	b = append(b, requestTarget(r)...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, req.Host...)
	b = append(b, "\r\n"...)
	named := connectionTokens(r.Header)
	for k, vs := range r.Header {
		if dropHeader(k) || isHop(k) || (named != nil && named[strings.ToLower(k)]) {
			continue
		}
		for _, v := range vs {
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	if headerHasToken(r.Header["Te"], "trailers") {
		b = append(b, "Te: trailers\r\n"...)
	}
	if req.ContentType != "" {
		b = append(append(append(b, "Content-Type: "...), req.ContentType...), "\r\n"...)
	}
	if req.Accept != "" {
		b = append(append(append(b, "Accept: "...), req.Accept...), "\r\n"...)
	}
	switch {
	case req.InMem || req.Stream == nil:
		if len(req.Body) > 0 || r.Method == http.MethodPost {
			b = append(b, "Content-Length: "...)
			b = strconv.AppendInt(b, int64(len(req.Body)), 10)
			b = append(b, "\r\n"...)
		}
	case req.Length >= 0:
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, req.Length, 10)
		b = append(b, "\r\n"...)
	default:
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	}
	return append(b, "\r\n"...)
}

// requestTarget is the target forwarded: the client's, which classifyPath
// checked is in canonical origin form, with a query that does not parse
// re-encoded without its bad parameters (as ReverseProxy does).
func requestTarget(r *http.Request) string {
	target := r.RequestURI
	path, query, ok := strings.Cut(target, "?")
	if !ok || query == "" {
		return target
	}
	if !strings.Contains(query, ";") {
		if _, err := url.ParseQuery(query); err == nil {
			return target
		}
	}
	v, _ := url.ParseQuery(query) // keeps the parameters that parse
	if enc := v.Encode(); enc != "" {
		return path + "?" + enc
	}
	return path
}

func isHop(k string) bool {
	for _, h := range hopHeaders {
		if k == h {
			return true
		}
	}
	return false
}

// connectionTokens returns the lower-case header names a Connection
// header lists, nil when there are none.
func connectionTokens(h http.Header) map[string]bool {
	vs := h["Connection"]
	if len(vs) == 0 {
		return nil
	}
	var out map[string]bool
	for _, v := range vs {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				if out == nil {
					out = map[string]bool{}
				}
				out[strings.ToLower(f)] = true
			}
		}
	}
	return out
}

func headerHasToken(vs []string, token string) bool {
	for _, v := range vs {
		for f := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), token) {
				return true
			}
		}
	}
	return false
}

// RemoveHop deletes hop-by-hop headers from a response head.
func RemoveHop(h http.Header) {
	for k := range connectionTokens(h) {
		h.Del(k)
	}
	for _, k := range hopHeaders {
		delete(h, k)
	}
}

// Pools of the buffers an exchange uses.
var (
	headBufs    = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}
	copyBuffers = sync.Pool{New: func() any { b := make([]byte, copyBufferBytes); return &b }}
)

func getHeadBuf() *[]byte { return headBufs.Get().(*[]byte) }

func putHeadBuf(b *[]byte) {
	if cap(*b) <= 64<<10 {
		headBufs.Put(b)
	}
}
