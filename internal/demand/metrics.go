package demand

import "github.com/prometheus/client_golang/prometheus"

// metrics are the demand call's, both sides.
type metrics struct {
	sent     prometheus.Counter
	answered *prometheus.CounterVec // by state
	refused  *prometheus.CounterVec // by code, as the caller saw it
	served   *prometheus.CounterVec // by outcome
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		sent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeld_demand_calls_sent_total",
			Help: "Demand calls this node sent to a controller for a role it had no route for.",
		}),
		answered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_demand_calls_answered_total",
			Help: "Demand calls answered with a state, by state (cold, starting, ready, idle).",
		}, []string{"state"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_demand_calls_refused_total",
			Help: "Demand calls sent that were refused, by code (a refusal code, unreachable, bad_answer).",
		}, []string{"code"}),
		served: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeld_demand_served_total",
			Help: "Demand calls a controller served, by outcome (ok, coalesced, malformed, or a refusal code).",
		}, []string{"outcome"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.sent, m.answered, m.refused, m.served} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
