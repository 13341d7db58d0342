package proxy

import (
	"encoding/json"
	"net/http"

	"github.com/nodeld/nodeld/internal/table"
)

// StandbyLister is the part of the table that knows which controllers can
// start a role on demand (*table.Table). A Resolver that implements it
// lets a role with no route but a standby answer GET /v1/models.
type StandbyLister interface {
	Standbys(role string) []table.Standby
}

var _ StandbyLister = (*table.Table)(nil)

// modelList is an OpenAI model list.
type modelList struct {
	Object string      `json:"object"`
	Data   []modelInfo `json:"data"`
}

type modelInfo struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// answerStandbyModels answers GET /v1/models for a role that has no route
// but a standby: the model the controller can start (else the role's
// name), so a client lists it before its first request starts it. It
// reports whether it answered.
func (p *Proxy) answerStandbyModels(w http.ResponseWriter, r *http.Request, role string) bool {
	sl, ok := p.resolver.(StandbyLister)
	if !ok || r.Method != http.MethodGet || r.URL.Path != "/v1/models" {
		return false
	}
	if _, routed := p.resolver.Resolve(role); routed {
		return false
	}
	sbs := sl.Standbys(role)
	if len(sbs) == 0 {
		return false
	}
	id := sbs[0].Model
	if id == "" {
		id = role
	}
	body, err := json.Marshal(modelList{Object: "list", Data: []modelInfo{{ID: id, Object: "model", OwnedBy: "nodeld"}}})
	if err != nil {
		return false
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
	p.metrics.requests.WithLabelValues(role, routeNone, "200").Inc()
	return true
}
