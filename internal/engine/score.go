package engine

import "math"

// score is phase B (reference 3.6.3): it completes the Score and flags of
// every eligible candidate (phase A gave each its locality and load). Two components compare a node with the other
// survivors (accel_fit with the smallest sufficient accelerator, perf with
// the best measurement), so they are computed once every node has been
// through phase A.
func (p *plan) score(cands []Candidate, eligible []int32) {
	w := p.w
	minCap := math.Inf(1)
	bestPerf, havePerf := 0.0, false
	for _, i := range eligible {
		c := &cands[i]
		if c.Flags&rawAccelAssigned != 0 && c.Score.AccelFit > 0 {
			minCap = min(minCap, c.Score.AccelFit)
		}
		if p.perf != nil && c.Flags&rawHasPerf != 0 {
			perf := c.Score.Perf
			switch {
			case !havePerf:
				bestPerf, havePerf = perf, true
			case p.perf.Better == BetterLower:
				bestPerf = min(bestPerf, perf)
			default:
				bestPerf = max(bestPerf, perf)
			}
		}
	}
	for _, i := range eligible {
		c := &cands[i]
		s := &c.Score
		raw, capacity, perf := c.Flags&rawFlags, s.AccelFit, s.Perf
		c.Flags &^= rawFlags
		s.Execution = w.tierWeight(c.Tier)
		switch {
		case raw&(rawAccelAssigned|rawHasAccel) == 0:
			s.AccelFit = w.AccelFit // work that needs no accelerator, on a node without one
		case raw&rawAccelAssigned == 0:
			s.AccelFit = 0 // don't waste an accelerator
		case capacity <= 0:
			s.AccelFit = w.AccelFit // capacity unknown
		default:
			s.AccelFit = w.AccelFit * (minCap / capacity)
		}
		s.Perf = 0
		if p.perf != nil {
			if raw&rawHasPerf != 0 {
				s.Perf = p.perfMul * perfRatio(p.perf.Better, perf, bestPerf)
			} else {
				c.Flags |= FlagUnmeasured
			}
		}
		if p.req.CurrentNode != "" && c.Node == p.req.CurrentNode {
			if p.req.Sticky {
				s.Stickiness = w.Sticky
			} else {
				s.Stickiness = w.Stickiness
			}
		}
		s.Total = s.Execution + s.Locality + s.AccelFit + s.Perf + s.Load + s.Stickiness
	}
}

// perfRatio is how close v comes to the best passing value, 0 to 1.
func perfRatio(better Better, v, best float64) float64 {
	if v == best {
		return 1
	}
	var r float64
	if better == BetterLower {
		r = best / v
	} else {
		r = v / best
	}
	if math.IsNaN(r) {
		return 0
	}
	return min(max(r, 0), 1)
}
