package engine

import (
	"errors"
	"fmt"
	"math"

	"github.com/nodeld/nodeld/internal/grammar"
)

// DefaultDevFallbackClass is the capability id that marks a development
// machine (a laptop): native work placed there ranks in the dev_fallback
// tier, below emulation on a real target.
const DefaultDevFallbackClass = "node.class.dev-mac"

// Weights tune phase B scoring (reference 3.6.3). They order candidates
// within a tier only: no weight lifts a lower tier over a higher one.
type Weights struct {
	// Native, Emulated and DevFallback are the execution score of each
	// tier.
	Native      float64
	Emulated    float64
	DevFallback float64
	// DevFallbackClass is the capability id marking a dev machine; empty
	// means no node is one.
	DevFallbackClass string
	// AccelFit rewards the smallest sufficient accelerator, and nodes
	// without accelerators for work that needs none.
	AccelFit float64
	// Perf rewards the best measured performance (Request.Perf).
	Perf float64
	// InteractivePerfMultiplier multiplies Perf for interactive workloads.
	InteractivePerfMultiplier float64
	// Load rewards idle capabilities: Load × (1 − load).
	Load float64
	// Stickiness is the bonus of the current node; Sticky replaces it for
	// sticky workloads.
	Stickiness float64
	Sticky     float64
}

// DefaultWeights returns the reference weights: native 100, emulated 40,
// dev_fallback 20, accel_fit 10, perf 30 (×2 interactive), load 10,
// stickiness 15, sticky 1000.
func DefaultWeights() Weights {
	return Weights{
		Native:                    100,
		Emulated:                  40,
		DevFallback:               20,
		DevFallbackClass:          DefaultDevFallbackClass,
		AccelFit:                  10,
		Perf:                      30,
		InteractivePerfMultiplier: 2,
		Load:                      10,
		Stickiness:                15,
		Sticky:                    1000,
	}
}

// Validate reports every weight that is not finite and non-negative, and a
// DevFallbackClass that is not a capability id.
func (w Weights) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"native", w.Native},
		{"emulated", w.Emulated},
		{"dev_fallback", w.DevFallback},
		{"accel_fit", w.AccelFit},
		{"perf", w.Perf},
		{"interactive_perf_multiplier", w.InteractivePerfMultiplier},
		{"load", w.Load},
		{"stickiness", w.Stickiness},
		{"sticky", w.Sticky},
	} {
		if !finiteNonNegative(f.v) {
			errs = append(errs, fmt.Errorf("weight %s: %v is not a finite number >= 0", f.name, f.v))
		}
	}
	if w.DevFallbackClass != "" && !grammar.ValidCapabilityID(w.DevFallbackClass) {
		errs = append(errs, fmt.Errorf("weight dev_fallback_class: %q is not a capability id", w.DevFallbackClass))
	}
	return errors.Join(errs...)
}

func finiteNonNegative(f float64) bool {
	return !math.IsNaN(f) && !math.IsInf(f, 0) && f >= 0
}

// tierWeight is the execution score of a tier.
func (w Weights) tierWeight(t Tier) float64 {
	switch t {
	case TierNative:
		return w.Native
	case TierEmulated:
		return w.Emulated
	default:
		return w.DevFallback
	}
}
