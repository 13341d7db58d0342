package host

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/pkg"
)

// registry is the host's list of instances: the places in flight (by
// decision, with the instance id each reserves), the listed instances and
// the instances that departed on purpose. It decides nothing; the
// lifecycle and the revocation teardown change it, the read model and the
// package store read it.
type registry struct {
	now func() time.Time

	// mu guards every field below. It is never held across I/O, a
	// process start or stop, or a call into the table or the chain.
	mu       sync.Mutex
	inflight map[string]*inflight // by decision id
	reserved map[string]string    // instance id -> decision id of a place in progress
	insts    map[string]*instance // by instance id
	departed []ctl.Departed       // newest last, at most MaxDeparted
}

// inflight is a place or load being handled.
type inflight struct {
	decision   string
	pkgID      string
	version    string
	instanceID string
	pkgDir     string // its package directory's name (packageDirName)
	since      time.Time
}

func newRegistry(now func() time.Time) *registry {
	return &registry{
		now:      now,
		inflight: map[string]*inflight{},
		reserved: map[string]string{},
		insts:    map[string]*instance{},
	}
}

// begin marks a decision in flight and reserves its instance id and its
// package directory.
func (r *registry) begin(decision, id, pkgDir string, m *pkg.Manifest) *ctl.Refusal {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.inflight[decision] != nil:
		return ctl.NewRefusal(ctl.CodeInvalidRequest, "decision is already being placed")
	case r.insts[id] != nil:
		return ctl.NewRefusal(ctl.CodeRuntime, "instance "+id+" is already loaded")
	case r.reserved[id] != "":
		return ctl.NewRefusal(ctl.CodeRuntime, "instance "+id+" is being placed by another decision")
	case len(r.insts)+len(r.inflight) >= MaxInstances:
		return ctl.NewRefusal(ctl.CodeAdmission, "too many instances on this node")
	}
	r.inflight[decision] = &inflight{decision: decision, pkgID: m.ID, version: m.Version, instanceID: id, pkgDir: pkgDir, since: r.now()}
	r.reserved[id] = decision
	return nil
}

// end takes a decision out of flight and frees its reservation.
func (r *registry) end(decision, id string) {
	r.mu.Lock()
	delete(r.inflight, decision)
	delete(r.reserved, id)
	r.mu.Unlock()
}

// add lists a placed instance; it is no longer departed.
func (r *registry) add(in *instance) {
	r.mu.Lock()
	r.insts[in.id] = in
	r.departed = slices.DeleteFunc(r.departed, func(d ctl.Departed) bool { return d.InstanceID == in.id })
	r.mu.Unlock()
}

// drop unlists the instance id of a place that did not complete, without
// remembering it as departed.
func (r *registry) drop(id string) {
	r.mu.Lock()
	delete(r.insts, id)
	r.mu.Unlock()
}

// remove drops a stopped instance and remembers it as departed.
func (r *registry) remove(in *instance, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.insts[in.id] != in {
		return
	}
	delete(r.insts, in.id)
	r.departed = append(r.departed, ctl.Departed{InstanceID: in.id, Reason: reason})
	if len(r.departed) > MaxDeparted {
		r.departed = append(r.departed[:0:0], r.departed[len(r.departed)-MaxDeparted:]...)
	}
}

// lookup returns the instance named by p, or unknown_instance.
func (r *registry) lookup(id string) (*instance, *ctl.Refusal) {
	r.mu.Lock()
	in := r.insts[id]
	r.mu.Unlock()
	if in == nil {
		return nil, ctl.NewRefusal(ctl.CodeUnknownInstance, "no instance "+id+" on this node")
	}
	return in, nil
}

// listed reports whether in is still the listed instance of its id.
func (r *registry) listed(in *instance) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.insts[in.id] == in
}

// listing is one consistent view of the registry: the places in flight
// (by start time), the listed instances (by id) and, when asked, the
// departed instances (oldest first).
func (r *registry) listing(withDeparted bool) (fl []InFlightStatus, insts []*instance, departed []ctl.Departed) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if withDeparted {
		departed = slices.Clone(r.departed)
	}
	return r.inflightLocked(), r.sortedLocked(), departed
}

// sorted returns the listed instances by id.
func (r *registry) sorted() []*instance {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sortedLocked()
}

func (r *registry) inflightLocked() []InFlightStatus {
	out := make([]InFlightStatus, 0, len(r.inflight))
	for _, f := range r.inflight {
		out = append(out, InFlightStatus{DecisionID: f.decision, Package: f.pkgID, Version: f.version,
			InstanceID: f.instanceID, Since: f.since})
	}
	slices.SortFunc(out, func(a, b InFlightStatus) int {
		if c := a.Since.Compare(b.Since); c != 0 {
			return c
		}
		return strings.Compare(a.DecisionID, b.DecisionID)
	})
	return out
}

func (r *registry) sortedLocked() []*instance {
	out := slices.Collect(maps.Values(r.insts))
	slices.SortFunc(out, func(a, b *instance) int { return strings.Compare(a.id, b.id) })
	return out
}

// counts returns how many instances are listed and how many places are
// in flight.
func (r *registry) counts() (instances, inFlight int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.insts), len(r.inflight)
}

// instanceCount is the nodeld_host_instances gauge.
func (r *registry) instanceCount() float64 {
	n, _ := r.counts()
	return float64(n)
}

// packageInUse reports whether a listed instance or a place in flight
// uses the package directory name.
func (r *registry) packageInUse(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, in := range r.insts {
		if in.pkgDir() == name {
			return true
		}
	}
	for _, f := range r.inflight {
		if f.pkgDir == name {
			return true
		}
	}
	return false
}
