package dispatch

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the dispatcher's metrics. Labels are bounded: method names,
// outcome classes, artifact results.
type metrics struct {
	calls           *prometheus.CounterVec
	duration        *prometheus.HistogramVec
	offers          prometheus.Gauge
	artifactStreams *prometheus.CounterVec
	artifactBytes   prometheus.Counter
	staleTerms      prometheus.Counter
}

// newMetrics builds the metrics and registers them on reg (nil: kept, not
// exported); a registration error (a name taken) is returned.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_dispatch_calls_total",
			Help: "workload.ctl calls sent, by method and outcome (ok, refused, unreachable, indeterminate, invalid).",
		}, []string{"method", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodeld_dispatch_call_duration_seconds",
			Help:    "Duration of workload.ctl calls sent, by method.",
			Buckets: []float64{.001, .005, .02, .1, .5, 2, 10, 60, 300},
		}, []string{"method"}),
		offers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeld_dispatch_offers_in_flight",
			Help: "Packages offered to hosts by place calls in flight.",
		}),
		artifactStreams: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_dispatch_artifact_streams_total",
			Help: "Artifact fetch streams served, by result (served, a refusal code, malformed, error, cancelled, busy: no slot in time).",
		}, []string{"result"}),
		artifactBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeld_dispatch_artifact_sent_bytes_total",
			Help: "Package file bytes sent to fetching hosts.",
		}),
		staleTerms: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeld_dispatch_stale_term_refusals_total",
			Help: "Calls a host refused stale_term: it had seen a higher controller term than the call carried (this controller was deposed).",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.calls, m.duration, m.offers, m.artifactStreams, m.artifactBytes, m.staleTerms} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register dispatch metrics: %w", err)
		}
	}
	return m, nil
}
