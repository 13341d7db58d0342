package plane

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nodeld/nodeld/internal/engine"
	"github.com/nodeld/nodeld/internal/grammar"
)

// Defaults of Config, the original controller's.
const (
	DefaultTick             = 5 * time.Second
	DefaultDeadAfter        = 30 * time.Second
	DefaultRetryBackoff     = 10 * time.Second
	DefaultMaxReschedules   = 5
	DefaultRescheduleWindow = time.Hour
	// DefaultSwapGrace is engine.DefaultEvictPolicy's grace.
	DefaultSwapGrace = 2 * time.Second
	// MaxSwapGrace caps SwapGrace.
	MaxSwapGrace = time.Minute
	// MaxRescheduleWindow caps RescheduleWindow (a week).
	MaxRescheduleWindow      = 168 * time.Hour
	DefaultDescribeTimeout   = 3 * time.Second
	DefaultPlaceTimeout      = 280 * time.Second
	DefaultRescheduleTimeout = 60 * time.Second
	// MaxBackoff caps the doubling reschedule and orphan-unload backoff.
	MaxBackoff = 5 * time.Minute
	// MaxReplicas bounds a declared workload's replicas.
	MaxReplicas = 64
)

// Config is the controller's configuration.
type Config struct {
	// Tick is the period of the lifecycle tick (Run).
	Tick time.Duration
	// DeadAfter is how long a target may go without a verified describe
	// before it counts as dead and its instances are lost.
	DeadAfter time.Duration
	// RetryBackoff is the first wait after a failed reschedule or orphan
	// unload; it doubles per failed attempt up to MaxBackoff.
	RetryBackoff time.Duration
	// MaxReschedules caps the moves of one workload (placed again on
	// another node than the one it was lost on) within RescheduleWindow;
	// past it a lost instance whose node is dead stays put (Capped), with
	// an alert, until a move leaves the window or the operator starts it.
	// A restart on the same node is not a move.
	MaxReschedules int
	// RescheduleWindow is how far back moves count towards
	// MaxReschedules.
	RescheduleWindow time.Duration
	// SwapGrace is the eviction's grace for a recently used on-demand
	// instance (engine.EvictPolicy.Grace); 0 gives none.
	SwapGrace time.Duration
	// DescribeTimeout bounds each describe of a tick, so a dead node
	// cannot stall one.
	DescribeTimeout time.Duration
	// PlaceTimeout bounds one place call of an operator placement;
	// RescheduleTimeout one of a reschedule.
	PlaceTimeout      time.Duration
	RescheduleTimeout time.Duration
	// Weights tune the engine's scoring.
	Weights engine.Weights
	// Policy is governance: default deny.
	Policy Policy
	// Workloads are the declared workloads reconciled every tick.
	Workloads []Workload
}

// Policy is the governance policy. Default deny: a workload kind that is
// not in Kinds is placed nowhere.
type Policy struct {
	// Kinds maps a workload kind to the rule that admits it.
	Kinds map[string]KindRule
	// DenyNodes are node ids that get no workload.
	DenyNodes []string
	// DenyLabels deny every node whose facts carry one of these labels
	// with this value ("*" matches any value).
	DenyLabels map[string]string
}

// KindRule admits a workload kind on nodes of at least MinTier.
type KindRule struct {
	MinTier engine.Trust
}

// Default returns the default configuration: no kind admitted.
func Default() Config {
	return Config{
		Tick:              DefaultTick,
		DeadAfter:         DefaultDeadAfter,
		RetryBackoff:      DefaultRetryBackoff,
		MaxReschedules:    DefaultMaxReschedules,
		RescheduleWindow:  DefaultRescheduleWindow,
		SwapGrace:         DefaultSwapGrace,
		DescribeTimeout:   DefaultDescribeTimeout,
		PlaceTimeout:      DefaultPlaceTimeout,
		RescheduleTimeout: DefaultRescheduleTimeout,
		Weights:           engine.DefaultWeights(),
	}
}

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	pos := func(name string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be positive, got %s", name, d))
		}
	}
	pos("tick", c.Tick)
	pos("dead_after", c.DeadAfter)
	pos("retry_backoff", c.RetryBackoff)
	pos("describe_timeout", c.DescribeTimeout)
	pos("place_timeout", c.PlaceTimeout)
	pos("reschedule_timeout", c.RescheduleTimeout)
	pos("reschedule_window", c.RescheduleWindow)
	if c.SwapGrace < 0 || c.SwapGrace > MaxSwapGrace {
		errs = append(errs, fmt.Errorf("swap_grace: %s outside 0..%s", c.SwapGrace, MaxSwapGrace))
	}
	if c.RescheduleWindow > MaxRescheduleWindow {
		errs = append(errs, fmt.Errorf("reschedule_window: %s is above the %s cap", c.RescheduleWindow, MaxRescheduleWindow))
	}
	if c.Tick > 0 && c.DeadAfter > 0 && c.DeadAfter < c.Tick {
		errs = append(errs, fmt.Errorf("dead_after: %s is shorter than one tick (%s)", c.DeadAfter, c.Tick))
	}
	if c.RetryBackoff > MaxBackoff {
		errs = append(errs, fmt.Errorf("retry_backoff: %s is above the %s cap", c.RetryBackoff, MaxBackoff))
	}
	if c.MaxReschedules < 0 {
		errs = append(errs, fmt.Errorf("max_reschedules: must not be negative, got %d", c.MaxReschedules))
	}
	kinds := make([]string, 0, len(c.Policy.Kinds))
	for k := range c.Policy.Kinds {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		if !grammar.ValidName(k) {
			errs = append(errs, fmt.Errorf("policy.kinds: %q is not a valid kind name", k))
		}
		t := c.Policy.Kinds[k].MinTier
		if t < engine.TrustDiscovered || t > engine.TrustPinned {
			errs = append(errs, fmt.Errorf("policy.kinds.%s.min_tier: must be discovered, paired or pinned", k))
		}
	}
	for i, n := range c.Policy.DenyNodes {
		if n == "" || !grammar.PrintableASCII(n) {
			errs = append(errs, fmt.Errorf("policy.deny_nodes[%d]: %q is not a node id", i, n))
		}
	}
	keys := make([]string, 0, len(c.Policy.DenyLabels))
	for k := range c.Policy.DenyLabels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !grammar.ValidName(k) {
			errs = append(errs, fmt.Errorf("policy.deny_labels: key %q is not a valid label key", k))
		}
		if v := c.Policy.DenyLabels[k]; v != "*" && !grammar.ValidLabelValue(v) {
			errs = append(errs, fmt.Errorf("policy.deny_labels.%s: %q is not a label value", k, v))
		}
	}
	errs = append(errs, validateWorkloads(c.Workloads)...)
	return errors.Join(errs...)
}

// backoff is the wait after the n-th failed attempt (n >= 1): base
// doubling per attempt, capped at MaxBackoff.
func backoff(base time.Duration, n int) time.Duration {
	if n < 1 {
		n = 1
	}
	d := base
	for i := 1; i < n; i++ {
		d *= 2
		if d >= MaxBackoff {
			return MaxBackoff
		}
	}
	return min(d, MaxBackoff)
}
