package engine

import "math"

// score is phase B (reference 3.6.3): it completes the Score and flags of
// every eligible candidate (phase A gave each its locality and load). Two components compare a node with the other
// survivors (accel_fit with the smallest sufficient accelerator, perf with
// the best measurement), so they are computed once every node has been
// through phase A.
func (p *plan) score(cands []Candidate, eligible []raw) {
	w := p.w
	minCap := math.Inf(1)
	bestPerf, havePerf := 0.0, false
	for i := range eligible {
		r := &eligible[i]
		if r.flags&rawAccelAssigned != 0 && r.capacity > 0 {
			minCap = min(minCap, r.capacity)
		}
		if p.perf != nil && r.flags&rawHasPerf != 0 {
			switch {
			case !havePerf:
				bestPerf, havePerf = r.perf, true
			case p.perf.Better == BetterLower:
				bestPerf = min(bestPerf, r.perf)
			default:
				bestPerf = max(bestPerf, r.perf)
			}
		}
	}
	for i := range eligible {
		r := &eligible[i]
		c := &cands[r.cand]
		s := &c.Score
		s.Execution = w.tierWeight(c.Tier)
		switch {
		case r.flags&(rawAccelAssigned|rawHasAccel) == 0:
			s.AccelFit = w.AccelFit // work that needs no accelerator, on a node without one
		case r.flags&rawAccelAssigned == 0:
			s.AccelFit = 0 // don't waste an accelerator
		case r.capacity <= 0:
			s.AccelFit = w.AccelFit // capacity unknown
		default:
			s.AccelFit = w.AccelFit * (minCap / r.capacity)
		}
		if p.perf != nil {
			if r.flags&rawHasPerf != 0 {
				s.Perf = p.perfMul * perfRatio(p.perf.Better, r.perf, bestPerf)
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
