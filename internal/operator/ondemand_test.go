package operator

import (
	"encoding/json"
	"testing"

	"github.com/nodeld/nodeld/internal/plane"
)

// /v1/status names each on-demand workload's state, and says nothing of
// on-demand workloads when there are none.
func TestStatusOnDemandStates(t *testing.T) {
	ds := []plane.DeclarationView{{Name: "web", State: plane.DeclPlaced}, {Name: "chat", State: plane.DeclPlaced, OnDemand: plane.OnDemandCold}}
	doc := ControllerDoc{OnDemand: onDemandStates(ds)}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		OnDemand map[string]string `json:"on_demand"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.OnDemand) != 1 || got.OnDemand["chat"] != plane.OnDemandCold {
		t.Fatalf("on_demand %v, want chat cold", got.OnDemand)
	}
	if m := onDemandStates(ds[:1]); m != nil {
		t.Fatalf("on_demand %v with none on demand, want nil", m)
	}
}
