package proxy

import (
	"cmp"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nodeld/nodeld/internal/activity"
	"github.com/nodeld/nodeld/internal/httpfast"
	"github.com/nodeld/nodeld/internal/table"
	"github.com/nodeld/nodeld/internal/usage"
)

// Bounds of the serving performance the proxy measures per role.
const (
	// PerfWindow is how many recent successful requests each metric of a
	// role keeps: a fixed ring, so memory per role is constant.
	PerfWindow = usage.Window
	// MinPerfTokens is the fewest completion tokens a response must
	// report to give a tokens-per-second sample: fewer measure overhead,
	// not generation.
	MinPerfTokens = 8
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
	ttfb     usage.Ring // milliseconds
	tps      usage.Ring // tokens per second
}

// record adds one exchange's samples, starting afresh when they come
// from another instance than the ones held.
func (pr *perfRecorder) record(instance instanceID, ttfb time.Duration, tps float64) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.instance != instance {
		pr.instance = instance
		pr.ttfb, pr.tps = usage.Ring{}, usage.Ring{}
	}
	pr.ttfb.Add(float64(ttfb) / float64(time.Millisecond))
	if tps > 0 {
		pr.tps.Add(tps)
	}
}

// stats returns the medians of instance's samples, and false when there
// are none of that instance.
func (pr *perfRecorder) stats(instance instanceID, minSamples int) (RolePerf, bool) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.instance != instance || pr.ttfb.Len() == 0 {
		return RolePerf{}, false
	}
	rp := RolePerf{TTFBSamples: pr.ttfb.Len(), TokensSamples: pr.tps.Len()}
	if pr.ttfb.Len() >= minSamples {
		rp.TTFB = time.Duration(pr.ttfb.Median() * float64(time.Millisecond))
	}
	if pr.tps.Len() >= minSamples && pr.tps.Len() > 0 {
		rp.TokensPerSecond = pr.tps.Median()
	}
	return rp, true
}

// measured reports whether r is an inference request whose speed the
// proxy measures, and whether its response may end with a usage report.
func measured(r *http.Request) (measure, reportsUsage bool) {
	if r.Method != http.MethodPost || !pinnedPath(r.URL.Path) {
		return false, false
	}
	return true, r.URL.Path == "/v1/chat/completions" || r.URL.Path == "/v1/completions"
}

// afterForward feeds a finished exchange to the role's performance
// samples (perf: only a measured local request answered 200 with a first
// byte counts) and to the activity log, and gives its tail back.
func (p *Proxy) afterForward(rs *roleServer, target table.Target, rec *recorder, start time.Time, total time.Duration, perf bool) {
	n, tps := 0, 0.0
	if rec.tail != nil && rec.status == http.StatusOK {
		if h := rec.Header(); httpfast.Value(h, "Content-Encoding") == "" {
			n, tps = usage.Rate(rec.tail.Bytes(), strings.HasPrefix(httpfast.Value(h, "Content-Type"), "text/event-stream"), total, rec.firstByte)
		}
	}
	if p.activity != nil {
		a := activity.Request{At: start, Role: rs.name, Route: activity.RouteLocal, Status: cmp.Or(rec.status, statusClientClosed),
			TTFB: rec.firstByte, Duration: total, Tokens: n, TokensPerSec: tps}
		if target.Kind == table.TargetRemote {
			a.Route, a.Node = activity.RoutePeer, target.NodeID
		}
		// The exchange ended when total was read: the log counts it in
		// that second without reading the clock again.
		p.activity.AddEnded(a, start.Add(total))
	}
	if perf && rec.status == http.StatusOK && rec.firstByte > 0 {
		if n < MinPerfTokens {
			tps = 0 // too few tokens: overhead, not generation
		}
		rs.perf.record(instanceKey(target), rec.firstByte, tps)
	}
	usage.PutTail(rec.tail)
}
