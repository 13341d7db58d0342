package raftmesh

import "github.com/prometheus/client_golang/prometheus"

// Results of the streams counter.
const (
	resultAccepted  = "accepted"   // in: handed to raft's Accept
	resultNotVoter  = "not_voter"  // in or out: the peer is not a voter
	resultQueueFull = "queue_full" // in: the accept queue was full
	resultClosed    = "closed"     // in or out: the layer was closed
	resultOpened    = "opened"     // out: a stream opened to a voter
	resultFailed    = "failed"     // out: the mesh could not open it
)

// metrics are the stream layer's.
type metrics struct {
	streams *prometheus.CounterVec // by direction (in, out) and result
	open    prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		streams: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_raft_streams_total",
			Help: "Raft streams over the mesh by direction (in, out) and result (accepted, opened, not_voter, queue_full, closed, failed).",
		}, []string{"direction", "result"}),
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeld_raft_streams_open",
			Help: "Raft streams over the mesh open now, both directions.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.streams, m.open} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) in(result string)  { m.streams.WithLabelValues("in", result).Inc() }
func (m *metrics) out(result string) { m.streams.WithLabelValues("out", result).Inc() }
