package plane

// This file adds to a decision's explanation what the engine's text does
// not say: the order's prefer and avoid, which of them made the choice
// (the node was preferred, or the better-ranked ones were avoided), the
// measured figures behind each perf score, and how equal scores are
// ordered.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/pkg"
)

// tieBreakNote is how the engine orders candidates of equal tier and
// score (engine.Decision: by node id).
const tieBreakNote = "ties: candidates of equal tier and score rank by node id, lowest first; a pin, then prefer, then avoid choose among the best tier's candidates"

// explainNotes are the lines Report.Explain adds after the engine's
// explanation for a decision on order o of package m, chained with the
// decision; the tie-break rule (tieBreakNote), the same for every
// decision, follows them and is not chained.
func (c *reconciler) explainNotes(m *pkg.Manifest, o Order, dec engine.Decision) []string {
	var notes []string
	if len(o.Prefer) > 0 || len(o.Avoid) > 0 {
		notes = append(notes, "prefer: "+listOrDash(o.Prefer)+"   avoid: "+listOrDash(o.Avoid))
	}
	if ch := dec.Chosen; ch != nil && o.Pin == "" && len(dec.Candidates) > 0 {
		best := dec.Candidates[0].Node
		switch {
		case ch.Flags&engine.FlagAffinity != 0 && slices.Contains(o.Prefer, ch.Node):
			notes = append(notes, fmt.Sprintf("affinity: %s chosen because it is preferred (the best-ranked is %s)", ch.Node, best))
		case ch.Flags&engine.FlagAffinity != 0:
			var avoided []string
			for _, cd := range dec.Candidates {
				if cd.Node == ch.Node {
					break
				}
				avoided = append(avoided, cd.Node)
			}
			notes = append(notes, fmt.Sprintf("affinity: %s chosen because the better-ranked %s avoided", ch.Node, isAre(avoided)))
		case slices.Contains(o.Prefer, ch.Node):
			notes = append(notes, fmt.Sprintf("affinity: %s is the best-ranked and preferred; no hint changed the choice", ch.Node))
		case len(o.Prefer) > 0 || len(o.Avoid) > 0:
			notes = append(notes, fmt.Sprintf("affinity: no hint applied; %s is the best-ranked", ch.Node))
		}
	}
	if t := m.PerfTarget; t != nil {
		notes = append(notes, c.perfNote(t, dec))
	}
	return notes
}

// perfNote is the measured figure behind each eligible candidate's perf
// score: the best measured value of the target's capability on the
// node's facts, as the engine takes it.
func (c *reconciler) perfNote(t *pkg.PerfTarget, dec engine.Decision) string {
	what := t.ID
	if t.Param != "" {
		what += " " + t.Param + "=" + valueText(t.ParamValue)
	}
	better := "lower"
	if t.Better == grammar.PerfBetterHigher {
		better = "higher"
	}
	var parts []string
	c.mu.Lock()
	for _, cd := range dec.Candidates {
		if !cd.Eligible() {
			continue
		}
		v, ok := c.measuredLocked(cd.Node, t)
		if !ok {
			parts = append(parts, cd.Node+" unmeasured")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s measured %s (perf score %s)", cd.Node, strconv.FormatFloat(v, 'f', -1, 64),
			strconv.FormatFloat(cd.Score.Perf, 'f', 2, 64)))
	}
	c.mu.Unlock()
	if len(parts) == 0 {
		parts = append(parts, "no eligible node")
	}
	return fmt.Sprintf("perf: %s (%s is better): %s", what, better, strings.Join(parts, "; "))
}

// measuredLocked is node's best measured value of perf target t in its
// cached facts; the caller holds mu.
func (c *reconciler) measuredLocked(node string, t *pkg.PerfTarget) (float64, bool) {
	n := c.nodes[node]
	if n == nil || n.facts == nil {
		return 0, false
	}
	best, have := 0.0, false
	for _, cp := range n.facts.facts.Capabilities {
		if cp.ID != t.ID || cp.Provenance != grammar.ProvenanceMeasured {
			continue
		}
		if t.Param != "" {
			if pv, ok := cp.Attr(t.Param); !ok || !pv.Equal(t.ParamValue) {
				continue
			}
		}
		av, ok := cp.Attr("value")
		if !ok {
			continue
		}
		f, ok := av.Number()
		if !ok {
			continue
		}
		switch {
		case !have:
			best, have = f, true
		case t.Better == grammar.PerfBetterHigher:
			best = max(best, f)
		default:
			best = min(best, f)
		}
	}
	return best, have
}

func valueText(v grammar.Value) string {
	if s, ok := v.Str(); ok {
		return s
	}
	if f, ok := v.Number(); ok {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return "?"
}

func listOrDash(ss []string) string {
	if len(ss) == 0 {
		return "-"
	}
	return strings.Join(ss, ", ")
}

// isAre is "a is" or "a, b are".
func isAre(ss []string) string {
	if len(ss) == 1 {
		return ss[0] + " is"
	}
	return strings.Join(ss, ", ") + " are"
}
