package host

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodeld/nodeld/internal/ctl"
)

// metrics are the host's metrics. Label values are bounded: method names
// (the eight, or "other"), result classes and refusal codes.
type metrics struct {
	calls         *prometheus.CounterVec
	fetchBytes    prometheus.Counter
	fetchResumes  prometheus.Counter
	restarts      prometheus.Counter
	failures      *prometheus.CounterVec
	teardowns     prometheus.Counter
	auditFailures prometheus.Counter
	drainsCut     prometheus.Counter
	notices       *prometheus.CounterVec
	replays       *prometheus.CounterVec
	// terms is the highest controller term seen, by set (termSetLabel):
	// at most MaxTermSets label values.
	terms             *prometheus.GaugeVec
	termWriteFailures prometheus.Counter
}

// failureReasons are the reasons an instance enters failed
// (nodeld_host_instance_failures_total); stateReason maps every other
// cause of a supervisor's failure to one of them.
var failureReasons = []string{ctl.ReasonRestartBudget, ctl.ReasonNotLoopback, ctl.ReasonStartFailed, ctl.ReasonRollback}

// How a replay of the notice log to a peer ended
// (nodeld_host_notice_replays_total).
const (
	replayComplete = "complete"
	replayStopped  = "stopped"
)

// Results of a received notice (nodeld_host_notices_total).
const (
	noticeApplied = "applied"
	noticeStale   = "stale"
	noticeRefused = "refused"
	noticeError   = "error"
)

func newMetrics(reg prometheus.Registerer, instances func() float64) (*metrics, error) {
	m := &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_host_ctl_calls_total",
			Help: "workload.ctl calls served, by method and result (ok or the refusal code).",
		}, []string{"method", "result"}),
		fetchBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeld_host_fetch_bytes_total",
			Help: "Package bytes fetched and verified piece by piece.",
		}),
		fetchResumes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeld_host_fetch_resumes_total",
			Help: "Artifact streams resumed after a drop or a damaged piece.",
		}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeld_host_instance_restarts_total",
			Help: "Supervised restarts of instances.",
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_host_instance_failures_total",
			Help: "Instances that entered failed, by reason (restart_budget, not_loopback, start_failed, rollback).",
		}, []string{"reason"}),
		teardowns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeld_host_revocation_teardowns_total",
			Help: "Instances torn down because a subject they carry was revoked.",
		}),
		auditFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeld_host_audit_failures_total",
			Help: "Chain records that could not be written.",
		}),
		drainsCut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeld_host_stop_drain_timeouts_total",
			Help: "Stops and unloads whose instance still had requests in flight when its drain grace ran out (they were cut).",
		}),
		notices: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_host_notices_total",
			Help: "Signed revocation notices received, by result (applied, stale, refused, error).",
		}, []string{"result"}),
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_host_notice_replays_total",
			Help: "Replays of the notice log to a peer whose link came up, by how they ended (complete; stopped: the link went or a send failed).",
		}, []string{"result"}),
		terms: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodeld_host_controller_term",
			Help: "The highest raft term this host has seen from a set of its controllers (set: the first 16 hex of the set's id); a call with a lower one is refused stale_term.",
		}, []string{"set"}),
		termWriteFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeld_host_term_write_failures_total",
			Help: "Raised controller terms that could not be written to the data directory (place, load and start are refused until one is).",
		}),
	}
	for _, r := range []string{noticeApplied, noticeStale, noticeRefused, noticeError} {
		m.notices.WithLabelValues(r)
	}
	for _, r := range []string{replayComplete, replayStopped} {
		m.replays.WithLabelValues(r)
	}
	for _, r := range failureReasons {
		m.failures.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.calls, m.fetchBytes, m.fetchResumes, m.restarts, m.failures, m.teardowns, m.auditFailures, m.drainsCut, m.notices, m.replays, m.terms, m.termWriteFailures,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "nodeld_host_instances",
			Help: "Instances listed by the host (loaded, running, stopped or failed).",
		}, instances),
	} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register host metrics: %w", err)
		}
	}
	return m, nil
}
