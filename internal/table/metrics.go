package table

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the table's Prometheus metrics. They exist from New on and
// are exported once Register put them on a registry.
type metrics struct {
	auditFailures prometheus.Counter
	generation    prometheus.GaugeFunc
}

// newMetrics builds the table's metrics, reading the generation through
// gen. It registers nothing.
func newMetrics(gen func() uint64) *metrics {
	return &metrics{
		auditFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeld_table_audit_failures_total",
			Help: "Audit records of table changes that could not be written.",
		}),
		generation: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "nodeld_table_generation",
			Help: "Resolution-relevant changes of the placement table so far.",
		}, func() float64 { return float64(gen()) }),
	}
}

// Register puts the table's metrics on reg. A name already taken is an
// error, never a panic (the convention of every component).
func (t *Table) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{t.metrics.generation, t.metrics.auditFailures} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register table metrics: %w", err)
		}
	}
	return nil
}

func (m *metrics) auditFailed() { m.auditFailures.Inc() }
