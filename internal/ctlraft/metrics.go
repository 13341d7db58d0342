package ctlraft

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the replicated store's.
type metrics struct {
	leaderChanges prometheus.Counter
	term          prometheus.Gauge
	leader        prometheus.Gauge
	save          prometheus.Histogram
	logEntries    prometheus.Gauge
	snapshotAge   prometheus.Gauge
	stateBytes    prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeld_ctlraft_leader_changes_total",
			Help: "Leader changes this controller observed (a new leader, or none).",
		}),
		term: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeld_ctlraft_term",
			Help: "The current raft term as this controller knows it.",
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeld_ctlraft_is_leader",
			Help: "1 while this controller is the raft leader, else 0.",
		}),
		save: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "nodeld_ctlraft_commit_apply_seconds",
			Help:    "Time from a state change handed to raft on the leader to its commit by a majority and its apply.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5},
		}),
		logEntries: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeld_ctlraft_log_entries",
			Help: "Raft log entries since the last snapshot on this controller.",
		}),
		snapshotAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeld_ctlraft_snapshot_age_seconds",
			Help: "Time since this controller last took or restored a snapshot (since its start when none).",
		}),
		stateBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeld_ctlraft_last_entry_bytes",
			Help: "Size of the last state change this controller saved.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.leaderChanges, m.term, m.leader, m.save, m.logEntries, m.snapshotAge, m.stateBytes} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
