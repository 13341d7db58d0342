package demand

import "encoding/json"

// modelList is an OpenAI model list (GET /v1/models).
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

// ModelsJSON returns the OpenAI model list a role with no route but a
// fresh standby answers GET /v1/models with: the model the first
// standby's controller can start (else the role's name), so a client
// lists it before its first request starts it. It returns false when
// role has no standby. It is the proxy's plug for that answer
// (proxy.ModelLister).
func (h *Holds) ModelsJSON(role string) ([]byte, bool) {
	sbs := h.tbl.Standbys(role)
	if len(sbs) == 0 {
		return nil, false
	}
	id := sbs[0].Model
	if id == "" {
		id = role
	}
	body, err := json.Marshal(modelList{Object: "list", Data: []modelInfo{{ID: id, Object: "model", OwnedBy: "nodeld"}}})
	if err != nil {
		return nil, false
	}
	return body, true
}
