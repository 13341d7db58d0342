package host

import (
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
)

// A start whose begin record cannot be chained is refused and nothing
// runs; stop and unload reduce risk, so they proceed without their
// records and count them lost.
func TestStartFailsClosedStopAndUnloadProceed(t *testing.T) {
	c := newCluster(t, clusterOpts{})
	res, _, err := c.place(t, buildEcho(t, c.publisher), false)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	id := res.InstanceID
	in := c.instance(id)
	lost := func() float64 { return testutil.ToFloat64(c.h.met.auditFailures) }
	call := func(method ctl.Method, p ctl.InstanceParams) error {
		_, err := c.call(t, method, p, newDecision())
		return err
	}

	c.audit.down.Store(true)
	before := lost()
	if err := call(ctl.MethodStart, ctl.InstanceParams{InstanceID: id}); refusalCode(err) != ctl.CodeRuntime {
		t.Fatalf("start with the chain down: %v, want a runtime refusal", err)
	}
	if in.managed.Alive() || in.snapshot().started || c.state(id) != ctl.StateLoaded {
		t.Errorf("instance after a refused start: alive %v, %+v", in.managed.Alive(), in.snapshot())
	}
	// The begin record and the refusal's record are both lost.
	meshtest.WaitFor(t, "lost records counted", func() bool { return lost() == before+2 })

	c.audit.down.Store(false)
	if err := call(ctl.MethodStart, ctl.InstanceParams{InstanceID: id}); err != nil {
		t.Fatalf("start: %v", err)
	}
	if b, s := len(c.audit.ofKind(KindStartBegin)), len(c.audit.ofKind(KindStart)); b != 1 || s != 1 {
		t.Errorf("chained %d begin and %d start records, want 1 and 1", b, s)
	}
	pid := in.managed.PID()

	c.audit.down.Store(true)
	before = lost()
	if err := call(ctl.MethodStop, ctl.InstanceParams{InstanceID: id, GraceMS: 1000}); err != nil {
		t.Fatalf("stop with the chain down: %v", err)
	}
	if err := syscall.Kill(pid, 0); err == nil || c.state(id) != ctl.StateStopped {
		t.Errorf("after stop: process %d still exists or state %q", pid, c.state(id))
	}
	if got := lost(); got != before+1 {
		t.Errorf("lost records after stop = %v, want %v", got, before+1)
	}
	if err := call(ctl.MethodUnload, ctl.InstanceParams{InstanceID: id}); err != nil {
		t.Fatalf("unload with the chain down: %v", err)
	}
	if c.instance(id) != nil {
		t.Error("instance listed after unload")
	}
	if got := lost(); got != before+2 {
		t.Errorf("lost records after unload = %v, want %v", got, before+2)
	}
	if n := len(c.audit.ofKind(KindStop)) + len(c.audit.ofKind(KindUnload)); n != 0 {
		t.Errorf("%d stop or unload records written while the chain was down", n)
	}
}
