package table

import "github.com/prometheus/client_golang/prometheus"

// metrics are the table's Prometheus metrics; a nil *metrics records
// nothing.
type metrics struct {
	auditFailures prometheus.Counter
}

// newMetrics registers the table's metrics on reg, reading the generation
// through gen. It returns nil when reg is nil.
func newMetrics(reg prometheus.Registerer, gen func() uint64) *metrics {
	if reg == nil {
		return nil
	}
	m := &metrics{
		auditFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeld_table_audit_failures_total",
			Help: "Audit records of table changes that could not be written.",
		}),
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "nodeld_table_generation",
			Help: "Resolution-relevant changes of the placement table so far.",
		}, func() float64 { return float64(gen()) }),
		m.auditFailures,
	)
	return m
}

func (m *metrics) auditFailed() {
	if m != nil {
		m.auditFailures.Inc()
	}
}
