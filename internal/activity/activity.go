package activity

import (
	"sync"
	"time"
)

// Bounds of a Log.
const (
	// DefaultSize is the ring's size when New is given 0.
	DefaultSize = 500
	// MaxSize bounds the ring New accepts.
	MaxSize = 100_000
	// ChartSeconds is how many one-second buckets Rates returns, newest
	// last.
	ChartSeconds = 60
	// MaxFieldBytes cuts the role and node of an entry.
	MaxFieldBytes = 128
)

// Route values of a Request.
const (
	RouteLocal = "local"
	RoutePeer  = "peer"
)

// Request is one request forwarded through a role port, as it ended.
type Request struct {
	// At is when the request arrived.
	At time.Time `json:"at"`
	// Role is the role port's role.
	Role string `json:"role"`
	// Route is RouteLocal or RoutePeer; Node is the peer's node id on
	// RoutePeer.
	Route string `json:"route"`
	Node  string `json:"node,omitempty"`
	// Status is the HTTP status the client got; 499 when it went away
	// before any answer.
	Status int `json:"status"`
	// TTFB is the time to the first byte of the answer (0: none came);
	// Duration the whole exchange.
	TTFB     time.Duration `json:"ttfb_ns"`
	Duration time.Duration `json:"duration_ns"`
	// Tokens are the completion tokens the answer reported (0: none or
	// not reported); TokensPerSec is Tokens over the generation time (the
	// time after the first byte of a stream, the whole exchange
	// otherwise), 0 when not known.
	Tokens       int     `json:"tokens,omitempty"`
	TokensPerSec float64 `json:"tokens_per_sec,omitempty"`
}

// Second is one bucket of the chart: the requests that ended in it and
// the completion tokens they reported.
type Second struct {
	At       time.Time `json:"at"`
	Requests int       `json:"requests"`
	Tokens   int       `json:"tokens"`
}

// bucket is one second of the chart, keyed by its Unix second.
type bucket struct {
	sec      int64
	requests int
	tokens   int
}

// Log is the ring of recent requests and the chart's counters.
type Log struct {
	now func() time.Time

	mu      sync.Mutex // guards ring, next, n, seq, buckets
	ring    []Request
	next    int // where the next request goes
	n       int // requests held, at most len(ring)
	seq     uint64
	buckets [ChartSeconds]bucket
}

// New returns a Log of size entries (DefaultSize for 0, at most MaxSize)
// reading time from now (time.Now when nil).
func New(size int, now func() time.Time) *Log {
	switch {
	case size <= 0:
		size = DefaultSize
	case size > MaxSize:
		size = MaxSize
	}
	if now == nil {
		now = time.Now
	}
	return &Log{now: now, ring: make([]Request, size)}
}

// Add keeps r, overwriting the oldest request when the ring is full, and
// counts it in the current second's bucket.
func (l *Log) Add(r Request) { l.add(&r, l.now().Unix()) }

// AddEnded is Add for a request that ended at end, read from the same
// clock as the Log's: it is counted in end's second, and the Log does
// not read the clock again for an instant its caller has just read.
func (l *Log) AddEnded(r Request, end time.Time) { l.add(&r, end.Unix()) }

// add keeps r and counts it in the bucket of Unix second sec.
func (l *Log) add(r *Request, sec int64) {
	r.Role, r.Node = cut(r.Role), cut(r.Node)
	l.mu.Lock()
	l.ring[l.next] = *r
	if l.next++; l.next == len(l.ring) { // no division under the lock
		l.next = 0
	}
	l.n = min(l.n+1, len(l.ring))
	l.seq++
	b := &l.buckets[slot(sec)]
	if b.sec != sec {
		*b = bucket{sec: sec}
	}
	b.requests++
	b.tokens += r.Tokens
	l.mu.Unlock()
}

// Seq counts the requests ever added: a reader that saw the same Seq has
// nothing new to show.
func (l *Log) Seq() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seq
}

// Recent returns at most max of the latest requests, newest first (all
// held for max <= 0).
func (l *Log) Recent(max int) []Request {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.n
	if max > 0 && max < n {
		n = max
	}
	out := make([]Request, n)
	for i := range n {
		out[i] = l.ring[(l.next-1-i+2*len(l.ring))%len(l.ring)]
	}
	return out
}

// Rates returns the last ChartSeconds seconds, oldest first, ending with
// the current one; a second with no request is zero.
func (l *Log) Rates() []Second {
	now := l.now().Unix()
	out := make([]Second, ChartSeconds)
	l.mu.Lock()
	for i := range ChartSeconds {
		sec := now - int64(ChartSeconds-1-i)
		out[i].At = time.Unix(sec, 0).UTC()
		if b := l.buckets[slot(sec)]; b.sec == sec {
			out[i].Requests, out[i].Tokens = b.requests, b.tokens
		}
	}
	l.mu.Unlock()
	return out
}

// cut bounds a string field to MaxFieldBytes (it may split a rune: the
// fields are ids and names of the grammar's ASCII).
func cut(s string) string {
	if len(s) > MaxFieldBytes {
		return s[:MaxFieldBytes]
	}
	return s
}

// slot is the bucket of Unix second sec.
func slot(sec int64) int { return int(((sec % ChartSeconds) + ChartSeconds) % ChartSeconds) }
