package demand

import (
	"context"
	"errors"
	"testing"
)

// fixed is a controller with one standby that answers every demand.
type fixed struct{}

func (fixed) Standby() []Standby { return []Standby{{Role: "chat"}} }
func (fixed) Demand(_ context.Context, role, from string) (string, error) {
	return role + "@" + from, nil
}

// TestDeferred: before Bind no standby and every demand refused with
// ErrNoOnDemand; after it, the bound controller answers.
func TestDeferred(t *testing.T) {
	var d Deferred
	if sbs := d.Standby(); sbs != nil {
		t.Fatalf("unbound Standby = %v", sbs)
	}
	if _, err := d.Demand(t.Context(), "chat", "n-b"); !errors.Is(err, ErrNoOnDemand) {
		t.Fatalf("unbound Demand = %v", err)
	}
	d.Bind(fixed{})
	if sbs := d.Standby(); len(sbs) != 1 || sbs[0].Role != "chat" {
		t.Fatalf("bound Standby = %v", sbs)
	}
	if got, err := d.Demand(t.Context(), "chat", "n-b"); err != nil || got != "chat@n-b" {
		t.Fatalf("bound Demand = %q, %v", got, err)
	}
}
