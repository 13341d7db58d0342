package proxy

import "net/http"

// ModelLister is the part of a Holds that answers GET /v1/models for a
// role it expects back (*demand.Holds): ModelsJSON returns the OpenAI
// model list of role, or false. When Deps.Holds implements it, a role
// with no route but a list answers GET /v1/models itself.
type ModelLister interface {
	ModelsJSON(role string) ([]byte, bool)
}

// answerStandbyModels answers GET /v1/models for a role that has no route
// but a model list from the Holds (a standby: the model its controller
// can start), so a client lists it before its first request starts it. It
// reports whether it answered.
func (p *Proxy) answerStandbyModels(w http.ResponseWriter, r *http.Request, role string) bool {
	if p.models == nil || r.Method != http.MethodGet || r.URL.Path != "/v1/models" {
		return false
	}
	if _, routed := p.resolver.Resolve(role); routed {
		return false
	}
	body, ok := p.models.ModelsJSON(role)
	if !ok {
		return false
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
	p.metrics.requests.WithLabelValues(role, routeNone, "200").Inc()
	return true
}
