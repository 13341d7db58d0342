package mesh

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"
)

// byteCounter serves nodeld_mesh_bytes_total from quic-go's own
// per-connection counters: the live connections' current counts plus the
// final counts of every connection that has ended. Counting this way keeps
// the mesh socket a plain *net.UDPConn, so quic-go uses its batched and
// GSO socket paths (wrapping the socket to count datagrams cost about a
// fifth of the artifact fetch throughput). Handshakes refused before a
// connection is adopted are not counted.
type byteCounter struct {
	desc *prometheus.Desc

	mu     sync.Mutex // guards live, rx, tx
	live   map[*quic.Conn]struct{}
	rx, tx uint64 // of ended connections
}

var _ prometheus.Collector = (*byteCounter)(nil)

func newByteCounter() *byteCounter {
	return &byteCounter{
		desc: prometheus.NewDesc("nodeld_mesh_bytes_total",
			"Bytes of established mesh connections by direction (rx, tx), as counted by QUIC.",
			[]string{"direction"}, nil),
		live: map[*quic.Conn]struct{}{},
	}
}

// track starts counting conn.
func (b *byteCounter) track(conn *quic.Conn) {
	b.mu.Lock()
	b.live[conn] = struct{}{}
	b.mu.Unlock()
}

// retire folds an ended conn's final counts into the totals. Retiring a
// conn twice, or one never tracked, changes nothing.
func (b *byteCounter) retire(conn *quic.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.live[conn]; !ok {
		return
	}
	delete(b.live, conn)
	st := conn.ConnectionStats()
	b.rx += st.BytesReceived
	b.tx += st.BytesSent
}

func (b *byteCounter) totals() (rx, tx uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	rx, tx = b.rx, b.tx
	for c := range b.live {
		st := c.ConnectionStats()
		rx += st.BytesReceived
		tx += st.BytesSent
	}
	return rx, tx
}

// Describe implements prometheus.Collector.
func (b *byteCounter) Describe(ch chan<- *prometheus.Desc) { ch <- b.desc }

// Collect implements prometheus.Collector.
func (b *byteCounter) Collect(ch chan<- prometheus.Metric) {
	rx, tx := b.totals()
	ch <- prometheus.MustNewConstMetric(b.desc, prometheus.CounterValue, float64(rx), "rx")
	ch <- prometheus.MustNewConstMetric(b.desc, prometheus.CounterValue, float64(tx), "tx")
}
