package proxy

import (
	"crypto/ed25519"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/demand"
	"github.com/nodeld/nodeld/internal/table"
)

// The daemon's Holds answers GET /v1/models of a role it expects back.
var _ ModelLister = (*demand.Holds)(nil)

// A role with no route but a standby lists the model its controller can
// start on GET /v1/models; without the standby it is 503 no_instance, and
// other paths are not answered by the proxy.
func TestStandbyModels(t *testing.T) {
	tbl := table.New("n-self", table.Options{})
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	dn, err := demand.New(demand.Deps{Key: key, Table: tbl})
	if err != nil {
		t.Fatal(err)
	}
	h := startProxy(t, Config{}, Deps{Resolver: tbl, Holds: dn.Holds})

	res, body := h.get("chat", "/v1/models")
	if res.StatusCode != http.StatusServiceUnavailable || apiError(t, res, body).Code != CodeNoInstance {
		t.Fatalf("no standby: %d %s", res.StatusCode, body)
	}

	tbl.SetOwnStandbys([]table.Standby{{Role: "chat", State: table.StateCold, Model: "llama-8b", MaxWait: time.Minute}})
	res, body = h.get("chat", "/v1/models")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("standby: %d %s", res.StatusCode, body)
	}
	var ml struct {
		Object string
		Data   []struct{ ID string }
	}
	if err := json.Unmarshal(body, &ml); err != nil || ml.Object != "list" || len(ml.Data) != 1 || ml.Data[0].ID != "llama-8b" {
		t.Fatalf("models %s (%v)", body, err)
	}
	res, body = h.post("chat", "/v1/chat/completions", chatBody(false))
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a completion was answered by the proxy: %d %s", res.StatusCode, body)
	}
}
