package meshproxy

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodeld/nodeld/internal/tlspool"
)

// tcpCollector exports the TCP transport's pool (forwards to peers) and
// server (serving peers) as they are at each scrape: nothing on the
// request path counts for it.
type tcpCollector struct {
	t *tcpSide

	pool, shared, events, served *prometheus.Desc
}

func newTCPCollector(t *tcpSide) *tcpCollector {
	return &tcpCollector{
		t: t,
		pool: prometheus.NewDesc("nodeld_proxy_mesh_tcp_pool_connections",
			"Pooled TLS/TCP connections to peers for inference forwards, by state: in_use (dials in progress included) and idle; a stream of a shared connection counts as one.",
			[]string{"state"}, nil),
		shared: prometheus.NewDesc("nodeld_proxy_mesh_tcp_pool_shared",
			"Shared TLS/TCP connections to peers open now, each carrying exchanges as streams (past a peer's first exchange in flight).",
			nil, nil),
		events: prometheus.NewDesc("nodeld_proxy_mesh_tcp_pool_events_total",
			"The forward pool's connection events: dial (attempts, shared ones included), dial_failed, reuse (an idle connection or stream taken again), expired (closed idle past its timeout), dead (found closed by its peer).",
			[]string{"event"}, nil),
		served: prometheus.NewDesc("nodeld_proxy_mesh_tcp_served",
			"What this node serves peers over TLS/TCP now: connections (shared ones included) and streams of shared connections.",
			[]string{"kind"}, nil),
	}
}

func (c *tcpCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pool
	ch <- c.shared
	ch <- c.events
	ch <- c.served
}

func (c *tcpCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.t.pool.Stats()
	ch <- prometheus.MustNewConstMetric(c.pool, prometheus.GaugeValue, float64(st.Open-st.Idle), "in_use")
	ch <- prometheus.MustNewConstMetric(c.pool, prometheus.GaugeValue, float64(st.Idle), "idle")
	ch <- prometheus.MustNewConstMetric(c.shared, prometheus.GaugeValue, float64(st.Shared))
	for _, e := range []struct {
		name string
		v    int64
	}{{"dial", st.Dials}, {"dial_failed", st.DialFailures}, {"reuse", st.Reuses}, {"expired", st.Expired}, {"dead", st.Dead}} {
		ch <- prometheus.MustNewConstMetric(c.events, prometheus.CounterValue, float64(e.v), e.name)
	}
	var srv tlspool.ServerStats
	c.t.mu.Lock()
	s := c.t.srv
	c.t.mu.Unlock()
	if s != nil {
		srv = s.Stats()
	}
	ch <- prometheus.MustNewConstMetric(c.served, prometheus.GaugeValue, float64(srv.Conns), "connections")
	ch <- prometheus.MustNewConstMetric(c.served, prometheus.GaugeValue, float64(srv.Streams), "streams")
}
