package ctlforward

import "github.com/prometheus/client_golang/prometheus"

// Directions and results of nodeld_ctlforward_requests_total.
const (
	dirOut = "out" // a follower forwarding to the leader
	dirIn  = "in"  // the leader serving a forwarded request

	resultAnswered   = "answered"    // out: the leader answered
	resultNotSent    = "not_sent"    // out: the leader cannot have acted
	resultLost       = "lost"        // out: sent, answer lost or malformed
	resultServed     = "served"      // in: answered
	resultNotVoter   = "not_voter"   // in: the peer is not a voter, refused
	resultMalformed  = "malformed"   // in: a bad or oversized request
	resultNotServing = "not_serving" // in: no backend here
	resultUnanswered = "unanswered"  // in: served, answer not written
)

func newMetrics(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeld_ctlforward_requests_total",
		Help: "Controller writes forwarded from a follower to the leader, by direction (out, in) and result (answered, not_sent, lost; served, not_voter, malformed, not_serving, unanswered).",
	}, []string{"direction", "result"})
	if reg != nil {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}
