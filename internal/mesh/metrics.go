package mesh

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Peer states, the bounded label set of nodeld_mesh_peers and Status.
const (
	// StateConnecting: configured, never connected yet.
	StateConnecting = "connecting"
	// StateConnected: a live link exists.
	StateConnected = "connected"
	// StateReconnecting: the link was lost or a dial failed; retrying
	// with backoff.
	StateReconnecting = "reconnecting"
	// StateRefused: the key presented at the peer's address is not the
	// pinned one; retrying, but refused until the operator pins it.
	StateRefused = "refused"
)

var peerStates = [...]string{StateConnecting, StateConnected, StateReconnecting, StateRefused}

// Stream results, the bounded result label of nodeld_mesh_streams_total.
const (
	resultOK          = "ok"
	resultOpened      = "opened"
	resultDispatched  = "dispatched"
	resultMalformed   = "malformed"
	resultTooLarge    = "too_large"
	resultUnknownKind = "unknown_kind"
	resultNoHandler   = "no_handler"
	resultTimeout     = "timeout"
	resultError       = "error"
	// resultReplayed: an opened stream was sent again on the link to the
	// peer's new run (see replay).
	resultReplayed = "replayed"
)

// Handshake results.
const (
	handshakeOK      = "ok"
	handshakeRefused = "refused"
	handshakeError   = "error"
)

type metrics struct {
	peers      *prometheus.GaugeVec
	handshakes *prometheus.CounterVec
	streams    *prometheus.CounterVec
	bytes      *byteCounter
	suppressed prometheus.Counter
	dead       prometheus.Counter
}

// newMetrics builds the mesh's metrics and registers them on reg (nil:
// kept, not exported); a name already taken is an error, never a panic.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		peers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodeld_mesh_peers",
			Help: "Configured mesh peers by link state.",
		}, []string{"state"}),
		handshakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_mesh_handshakes_total",
			Help: "Mesh handshakes by result (ok, refused, error).",
		}, []string{"result"}),
		streams: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_mesh_streams_total",
			Help: "Mesh streams by kind and result.",
		}, []string{"kind", "result"}),
		bytes: newByteCounter(),
		suppressed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeld_mesh_refusals_suppressed_total",
			Help: "Refused handshakes counted into a summary entry of the audit chain instead of chained one by one.",
		}),
		dead: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeld_mesh_links_dead_total",
			Help: "Links closed because no liveness heartbeat was heard within mesh.liveness_timeout.",
		}),
	}
	for _, s := range peerStates {
		m.peers.WithLabelValues(s)
	}
	for _, r := range []string{handshakeOK, handshakeRefused, handshakeError} {
		m.handshakes.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.peers, m.handshakes, m.streams, m.bytes, m.suppressed, m.dead} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register mesh metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) stream(kind StreamKind, result string) {
	m.streams.WithLabelValues(kind.String(), result).Inc()
}
