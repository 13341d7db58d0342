package chain

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the chain's collectors on an injected registry.
type metrics struct {
	reg          prometheus.Registerer
	entries      prometheus.CounterFunc
	appendErrors prometheus.Counter
}

// newMetrics builds and registers the chain metrics; entries reads the
// chain's entry count (a CounterFunc, so a reopened chain reports its full
// count rather than appends since start).
func newMetrics(reg prometheus.Registerer, entries func() float64) (*metrics, error) {
	m := &metrics{
		reg: reg,
		entries: prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "nodeld_chain_entries_total",
			Help: "Entries in the audit chain, the genesis included.",
		}, entries),
		appendErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeld_chain_append_errors_total",
			Help: "Appends to the audit chain that returned an error (other than after Close).",
		}),
	}
	if err := reg.Register(m.entries); err != nil {
		return nil, fmt.Errorf("register chain metrics: %w", err)
	}
	if err := reg.Register(m.appendErrors); err != nil {
		reg.Unregister(m.entries)
		return nil, fmt.Errorf("register chain metrics: %w", err)
	}
	return m, nil
}

// unregister removes the collectors so the registry can take a reopened
// chain's.
func (m *metrics) unregister() {
	m.reg.Unregister(m.entries)
	m.reg.Unregister(m.appendErrors)
}
