package demand

import (
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/table"
)

// ModelsJSON lists the first standby's model (the role's name when it
// names none) as an OpenAI model list, and nothing without a standby.
func TestModelsJSON(t *testing.T) {
	tbl := table.New("n-self", table.Options{})
	h := &Holds{tbl: tbl}
	if body, ok := h.ModelsJSON("chat"); ok {
		t.Fatalf("no standby: %s", body)
	}
	tbl.SetOwnStandbys([]table.Standby{
		{Role: "chat", State: table.StateCold, Model: "llama-8b", MaxWait: time.Minute},
		{Role: "embed", State: table.StateCold, MaxWait: time.Minute},
	})
	for role, want := range map[string]string{
		"chat":  `{"object":"list","data":[{"id":"llama-8b","object":"model","created":0,"owned_by":"nodeld"}]}`,
		"embed": `{"object":"list","data":[{"id":"embed","object":"model","created":0,"owned_by":"nodeld"}]}`,
	} {
		if body, ok := h.ModelsJSON(role); !ok || string(body) != want {
			t.Errorf("ModelsJSON(%s) = %s, %v; want %s", role, body, ok, want)
		}
	}
}
