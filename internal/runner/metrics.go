package runner

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// adopterMetrics are the Adopter's metrics. Label values come from the
// validated config only (role tokens, loopback host:port, Health values), so
// every label set is bounded by maxAdoptedInstances.
type adopterMetrics struct {
	// up is 1 while the instance's last probe found it up, else 0.
	up *prometheus.GaugeVec
	// probes counts probes by role and result: the Health found, or
	// resultMissed.
	probes *prometheus.CounterVec
}

// resultMissed is the probes' result label of a probe that got no answer
// (a timeout, a connection reset), whether or not the instance was kept up
// through it.
const resultMissed = "missed"

// newAdopterMetrics builds and registers the Adopter's metrics on reg; a nil
// reg leaves them unregistered. (Named for its component, not newMetrics,
// because managed runtimes will add their own to this package.)
func newAdopterMetrics(reg prometheus.Registerer) (*adopterMetrics, error) {
	m := &adopterMetrics{
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodeld_runtime_instance_up",
			Help: "1 while an adopted model server's last probe found it up, else 0.",
		}, []string{"role", "instance"}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_runtime_probes_total",
			Help: "Probes of adopted model servers by role and result (up, loading, down, model_missing, missed: no answer, a timeout or a reset connection).",
		}, []string{"role", "result"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.up, m.probes} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register runtime metrics: %w", err)
		}
	}
	return m, nil
}
