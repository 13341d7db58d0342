package operator

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// newMetrics builds the operator socket's request counter, by verb
// (the backend's verbs, else "unknown") and class, and registers it on reg
// (nil: kept, not exported).
func newMetrics(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeld_dispatch_operator_requests_total",
		Help: "Operator socket requests, by verb and class.",
	}, []string{"verb", "class"})
	if reg != nil {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register operator socket metrics: %w", err)
		}
	}
	return c, nil
}
