package proxy

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/table"
)

// A role with no route but a standby lists the model its controller can
// start on GET /v1/models; without the standby it is 503 no_instance, and
// other paths are not answered by the proxy.
func TestStandbyModels(t *testing.T) {
	tbl := table.New("n-self", table.Options{})
	h := startProxy(t, Config{}, Deps{Resolver: tbl})

	res, body := h.get("chat", "/v1/models")
	if res.StatusCode != http.StatusServiceUnavailable || apiError(t, res, body).Code != CodeNoInstance {
		t.Fatalf("no standby: %d %s", res.StatusCode, body)
	}

	tbl.SetOwnStandbys([]table.Standby{{Role: "chat", State: table.StateCold, Model: "llama-8b", MaxWait: time.Minute}})
	res, body = h.get("chat", "/v1/models")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("standby: %d %s", res.StatusCode, body)
	}
	var ml modelList
	if err := json.Unmarshal(body, &ml); err != nil || ml.Object != "list" || len(ml.Data) != 1 || ml.Data[0].ID != "llama-8b" {
		t.Fatalf("models %s (%v)", body, err)
	}
	res, body = h.post("chat", "/v1/chat/completions", chatBody(false))
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a completion was answered by the proxy: %d %s", res.StatusCode, body)
	}
}
