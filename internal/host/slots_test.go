package host

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/runner"
	"github.com/nodeld/nodeld/internal/runner/runnertest"
	"github.com/nodeld/nodeld/internal/table"
)

// adoptedRegistrar is the table as the Adopter's registrar, as cmd/nodeld
// wires it.
type adoptedRegistrar struct{ t *table.Table }

func (a adoptedRegistrar) RegisterLocal(role, base, model, api, runtime string) (runner.LocalSlot, error) {
	s, err := a.t.RegisterLocal(table.OriginAdopted, role, base, model, api, runtime)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// chatSlots returns the base chat resolves to locally ("" for none) and the
// bases of the registrations standing by, in election order.
func (c *cluster) chatSlots() (served string, standby []string) {
	for _, rs := range c.hostNode.Table.Snapshot().Roles {
		if rs.Role != "chat" {
			continue
		}
		if rs.Local != nil {
			served = rs.Local.Base
		}
		for _, s := range rs.Standby {
			standby = append(standby, s.Base)
		}
	}
	return served, standby
}

// servedNow returns the base chat resolves to locally, "" for none.
func (c *cluster) servedNow() string {
	tg, ok := c.hostNode.Table.Resolve("chat")
	if !ok || tg.Kind != table.TargetLocal {
		return ""
	}
	return tg.Base
}

// endpoint returns the loopback base of a running instance.
func (c *cluster) endpoint(t *testing.T, id string) string {
	t.Helper()
	ep, alive := c.instance(id).managed.Endpoint()
	if !alive {
		t.Fatalf("instance %s is not alive", id)
	}
	return ep
}

// placeRunning places p, started, and waits until its registration of chat
// is in the table, serving or standing by.
func (c *cluster) placeRunning(t *testing.T, p testPackage) (id, base string) {
	t.Helper()
	res, _, err := c.place(t, p, true)
	if err != nil {
		t.Fatalf("place %s: %v", p.m.ID, err)
	}
	base = c.endpoint(t, res.InstanceID)
	c.waitRegistered(t, base)
	return res.InstanceID, base
}

// waitRegistered waits until base is one of chat's local registrations.
func (c *cluster) waitRegistered(t *testing.T, base string) {
	t.Helper()
	meshtest.WaitFor(t, "chat registration of "+base, func() bool {
		served, standby := c.chatSlots()
		return served == base || slices.Contains(standby, base)
	})
}

func (c *cluster) stop(t *testing.T, id string) {
	t.Helper()
	c.mustCall(t, ctl.MethodStop, ctl.InstanceParams{InstanceID: id, GraceMS: 1000}, newDecision(), nil)
}

// TestTwoPlacedInstancesOfOneRole: each placed instance holds its own
// registration of its role, so stopping either leaves the other serving at
// once. By role name only, the one registered last took the role over and
// its stop left the role dark although the other was running.
func TestTwoPlacedInstancesOfOneRole(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	idA, baseA := c.placeRunning(t, buildEchoAs(t, c.publisher, "echo-a"))
	idB, baseB := c.placeRunning(t, buildEchoAs(t, c.publisher, "echo-b"))
	if served, standby := c.chatSlots(); served != baseA || !slices.Equal(standby, []string{baseB}) {
		t.Fatalf("chat served by %q, standby %v; want the older instance %s serving, %s standing by", served, standby, baseA, baseB)
	}

	// Stopping the newer one: the older keeps serving.
	c.stop(t, idB)
	if got := c.servedNow(); got != baseA {
		t.Fatalf("after stopping %s chat resolves to %q, want %s", idB, got, baseA)
	}

	// The newer one comes back (standing by); stopping the older one
	// elects it at once, with no probe interval of darkness.
	c.mustCall(t, ctl.MethodStart, ctl.InstanceParams{InstanceID: idB}, newDecision(), nil)
	baseB = c.endpoint(t, idB)
	c.waitRegistered(t, baseB)
	c.stop(t, idA)
	if got := c.servedNow(); got != baseB {
		t.Fatalf("after stopping %s chat resolves to %q, want %s", idA, got, baseB)
	}
	c.stop(t, idB)
	if got := c.servedNow(); got != "" {
		t.Fatalf("chat resolves to %q with both instances stopped", got)
	}
}

// TestAdoptedAndPlacedInstanceOfOneRole: the Adopter and the host each hold
// their own registration of "chat". The placed instance serves; the
// adopted server stands by, takes over at once when the placed instance
// stops, and going down withdraws only the Adopter's registration. By role
// name only, the adopted server going down left the role dark although the
// placed instance was running.
func TestAdoptedAndPlacedInstanceOfOneRole(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	idP, baseP := c.placeRunning(t, buildEcho(t, c.publisher))

	srv := runnertest.NewServer(t, "openai", "adopted-m")
	a, err := runner.NewAdopter(runner.AdopterConfig{
		Instances: []runner.AdoptedInstance{{Role: "chat", Kind: runner.KindOpenAI, URL: srv.URL}},
		Interval:  100 * time.Millisecond,
	}, adoptedRegistrar{c.hostNode.Table}, zaptest.NewLogger(t).Named("adopter"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("adopter run: %v", err)
		}
	})
	adoptedServing := func() bool { return a.Status()[0].Serving }

	// The placed instance serves; the adopted server stands by.
	c.waitRegistered(t, srv.URL)
	if served, _ := c.chatSlots(); served != baseP || adoptedServing() {
		t.Fatalf("chat served by %q (adopted serving %v), want the placed instance %s", served, adoptedServing(), baseP)
	}

	// The placed instance stops: the adopted server serves at once.
	c.stop(t, idP)
	if got := c.servedNow(); got != srv.URL || !adoptedServing() {
		t.Fatalf("after stopping the placed instance chat resolves to %q (adopted serving %v), want %s", got, adoptedServing(), srv.URL)
	}

	// It comes back and serves again, before the adopted server.
	c.mustCall(t, ctl.MethodStart, ctl.InstanceParams{InstanceID: idP}, newDecision(), nil)
	baseP = c.endpoint(t, idP)
	meshtest.WaitFor(t, "the placed instance serving again", func() bool { return c.servedNow() == baseP })

	// The adopted server goes down: the Adopter releases its own
	// registration, and the placed instance keeps the role.
	srv.Close()
	meshtest.WaitFor(t, "the adopted registration released", func() bool {
		_, standby := c.chatSlots()
		return a.Status()[0].Health != runner.HealthUp && len(standby) == 0
	})
	if got := c.servedNow(); got != baseP {
		t.Fatalf("after the adopted server went down chat resolves to %q, want the placed instance %s", got, baseP)
	}
}
