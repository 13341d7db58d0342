package proxy

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Route label values. routeNone marks requests answered by the proxy
// itself: refused before a target was chosen (guards, 503 with nothing
// resolving, 429), or Ollama's HEAD and GET / (see answerOllamaRoot).
const (
	routeLocal  = "local"
	routeRemote = "remote"
	routeNone   = "none"
)

// metrics are the proxy's Prometheus collectors. Labels are bounded: role
// comes from config, route is one of three values, code is an HTTP status.
type metrics struct {
	requests *prometheus.CounterVec   // role, route, code
	duration *prometheus.HistogramVec // role, route
	ttfb     *prometheus.HistogramVec // role, route
	inflight *prometheus.GaugeVec     // role
	retries  *prometheus.CounterVec   // result
	conns    *prometheus.GaugeVec     // role
	refused  *prometheus.CounterVec   // role

	held        *prometheus.CounterVec   // role
	holdWait    *prometheus.HistogramVec // role
	holdDepth   *prometheus.GaugeVec     // role
	holdRefused *prometheus.CounterVec   // role, reason
	holdBusy    *prometheus.CounterVec   // role
}

// Results of a retry on the next peer (nodeld_proxy_mesh_retries_total).
const (
	retryOK          = "ok"
	retryFailed      = "failed"
	retryNoCandidate = "no_candidate"
	retryStreamed    = "body_streamed" // not retried: the body was streamed, not held
)

// latencyBuckets span a fast embedding call to a long generation.
var latencyBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_proxy_requests_total",
			Help: "Requests answered by the loopback proxy, by role, route (local, remote or none) and status code.",
		}, []string{"role", "route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodeld_proxy_request_duration_seconds",
			Help:    "Time from request arrival to the end of the response, for forwarded requests.",
			Buckets: latencyBuckets,
		}, []string{"role", "route"}),
		ttfb: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodeld_proxy_time_to_first_byte_seconds",
			Help:    "Time from request arrival to the first response body byte sent to the client, for forwarded requests.",
			Buckets: latencyBuckets,
		}, []string{"role", "route"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodeld_proxy_inflight_requests",
			Help: "Requests being forwarded right now, by role.",
		}, []string{"role"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_proxy_mesh_retries_total",
			Help: "Requests whose forward failed because the link to the peer failed before it answered, by what the one retry on the next peer did (ok, failed, no_candidate, body_streamed: none, the body was streamed).",
		}, []string{"result"}),
		conns: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodeld_proxy_client_connections",
			Help: "Client connections open on a role's port, idle or busy, by role.",
		}, []string{"role"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_proxy_connections_refused_total",
			Help: "Client connections closed as soon as accepted because the role's port held inference.limits.max_connections, by role.",
		}, []string{"role"}),
		held: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_proxy_held_requests_total",
			Help: "Requests held because their role had no live route (or every candidate failed before answering) while the role was expected back, by role.",
		}, []string{"role"}),
		holdWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodeld_proxy_hold_wait_seconds",
			Help:    "Time a held request waited, from its arrival until it was forwarded or refused, by role.",
			Buckets: latencyBuckets,
		}, []string{"role"}),
		holdDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodeld_proxy_hold_queue_depth",
			Help: "Requests held in a role's queue right now, by role.",
		}, []string{"role"}),
		holdRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_proxy_hold_refused_total",
			Help: "Held requests answered 503, by role and reason (queue_full: the role's queue was full; max_wait: nothing served the role within its wait).",
		}, []string{"role", "reason"}),
		holdBusy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_proxy_hold_busy_retries_total",
			Help: "Times a held request found no free slot (the role's concurrency here, or the serving peer's in-flight limit: over_capacity) before anything was relayed, and waited a few milliseconds to try again within its wait, by role.",
		}, []string{"role"}),
	}
	for _, r := range []string{retryOK, retryFailed, retryNoCandidate, retryStreamed} {
		m.retries.WithLabelValues(r)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.ttfb, m.inflight, m.retries, m.conns, m.refused, m.held, m.holdWait, m.holdDepth, m.holdRefused, m.holdBusy} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register proxy metrics: %w", err)
		}
	}
	return m, nil
}
