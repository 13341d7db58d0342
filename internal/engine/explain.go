package engine

import (
	"strconv"
	"strings"
)

// Explain renders the decision in the reference format (3.6.5): the
// request, the tier order, the decision, then every candidate: the
// eligible ones with their rank, route, score and its breakdown, the
// rejected ones with every constraint they fail. Scores have two
// decimals. It is computed on demand, apart from Place.
//
//	workload <name> (kind <kind>)
//	  allow_emulated: <bool>   pin: <pin or ->
//	  tier order (strict): native > emulated > dev_fallback (candidates rank by tier, then score)
//	decision: PLACED on <node> via <variant> (tier <tier>, emulated <bool>) score <t>[, accelerator <id>]
//	decision: UNPLACEABLE (no eligible node)
//	decision: UNPLACEABLE (pinned node <pin> is not eligible)
//	candidates:
//	  <rank>. <node> eligible via <variant> (tier <tier>) score <t>[ [flag, flag]]
//	       execution <e> + locality <l> + accel_fit <a> + perf <p> + load <d> + stickiness <s>
//	  -  <node> rejected
//	       <constraint>: <detail>
func (d Decision) Explain() string {
	var b strings.Builder
	b.Grow(256 + 160*len(d.Candidates))
	pin := d.Pin
	if pin == "" {
		pin = "-"
	}
	b.WriteString("workload ")
	b.WriteString(d.Name)
	b.WriteString(" (kind ")
	b.WriteString(d.Kind)
	b.WriteString(")\n  allow_emulated: ")
	b.WriteString(strconv.FormatBool(d.AllowEmulated))
	b.WriteString("   pin: ")
	b.WriteString(pin)
	b.WriteString("\n  tier order (strict): native > emulated > dev_fallback (candidates rank by tier, then score)\n")
	if c := d.Chosen; c != nil {
		b.WriteString("decision: PLACED on ")
		b.WriteString(c.Node)
		b.WriteString(" via ")
		b.WriteString(c.Variant)
		b.WriteString(" (tier ")
		b.WriteString(c.Tier.String())
		b.WriteString(", emulated ")
		b.WriteString(strconv.FormatBool(c.Execution == Emulated))
		b.WriteString(") score ")
		b.WriteString(score2(c.Score.Total))
		if c.Accelerator != "" {
			b.WriteString(", accelerator ")
			b.WriteString(c.Accelerator)
		}
		b.WriteByte('\n')
	} else if pinRejected(d) {
		// Place returned a *PinIneligibleError with this decision: other
		// nodes may be eligible, but the pin is not.
		b.WriteString("decision: UNPLACEABLE (pinned node ")
		b.WriteString(d.Pin)
		b.WriteString(" is not eligible)\n")
	} else {
		b.WriteString("decision: UNPLACEABLE (no eligible node)\n")
	}
	b.WriteString("candidates:\n")
	rank := 0
	for _, c := range d.Candidates {
		if !c.Eligible() {
			b.WriteString("  -  ")
			b.WriteString(c.Node)
			b.WriteString(" rejected\n")
			for _, r := range c.Rejections {
				b.WriteString("       ")
				b.WriteString(string(r.Code))
				b.WriteString(": ")
				b.WriteString(r.Detail())
				b.WriteByte('\n')
			}
			continue
		}
		rank++
		s := c.Score
		b.WriteString("  ")
		b.WriteString(strconv.Itoa(rank))
		b.WriteString(". ")
		b.WriteString(c.Node)
		b.WriteString(" eligible via ")
		b.WriteString(c.Variant)
		b.WriteString(" (tier ")
		b.WriteString(c.Tier.String())
		b.WriteString(") score ")
		b.WriteString(score2(s.Total))
		if c.Flags != 0 {
			b.WriteString(" [")
			b.WriteString(strings.Join(c.Flags.Names(), ", "))
			b.WriteByte(']')
		}
		b.WriteString("\n       execution ")
		b.WriteString(score2(s.Execution))
		b.WriteString(" + locality ")
		b.WriteString(score2(s.Locality))
		b.WriteString(" + accel_fit ")
		b.WriteString(score2(s.AccelFit))
		b.WriteString(" + perf ")
		b.WriteString(score2(s.Perf))
		b.WriteString(" + load ")
		b.WriteString(score2(s.Load))
		b.WriteString(" + stickiness ")
		b.WriteString(score2(s.Stickiness))
		b.WriteByte('\n')
	}
	return b.String()
}

// pinRejected reports whether the decision's pin names a rejected node.
func pinRejected(d Decision) bool {
	if d.Pin == "" {
		return false
	}
	for _, c := range d.Candidates {
		if c.Node == d.Pin {
			return !c.Eligible()
		}
	}
	return false
}

func score2(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) }
