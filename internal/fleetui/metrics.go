package fleetui

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the page's: its event streams, and the time one snapshot
// of the page takes to assemble and render.
type metrics struct {
	streams        prometheus.Gauge
	streamsRefused prometheus.Counter
	render         prometheus.Histogram
}

// newMetrics builds the page's metrics and registers them on reg (nil:
// kept, not exported).
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeld_ui_streams",
			Help: "Fleet page event streams open (/ui/events).",
		}),
		streamsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeld_ui_streams_refused_total",
			Help: "Fleet page event streams refused because MaxStreams were open.",
		}),
		render: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "nodeld_ui_render_seconds",
			Help:    "Time to assemble and render the fleet page's data (the page, a stream's poll, /ui/data).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.streams, m.streamsRefused, m.render} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register fleet page metrics: %w", err)
			}
		}
	}
	return m, nil
}
