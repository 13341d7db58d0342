package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/operator"

	"github.com/nodeld/nodeld/internal/demand"
	"github.com/nodeld/nodeld/internal/table"
)

// demandDouble is a test double of the controller's demand side (the
// controller implements it in the next step).
type demandDouble struct {
	sbs  []demand.Standby
	mu   sync.Mutex
	from []string
	got  chan struct{}
}

func (d *demandDouble) Standby() []demand.Standby { return d.sbs }

func (d *demandDouble) Demand(_ context.Context, role, from string) (string, error) {
	d.mu.Lock()
	d.from = append(d.from, role+"@"+from)
	d.mu.Unlock()
	select {
	case d.got <- struct{}{}:
	default:
	}
	return table.StateStarting, nil
}

// The daemon serves the demand stream on the node that runs the
// controller (unknown_role until the controller offers on-demand
// workloads), sends its standbys to the nodes on demand_from through the
// mesh's advertisement round, shows them in B's table, and B's Holds
// reaches the controller.
func TestDemandWiring(t *testing.T) {
	t.Parallel()
	m := newMesh(t, "a", "b")
	anchor := m.node("b").key // any key: nothing is placed
	a := m.start("a", m.config("a", []peer{{name: "b", tier: "paired"}}, meshController(anchor, "")))
	b := m.start("b", m.config("b", []peer{{name: "a", tier: "paired"}}, ""))
	idA, idB := m.id("a"), m.id("b")
	waitFor(t, "b linked to a", func() bool {
		for _, p := range b.n.mesh.LinkedPeers() {
			if p.ID == idA {
				return true
			}
		}
		return false
	})

	_, err := b.n.demand.Client.Call(context.Background(), idA, "chat")
	var ref *demand.Refused
	if !errors.As(err, &ref) || ref.Code != demand.CodeUnknownRole {
		t.Fatalf("B's demand before any on-demand workload: %v, want unknown_role", err)
	}
	if _, err := a.n.demand.Client.Call(context.Background(), idB, "chat"); err == nil || errors.As(err, &ref) {
		t.Fatalf("B, no controller, answered a demand: %v", err)
	}

	dd := &demandDouble{sbs: []demand.Standby{{Role: "chat", Workload: "chat", MaxWait: time.Minute,
		DemandFrom: []string{idB}, State: table.StateCold}}, got: make(chan struct{}, 1)}
	a.n.demandCtl.Bind(dd)
	waitFor(t, "b to hold chat's standby", func() bool { return len(b.n.table.Standbys("chat")) == 1 })
	if w, ok := b.n.demand.Holds.Expect("chat"); !ok || w != time.Minute {
		t.Fatalf("Expect(chat) = %v, %v", w, ok)
	}
	var out strings.Builder
	printStatus(&out, b.n.status().(*operator.StatusDoc))
	if want := "cold (on demand from " + idA + ")"; !strings.Contains(out.String(), want) {
		t.Fatalf("nodeld status does not show %q:\n%s", want, out.String())
	}
	b.n.demand.Holds.Want("chat")
	<-dd.got
	dd.mu.Lock()
	defer dd.mu.Unlock()
	if len(dd.from) != 1 || dd.from[0] != "chat@"+idB {
		t.Fatalf("demands %v", dd.from)
	}
}
