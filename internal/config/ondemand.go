package config

import (
	"strconv"
	"time"
)

// OnDemand is controller.workloads[].on_demand: a declared workload that
// runs no instance until a request needs it, up to its replicas, and is
// unloaded again when idle. The controller's own node may always demand
// it; other nodes only when listed in DemandFrom (default deny).
type OnDemand struct {
	// Enabled makes the workload on demand; false (the default) keeps
	// today's behaviour, its replicas placed all the time. The other keys
	// may be set only with it.
	Enabled bool `yaml:"enabled"`
	// IdleAfter unloads an instance that served no request this long
	// (measured where it is served, peers' requests included; never one
	// with a request in flight).
	IdleAfter Duration `yaml:"idle_after"`
	// MinResidency is how long an instance stays after it became ready
	// before it may be idled or evicted; at most IdleAfter.
	MinResidency Duration `yaml:"min_residency"`
	// MaxWait bounds how long a request may wait for an instance to
	// start before it gets 503 with Retry-After.
	MaxWait Duration `yaml:"max_wait"`
	// DemandFrom are the nodes (self, node.name, peer names or node ids,
	// resolved as the workload's node is) whose requests may start the
	// workload, besides the controller's own node.
	DemandFrom []string `yaml:"demand_from"`
	// EvictCost is the operator's cost of unloading an idle instance to
	// make room for another (higher is kept longer); 0 lets the
	// controller weigh the measured load time and recency alone.
	EvictCost int `yaml:"evict_cost"`
}

// Defaults of controller.workloads[].on_demand, applied to each key a
// file leaves out.
const (
	// DefaultIdleAfter is on_demand.idle_after: Ollama's keep_alive.
	DefaultIdleAfter = 5 * time.Minute
	// DefaultMinResidency is on_demand.min_residency.
	DefaultMinResidency = 30 * time.Second
	// DefaultOnDemandMaxWait is on_demand.max_wait: long enough for a
	// large model to load from disk.
	DefaultOnDemandMaxWait = 2 * time.Minute
)

// Bounds of controller.workloads[].on_demand.
const (
	// MaxIdleAfter caps on_demand.idle_after (a week); an instance that
	// should never idle is not on demand.
	MaxIdleAfter = 168 * time.Hour
	// MaxOnDemandWait caps on_demand.max_wait: the proxy's longest
	// request (inference.limits.request_timeout's default).
	MaxOnDemandWait = 15 * time.Minute
	// MaxEvictCost caps on_demand.evict_cost.
	MaxEvictCost = 1_000_000
	// MaxDemandFrom caps on_demand.demand_from.
	MaxDemandFrom = 256
)

// onDemandKeys are the keys of on_demand other than enabled, in file
// order.
var onDemandKeys = []string{"idle_after", "min_residency", "max_wait", "demand_from", "evict_cost"}

// onDemandDefaults gives an on-demand workload i's durations the file
// left out their defaults (an explicit null stays zero, for Validate to
// refuse). A workload that is not on demand keeps the zero OnDemand.
func (c *Config) onDemandDefaults(i int) {
	base := "controller.workloads[" + strconv.Itoa(i) + "].on_demand."
	od := &c.Controller.Workloads[i].OnDemand
	if !od.Enabled {
		return
	}
	for _, d := range []struct {
		key string
		dst *Duration
		def time.Duration
	}{
		{"idle_after", &od.IdleAfter, DefaultIdleAfter},
		{"min_residency", &od.MinResidency, DefaultMinResidency},
		{"max_wait", &od.MaxWait, DefaultOnDemandMaxWait},
	} {
		if _, set := c.lines[base+d.key]; !set {
			*d.dst = Duration{D: d.def}
		}
	}
}

// onDemand checks one workload's on_demand.
func (v *validator) onDemand(path string, od OnDemand) {
	if !od.Enabled {
		// Settings of a workload that is not on demand would do nothing:
		// refuse them rather than let the operator believe they hold.
		for _, k := range onDemandKeys {
			if _, set := v.c.lines[path+"."+k]; set {
				v.addf(path+"."+k, "is set but on_demand.enabled is not true: the workload is placed all the time and this key would do nothing; add enabled: true or remove it")
			}
		}
		return
	}
	v.positive(path+".idle_after", od.IdleAfter)
	v.atMost(path+".idle_after", od.IdleAfter, MaxIdleAfter)
	v.positive(path+".min_residency", od.MinResidency)
	v.positive(path+".max_wait", od.MaxWait)
	v.atMost(path+".max_wait", od.MaxWait, MaxOnDemandWait)
	if od.IdleAfter.Valid() && od.MinResidency.Valid() && od.IdleAfter.D > 0 && od.MinResidency.D > od.IdleAfter.D {
		if _, set := v.c.lines[path+".min_residency"]; set || v.c.lines == nil {
			v.addf(path+".min_residency", "%s is longer than on_demand.idle_after (%s): an idle instance would outstay its idle_after", od.MinResidency, od.IdleAfter)
		} else {
			v.addf(path+".min_residency", "the default %s is longer than on_demand.idle_after (%s): set min_residency to at most idle_after", od.MinResidency, od.IdleAfter)
		}
	}
	if od.EvictCost < 0 || od.EvictCost > MaxEvictCost {
		v.addf(path+".evict_cost", "%d is out of range: use 0 (weigh measured load time and recency) to %d", od.EvictCost, MaxEvictCost)
	}
	if len(od.DemandFrom) > MaxDemandFrom {
		v.addf(path+".demand_from", "%d entries is more than the limit of %d", len(od.DemandFrom), MaxDemandFrom)
		return
	}
	v.nodeRefs(path+".demand_from", od.DemandFrom)
}
