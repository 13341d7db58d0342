package proxy

import (
	"bytes"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nodeld/nodeld/internal/table"
)

// Bounds of the serving performance the proxy measures per role.
const (
	// PerfWindow is how many recent successful requests each metric of a
	// role keeps: a fixed ring, so memory per role is constant.
	PerfWindow = 256
	// perfTailBytes is how much of the end of a completion response is
	// kept to find its final usage report ("completion_tokens"): the last
	// SSE event with usage, then "data: [DONE]", or the end of a JSON
	// body, fit with room for a server's extra fields.
	perfTailBytes = 1024
	// MinPerfTokens is the fewest completion tokens a response must
	// report to give a tokens-per-second sample: fewer measure overhead,
	// not generation.
	MinPerfTokens = 8
	// minPerfTokenWindow is the shortest generation time a tokens-per-
	// second sample may rest on.
	minPerfTokenWindow = 10 * time.Millisecond
	// maxTokenDigits bounds the digits of a completion token count.
	maxTokenDigits = 9
)

// RolePerf is the measured serving performance of a role's local
// instance: medians over the last PerfWindow successful inference
// requests from local clients (POST to an OpenAI or Ollama inference path
// answered 200). A metric resting on fewer than the minimum asked for is
// zero, with its sample count.
type RolePerf struct {
	Role string
	// TTFB is the median time from request arrival to the first response
	// body byte: for a streamed completion, prompt processing; for a
	// one-shot response, the whole generation.
	TTFB        time.Duration
	TTFBSamples int
	// TokensPerSecond is the median generation speed of completions
	// whose final usage report gave at least MinPerfTokens completion
	// tokens: tokens over the time from the first to the last byte for a
	// stream, over the whole exchange for a one-shot response. Responses
	// without a usage report (a stream whose client did not ask for one)
	// give no sample.
	TokensPerSecond float64
	TokensSamples   int
}

// LocalPerf returns the measured performance of every role whose local
// instance still serves it (the instance the samples came from: a new
// instance starts afresh), sorted by role; roles with no sample are left
// out. Medians are computed now, from at most PerfWindow samples each.
func (p *Proxy) LocalPerf(minSamples int) []RolePerf {
	p.mu.Lock()
	roles := make([]*roleServer, 0, len(p.roles))
	for _, rs := range p.roles {
		roles = append(roles, rs)
	}
	p.mu.Unlock()
	var out []RolePerf
	for _, rs := range roles {
		target, ok := p.resolver.Resolve(rs.name)
		if !ok || target.Kind != table.TargetLocal {
			continue
		}
		if rp, ok := rs.perf.stats(instanceKey(target), minSamples); ok {
			rp.Role = rs.name
			out = append(out, rp)
		}
	}
	slices.SortFunc(out, func(a, b RolePerf) int { return strings.Compare(a.Role, b.Role) })
	return out
}

// instanceID names the local instance a sample came from.
type instanceID struct{ base, model string }

func instanceKey(t table.Target) instanceID { return instanceID{t.Base, t.Model} }

// perfRecorder keeps one role's recent samples. Recording takes its
// mutex for a few stores; LocalPerf copies and sorts at most PerfWindow
// values per metric under it.
type perfRecorder struct {
	mu       sync.Mutex // guards instance, ttfb and tps
	instance instanceID // the samples' instance
	ttfb     perfRing   // milliseconds
	tps      perfRing   // tokens per second
}

// perfRing is a fixed ring of the last PerfWindow values.
type perfRing struct {
	vals [PerfWindow]float64
	n    int // values held, at most PerfWindow
	next int // where the next value goes
}

func (r *perfRing) add(v float64) {
	r.vals[r.next] = v
	r.next = (r.next + 1) % PerfWindow
	r.n = min(r.n+1, PerfWindow)
}

// median returns the median of the values held (the mean of the middle
// two for an even count).
func (r *perfRing) median() float64 {
	vals := slices.Clone(r.vals[:r.n])
	slices.Sort(vals)
	if r.n%2 == 1 {
		return vals[r.n/2]
	}
	return (vals[r.n/2-1] + vals[r.n/2]) / 2
}

// record adds one exchange's samples, starting afresh when they come
// from another instance than the ones held.
func (pr *perfRecorder) record(instance instanceID, ttfb time.Duration, tps float64) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.instance != instance {
		pr.instance = instance
		pr.ttfb, pr.tps = perfRing{}, perfRing{}
	}
	pr.ttfb.add(float64(ttfb) / float64(time.Millisecond))
	if tps > 0 {
		pr.tps.add(tps)
	}
}

