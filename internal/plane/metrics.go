package plane

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the nodeld_plane_* metrics.
type metrics struct {
	placements *prometheus.CounterVec
	dispatches *prometheus.CounterVec
	reschedule *prometheus.CounterVec
	nodes      *prometheus.GaugeVec
	unsettled  prometheus.Gauge
	// declarations counts the declared workloads by state (declview.go).
	declarations *prometheus.GaugeVec
	// capped and restarts: moves.go, failed.go.
	capped   prometheus.Gauge
	restarts *prometheus.CounterVec
	tick     prometheus.Histogram
	// On-demand workloads (ondemand.go), by workload name (bounded by
	// the config), and demands by outcome.
	coldStarts  *prometheus.CounterVec
	idleUnloads *prometheus.CounterVec
	evictions   *prometheus.CounterVec
	demands     *prometheus.CounterVec
}

// Outcome label values.
const (
	outPlaced      = "placed"
	outUnplaceable = "unplaceable"
	outDryRun      = "dry_run"
	outExhausted   = "exhausted"
	outUnsettled   = "unsettled"
	outError       = "error"
	outRefused     = "refused"
	outUnreachable = "unreachable"
	outIndeterm    = "indeterminate"
	outAdopted     = "adopted"
	outFailed      = "failed"
	outBlocked     = "blocked"
	// outSkipped is a candidate not tried: another instance of the
	// workload is there now.
	outSkipped = "skipped"
)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		placements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_plane_placements_total",
			Help: "Placement decisions by outcome: placed, unplaceable, dry_run, exhausted, unsettled, error.",
		}, []string{"outcome"}),
		dispatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_plane_dispatch_attempts_total",
			Help: "Place calls by outcome: placed, refused, unreachable, indeterminate, adopted, error.",
		}, []string{"outcome"}),
		reschedule: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_plane_reschedules_total",
			Help: "Reschedules of lost instances by outcome: placed, failed, blocked.",
		}, []string{"outcome"}),
		nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodeld_plane_nodes",
			Help: "Targets by liveness: alive, suspect, dead.",
		}, []string{"liveness"}),
		unsettled: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeld_plane_unsettled_decisions",
			Help: "Decisions whose place went without an answer and are not reconciled yet.",
		}),
		declarations: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodeld_plane_declarations",
			Help: "Declared workloads by state: placed, pending, unplaceable.",
		}, []string{"state"}),
		capped: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeld_plane_capped_placements",
			Help: "Lost placements not placed again: moved max_reschedules times within reschedule_window.",
		}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_plane_instance_restarts_total",
			Help: "Starts the controller sent for failed instances, by outcome: started, failed.",
		}, []string{"outcome"}),
		tick: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "nodeld_plane_tick_duration_seconds",
			Help:    "Duration of one lifecycle tick.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}),
		coldStarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_plane_cold_starts_total",
			Help: "Instances of on-demand workloads placed from cold (on a demand), by workload.",
		}, []string{"workload"}),
		idleUnloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_plane_idle_unloads_total",
			Help: "Instances of on-demand workloads unloaded after idle_after without a request, by workload.",
		}, []string{"workload"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_plane_evictions_total",
			Help: "Idle on-demand instances unloaded to make room for another workload, by the workload evicted.",
		}, []string{"workload"}),
		demands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_plane_demands_total",
			Help: "Demands of on-demand workloads by outcome: accepted, held (already wanted), unknown_role, demand_not_allowed.",
		}, []string{"outcome"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.placements, m.dispatches, m.reschedule, m.nodes, m.unsettled, m.declarations, m.capped, m.restarts, m.tick, m.coldStarts, m.idleUnloads, m.evictions, m.demands} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register plane metrics: %w", err)
		}
	}
	return m, nil
}
