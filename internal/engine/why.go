package engine

import (
	"math"
	"strconv"
	"strings"

	"github.com/nodeld/nodeld/internal/grammar"
)

// why is what a rejection's detail is made of: Place records the figures
// and names, and Rejection.Detail formats them when asked, so that a
// decision pays for no text.
type why struct {
	t    *texts    // the request's names
	s    string    // a text of the node or the request: gate reason, unknown state, revoked ref, fixed text
	c    *conflict // co-residency
	n    [2]uint64 // memory: pending, free; perf: the figure's bits
	kind whyKind
	req  int32 // requirement (plan index), or variant for memory
	a    int32 // kind-specific: see the whyKind constants
}

// whyKind says how a why is formatted.
type whyKind uint8

const (
	whyText          whyKind = iota // s
	whyTrust                        // a: the node's tier
	whyRevokedRef                   // s: the ref
	whyConflict                     // c
	whyNotAdvertised                // req
	whyProvenance                   // req; a: best provenance rank found
	whyPredicate                    // req; a: the predicate that fails
	whyUnavailable                  // req; a: index in blockingStates, or -1 and s the state
	whyUsable                       // req; a: usable capabilities found
	whyContended                    // req; a: the variant
	whyEmulation                    // a: bit set of fitting emulated variants
	whyMemory                       // req: variant; a: pool; n: pending, free
	whyGate                         // s: the reason
	whyPerf                         // n[0]: the figure's bits
)

// conflict is a co-residency rejection: an instance on the node carries
// a label the workload excludes (theyExclude false), or excludes one of
// its labels.
type conflict struct {
	kind, name, label string
	theyExclude       bool
}

var provenanceNames = [...]string{"unknown", grammar.ProvenanceClaimed, grammar.ProvenanceProbed, grammar.ProvenanceMeasured}

// blockingStates are the grammar states that make a capability unusable.
var blockingStates = [...]string{grammar.StateBusy, grammar.StateReserved, grammar.StateDegraded}

// Memory pools, as named in memory rejections.
const (
	poolUnified = iota
	poolSystem
	poolVRAM
)

var poolNames = [...]string{"unified", "system", "vram"}

// text formats the detail.
func (w *why) text() string {
	t := w.t
	switch w.kind {
	case whyTrust:
		return "tier " + Trust(w.a).String() + " below required " + t.minTrust.String()
	case whyRevokedRef:
		return "workload ref " + w.s + " is revoked"
	case whyConflict:
		c := w.c
		if c.theyExclude {
			return "instance " + c.kind + "/" + c.name + " excludes label " + c.label + " of this workload"
		}
		return "instance " + c.kind + "/" + c.name + " has label " + c.label + ", which this workload excludes"
	case whyNotAdvertised, whyProvenance, whyPredicate, whyUnavailable, whyUsable:
		r := &t.reqs[w.req]
		head := t.prefix(r.variant) + "`" + r.sel + "`: "
		switch w.kind {
		case whyNotAdvertised:
			return head + "not advertised"
		case whyProvenance:
			return head + "provenance " + provenanceNames[w.a] + " below " + provenanceNames[r.minRank]
		case whyPredicate:
			pr := r.preds[w.a]
			return head + "predicate `" + pr.Attr + " " + pr.Op + " " + valueText(pr.Value) + "` failed"
		case whyUnavailable:
			state := w.s
			if w.a >= 0 {
				state = blockingStates[w.a]
			}
			return head + "unavailable (" + state + ")"
		default:
			return head + strconv.Itoa(int(w.a)) + " usable, need " + strconv.Itoa(r.count)
		}
	case whyContended:
		r := &t.reqs[w.req]
		s := t.prefix(w.a) + "`" + r.sel + "`: contended (need " + strconv.Itoa(r.count)
		if r.exclusive {
			s += " exclusive"
		}
		return s + ")"
	case whyEmulation:
		var names []string
		for vi, v := range t.variants {
			if w.a&(1<<vi) != 0 {
				names = append(names, v)
			}
		}
		return "only emulated route(s) fit (" + strings.Join(names, ", ") + "); emulation needs explicit allow_emulated"
	case whyMemory:
		res := t.res[w.req]
		host, accel := res.HostBytes, res.AccelBytes
		switch w.a {
		case poolSystem:
			accel = 0
		case poolVRAM:
			host = 0
		}
		pending, free := w.n[0], w.n[1]
		need := satAdd(satAdd(host, accel), pending)
		b := []byte(t.prefix(w.req))
		b = append(b, poolNames[w.a]...)
		b = append(b, " pool: need "...)
		b = strconv.AppendUint(b, need, 10)
		b = append(b, " bytes"...)
		if pending > 0 {
			b = append(b, " ("...)
			b = strconv.AppendUint(b, pending, 10)
			b = append(b, " pending)"...)
		}
		b = append(b, ", free "...)
		b = strconv.AppendUint(b, free, 10)
		b = append(b, " bytes"...)
		return string(b)
	case whyGate:
		return "workload.place denied: " + w.s
	case whyPerf:
		return "measured " + t.perfID + " " + formatFloat(math.Float64frombits(w.n[0])) + " misses budget " + formatFloat(t.budget)
	default:
		return w.s
	}
}

// prefix is "variant <name>: " for variant vi, "" for -1.
func (t *texts) prefix(vi int32) string {
	if vi < 0 {
		return ""
	}
	return "variant " + t.variants[vi] + ": "
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