// stats returns the medians of instance's samples, and false when there
// are none of that instance.
func (pr *perfRecorder) stats(instance instanceID, minSamples int) (RolePerf, bool) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.instance != instance || pr.ttfb.n == 0 {
		return RolePerf{}, false
	}
	rp := RolePerf{TTFBSamples: pr.ttfb.n, TokensSamples: pr.tps.n}
	if pr.ttfb.n >= minSamples {
		rp.TTFB = time.Duration(pr.ttfb.median() * float64(time.Millisecond))
	}
	if pr.tps.n >= minSamples && pr.tps.n > 0 {
		rp.TokensPerSecond = pr.tps.median()
	}
	return rp, true
}

// measured reports whether r is an inference request whose speed the
// proxy measures, and whether its response may end with a usage report.
func measured(r *http.Request) (measure, usage bool) {
	if r.Method != http.MethodPost || !pinnedPaths[r.URL.Path] {
		return false, false
	}
	return true, r.URL.Path == "/v1/chat/completions" || r.URL.Path == "/v1/completions"
}

// observePerf records a finished local exchange in rs's recorder: only a
// measured request answered 200 with a first byte counts.
func observePerf(rs *roleServer, target table.Target, rec *recorder, total time.Duration) {
	if rec.status != http.StatusOK || rec.firstByte <= 0 {
		return
	}
	tps := 0.0
	if rec.tail != nil && rec.Header().Get("Content-Encoding") == "" {
		if n, ok := completionTokens(rec.tail.bytes()); ok && n >= MinPerfTokens {
			window := total
			if strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream") {
				window = total - rec.firstByte
			}
			if window >= minPerfTokenWindow {
				tps = float64(n) / window.Seconds()
			}
		}
	}
	rs.perf.record(instanceKey(target), rec.firstByte, tps)
}

// tailBuf keeps the last perfTailBytes written to it, in a ring: keeping
// costs a copy of at most perfTailBytes per write and no parsing; the
// usage report is looked for once, when the response has ended.
type tailBuf struct {
	buf  [perfTailBytes]byte
	pos  int  // next write position
	full bool // the ring has wrapped
}

var tailPool = sync.Pool{New: func() any { return new(tailBuf) }}

// getTail returns an empty tailBuf from the pool.
func getTail() *tailBuf {
	t := tailPool.Get().(*tailBuf)
	t.pos, t.full = 0, false
	return t
}

// putTail returns t to the pool.
func putTail(t *tailBuf) {
	if t != nil {
		tailPool.Put(t)
	}
}

func (t *tailBuf) keep(p []byte) {
	if len(p) >= perfTailBytes {
		copy(t.buf[:], p[len(p)-perfTailBytes:])
		t.pos, t.full = 0, true
		return
	}
	n := copy(t.buf[t.pos:], p)
	if n < len(p) {
		copy(t.buf[:], p[n:])
		t.full = true
	}
	t.pos = (t.pos + len(p)) % perfTailBytes
	if t.pos == 0 && len(p) > 0 {
		t.full = true
	}
}

// bytes returns what the ring holds, oldest first.
func (t *tailBuf) bytes() []byte {
	if !t.full {
		return t.buf[:t.pos]
	}
	out := make([]byte, 0, perfTailBytes)
	out = append(out, t.buf[t.pos:]...)
	return append(out, t.buf[:t.pos]...)
}

// completionTokens finds the last "completion_tokens" count in tail: the
// final usage report of an OpenAI completion, streamed or not. It reads a
// non-negative integer of at most maxTokenDigits digits after the key.
func completionTokens(tail []byte) (int, bool) {
	const key = `"completion_tokens"`
	i := bytes.LastIndex(tail, []byte(key))
	if i < 0 {
		return 0, false
	}
	rest := bytes.TrimLeft(tail[i+len(key):], " \t\r\n")
	if len(rest) == 0 || rest[0] != ':' {
		return 0, false
	}
	rest = bytes.TrimLeft(rest[1:], " \t\r\n")
	n, digits := 0, 0
	for digits < len(rest) && rest[digits] >= '0' && rest[digits] <= '9' {
		if digits == maxTokenDigits {
			return 0, false
		}
		n = n*10 + int(rest[digits]-'0')
		digits++
	}
	if digits == 0 || digits == len(rest) {
		// No number, or one cut off by the end of the tail.
		return 0, false
	}
	return n, true
}
