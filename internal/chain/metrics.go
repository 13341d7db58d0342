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
	recoveries   *prometheus.CounterVec
	writable     prometheus.Gauge
}

// newMetrics builds and registers the chain metrics; entries reads the
// chain's entry count (a CounterFunc, so a reopened chain reports its full
// count rather than appends since start). The chain starts writable.
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
		recoveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_chain_recoveries_total",
			Help: "Attempts to cut the audit chain back to its last acknowledged entry after a write or sync error, by result (ok, failed).",
		}, []string{"result"}),
		writable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeld_chain_writable",
			Help: "1 while the audit chain is writable, 0 from a write, sync or recovery error until an append succeeds.",
		}),
	}
	m.recoveries.WithLabelValues(recoveryOK)
	m.recoveries.WithLabelValues(recoveryFailed)
	m.writable.Set(1)
	var done []prometheus.Collector
	for _, c := range m.collectors() {
		if err := reg.Register(c); err != nil {
			for _, d := range done {
				reg.Unregister(d)
			}
			return nil, fmt.Errorf("register chain metrics: %w", err)
		}
		done = append(done, c)
	}
	return m, nil
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.entries, m.appendErrors, m.recoveries, m.writable}
}

// unregister removes the collectors so the registry can take a reopened
// chain's.
func (m *metrics) unregister() {
	for _, c := range m.collectors() {
		m.reg.Unregister(c)
	}
}

// recorderMetrics are a Recorder's collectors on an injected registry.
type recorderMetrics struct {
	suppressed *prometheus.CounterVec
	overflow   *prometheus.CounterVec
}

// newRecorderMetrics builds and registers the recorder metrics. The kind
// label takes the RecordKey kinds, a fixed set in the callers' code.
func newRecorderMetrics(reg prometheus.Registerer) (*recorderMetrics, error) {
	m := &recorderMetrics{
		suppressed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_chain_records_suppressed_total",
			Help: "Remotely triggered events counted into a summary entry of the audit chain instead of chained one by one, by kind.",
		}, []string{"kind"}),
		overflow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_chain_records_overflow_total",
			Help: "Remotely triggered events counted into their class's overflow summary because the class's budget of tracked senders was taken, by class (peer, source, security).",
		}, []string{"class"}),
	}
	for c := range numClasses {
		m.overflow.WithLabelValues(c.String())
	}
	if err := reg.Register(m.suppressed); err != nil {
		return nil, fmt.Errorf("register chain recorder metrics: %w", err)
	}
	if err := reg.Register(m.overflow); err != nil {
		reg.Unregister(m.suppressed)
		return nil, fmt.Errorf("register chain recorder metrics: %w", err)
	}
	return m, nil
}
