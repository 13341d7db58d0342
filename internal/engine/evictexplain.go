package engine

import (
	"strconv"
	"strings"
	"time"
)

// Lines explains the eviction, one line each, for people and the audit
// chain: the decision, then every target node with its verdict, then
// every instance on them: each evicted one with its cost and why it
// costs that, each kept one with why.
//
//	evict for <kind>/<name>: waited <d>
//	decision: NOT NEEDED: fits on <node> via <variant>
//	decision: EVICT <n> on <node> via <variant>, cost <d>
//	decision: CANNOT FIT (<reason>)[, retry at <time>]
//	node <rank>. <node> via <variant>: <verdict>[ <ids>, cost <d> (exact|greedy)][; to free host <b> accel <b> bytes, evictable instances free host <b> accel <b>]
//	  evict <id> (<kind>/<workload>) on <node>: cost <d> (evict_cost <n>s | load <d>, idle <d>)
//	  keep <id> (<kind>/<workload>) on <node>: <code>[: why]
//	  spare <id> (<kind>/<workload>) on <node>: cost <d>, not needed
func (e Eviction) Lines() []string {
	lines := make([]string, 0, 2+len(e.Nodes)+len(e.Residents))
	lines = append(lines, "evict for "+e.Kind+"/"+e.Name+": waited "+dur(e.Waited))
	switch e.Outcome {
	case EvictNotNeeded:
		lines = append(lines, "decision: NOT NEEDED: fits on "+e.Node+" via "+e.Variant)
	case EvictChosen:
		lines = append(lines, "decision: EVICT "+strconv.Itoa(len(e.Evict))+" on "+e.Node+" via "+e.Variant+", cost "+dur(e.Cost))
	default:
		l := "decision: CANNOT FIT (" + string(e.Reason) + ")"
		if !e.RetryAt.IsZero() {
			l += ", retry at " + e.RetryAt.UTC().Format(time.RFC3339Nano)
		}
		lines = append(lines, l)
	}
	for _, n := range e.Nodes {
		var b strings.Builder
		b.WriteString("node ")
		b.WriteString(strconv.Itoa(n.Rank))
		b.WriteString(". ")
		b.WriteString(n.Node)
		b.WriteString(" via ")
		b.WriteString(n.Variant)
		b.WriteString(": ")
		b.WriteString(string(n.Verdict))
		if n.Verdict == NodeEvict {
			b.WriteString(" ")
			b.WriteString(strings.Join(n.Set, ", "))
			b.WriteString(", cost ")
			b.WriteString(dur(n.Cost))
			if n.Exact {
				b.WriteString(" (exact)")
			} else {
				b.WriteString(" (greedy)")
			}
		}
		if n.Need != (Resources{}) {
			b.WriteString("; to free host ")
			b.WriteString(strconv.FormatUint(n.Need.HostBytes, 10))
			b.WriteString(" accel ")
			b.WriteString(strconv.FormatUint(n.Need.AccelBytes, 10))
			b.WriteString(" bytes, evictable instances free host ")
			b.WriteString(strconv.FormatUint(n.Freeable.HostBytes, 10))
			b.WriteString(" accel ")
			b.WriteString(strconv.FormatUint(n.Freeable.AccelBytes, 10))
		}
		lines = append(lines, b.String())
	}
	for _, v := range e.Residents {
		name := v.ID + " (" + v.Kind + "/" + v.Workload + ") on " + v.Node + ": "
		switch {
		case v.Evicted:
			lines = append(lines, "  evict "+name+"cost "+dur(v.Cost)+" ("+v.costWhy()+")")
		case v.Keep != "":
			lines = append(lines, "  keep "+name+string(v.Keep)+v.keepWhy())
		default:
			lines = append(lines, "  spare "+name+"cost "+dur(v.Cost)+" ("+v.costWhy()+"), not needed")
		}
	}
	return lines
}

// Explain is Lines, one per line.
func (e Eviction) Explain() string { return strings.Join(e.Lines(), "\n") + "\n" }

func (v *ResidentVerdict) costWhy() string {
	if v.evictCost > 0 {
		return "evict_cost " + strconv.Itoa(v.evictCost) + "s"
	}
	load := "load " + dur(v.load)
	if v.load == 0 {
		load = "load unmeasured"
	}
	return load + ", idle " + dur(v.idle)
}

func (v *ResidentVerdict) keepWhy() string {
	switch v.Keep {
	case KeepInFlight:
		return ": " + strconv.Itoa(v.inFlight) + " in flight"
	case KeepMinResidency:
		return ": ready " + dur(v.since) + " ago, min_residency " + dur(v.minRes)
	case KeepRecentRequest:
		return ": last request " + dur(v.idle) + " ago, kept until " + v.Until.UTC().Format(time.RFC3339Nano)
	case KeepSameWorkload:
		return ": the demanded workload's own instance"
	case KeepNotOnDemand:
		return ": its workload is not on demand"
	case KeepStarting:
		return ": not ready yet"
	}
	return ""
}

func dur(d time.Duration) string { return d.Round(time.Millisecond).String() }
