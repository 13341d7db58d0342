package engine

import (
	"math"
	"strconv"
	"strings"

	"github.com/nodeld/nodeld/internal/grammar"
)

// why is what a rejection's detail is made of: Place records the figures
// and names, and Rejection.Detail formats them when asked, so that a
// decision pays for no text. It holds one pointer and two integers
// (16 bytes): texts, figures and conflicts of the node are kept in the
// decision's texts (texts.strs, texts.figs, texts.conflicts) and named
// here by index, so that a rejection is small and cheap to copy.
type why struct {
	t    *texts // the request's names, and the decision's side tables
	a    int32  // kind-specific: see the whyKind constants
	req  int16  // requirement (plan index, at most 1,152), or variant for memory
	kind whyKind
}

// whyKind says how a why is formatted.
type whyKind uint8

const (
	whyFixed         whyKind = iota // a: index in fixedTexts
	whyTrust                        // a: the node's tier
	whyRevokedRef                   // a: the ref, in t.strs
	whyConflict                     // a: index in t.conflicts
	whyNotAdvertised                // req
	whyProvenance                   // req; a: best provenance rank found
	whyPredicate                    // req; a: the predicate that fails
	whyUnavailable                  // req; a: index in blockingStates, or -1 - the state's index in t.strs
	whyUsable                       // req; a: usable capabilities found
	whyContended                    // req; a: the variant
	whyEmulation                    // a: bit set of fitting emulated variants
	whyMemory                       // req: variant; a: the node's memory figures in t.figs (see recordMemory) << 2 | pool
	whyGate                         // a: the reason, in t.strs
	whyPerf                         // a: the figure's bits, in t.figs
)

// Fixed details, by index (whyFixed).
const (
	fixedNodeRevoked = iota
	fixedSuspect
	fixedDead
	fixedLivenessUnknown
	fixedFactsExpired
	fixedGateDenied
	fixedNoGate
)

var fixedTexts = [...]string{
	fixedNodeRevoked:     "node is revoked",
	fixedSuspect:         "node is suspect",
	fixedDead:            "node is dead",
	fixedLivenessUnknown: "node liveness is unknown",
	fixedFactsExpired:    "facts expired",
	fixedGateDenied:      "workload.place denied",
	fixedNoGate:          "no gate decision for this node",
}

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
		return "workload ref " + t.strs[w.a] + " is revoked"
	case whyConflict:
		c := &t.conflicts[w.a]
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
			var state string
			if w.a >= 0 {
				state = blockingStates[w.a]
			} else {
				state = t.strs[-1-w.a]
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
		pool, at := w.a&3, w.a>>2
		pendHost, pendAccel := t.figs.at(at), t.figs.at(at+1)
		pending, free := satAdd(pendHost, pendAccel), t.figs.at(at+2)
		switch pool {
		case poolSystem:
			accel, pending = 0, pendHost
		case poolVRAM:
			host, pending, free = 0, pendAccel, t.figs.at(at+3)
		}
		need := satAdd(satAdd(host, accel), pending)
		b := []byte(t.prefix(int32(w.req)))
		b = append(b, poolNames[pool]...)
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
		return "workload.place denied: " + t.strs[w.a]
	case whyPerf:
		return "measured " + t.perfID + " " + formatFloat(math.Float64frombits(t.figs.at(w.a))) + " misses budget " + formatFloat(t.budget)
	default:
		return fixedTexts[w.a]
	}
}

// str keeps s in the decision's strings and returns its index.
func (t *texts) str(s string) int32 {
	t.strs = append(t.strs, s)
	return int32(len(t.strs) - 1)
}

// conflict keeps c in the decision's conflicts and returns its index.
func (t *texts) conflict(c conflict) int32 {
	t.conflicts = append(t.conflicts, c)
	return int32(len(t.conflicts) - 1)
}

// figStore keeps a decision's figures in chunks of a fixed size, so that
// growing copies none; a record of figures is never split across chunks.
type figStore struct {
	chunks [][]uint64
	size   int // of a chunk; at least the largest record
}

// newFigStore returns a figStore sized for a decision over nodes: a
// record or two per node, in chunks of 64 to 4,096.
func newFigStore(nodes int) figStore {
	return figStore{size: min(max(2*nodes, 64), 4096)}
}

// add keeps a record of figures and returns the index of its first.
func (f *figStore) add(figs ...uint64) int32 {
	last := len(f.chunks) - 1
	if last < 0 || len(f.chunks[last])+len(figs) > f.size {
		f.chunks = append(f.chunks, make([]uint64, 0, f.size))
		last++
	}
	at := last*f.size + len(f.chunks[last])
	f.chunks[last] = append(f.chunks[last], figs...)
	return int32(at)
}

// at returns the figure at index i.
func (f *figStore) at(i int32) uint64 { return f.chunks[int(i)/f.size][int(i)%f.size] }

// prefix is "variant <name>: " for variant vi, "" for -1.
func (t *texts) prefix(vi int32) string {
	if vi < 0 {
		return ""
	}
	return "variant " + t.variants[vi] + ": "
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
