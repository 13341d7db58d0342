package facts

import (
	"crypto/ed25519"
	"time"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/sandbox"
)

// FromConfigOptions are what a node's facts source takes besides its
// config and key.
type FromConfigOptions struct {
	// Perf is the proxy's measurements of local instances; nil: none.
	Perf PerfSource
	// Probe replaces DefaultProbeDeps (tests); nil probes this machine.
	Probe *ProbeDeps
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	// Isolation is what the node enforces around placed instances.
	Isolation sandbox.Support
}

// FromConfig builds the node's signed facts source from node.labels,
// node.class and the isolation it enforces, signed with key under a seq
// kept in node.data_dir.
func FromConfig(cfg *config.Config, key ed25519.PrivateKey, o FromConfigOptions) (*Source, error) {
	seq, err := OpenSeqStore(cfg.Node.DataDir)
	if err != nil {
		return nil, err
	}
	pd := DefaultProbeDeps()
	if o.Probe != nil {
		pd = *o.Probe
	}
	extra, notes := Isolation(o.Isolation)
	return NewSource(pd, key, cfg.Node.Labels, seq, SourceOptions{
		Perf: o.Perf, Now: o.Now, Class: cfg.Node.Class, Extra: extra, ExtraNotes: notes})
}

// Capability records of the isolation a node enforces: a package (or a
// policy) requires one by selecting it; a node lacking it is refused by
// the engine with the reason in ctl explain.
const (
	CapIsolationFS     = "isolation.fs"
	CapIsolationUID    = "isolation.uid"
	CapIsolationCgroup = "isolation.cgroup"
	// probeIsolation names the facts note of a part that is not enforced.
	probeIsolation = "isolation"
)

// Isolation is the records of what s enforces (none for a part that is
// off or unavailable) and a note for each part that is not.
func Isolation(s sandbox.Support) ([]Capability, []Note) {
	var caps []Capability
	var notes []Note
	rec := func(id string, attrs map[string]grammar.Value) {
		caps = append(caps, Capability{ID: id, Attrs: attrs, Provenance: grammar.ProvenanceProbed, State: grammar.StateAvailable})
	}
	if s.Filesystem == "landlock" {
		rec(CapIsolationFS, map[string]grammar.Value{"mechanism": grammar.StringValue("landlock"), "abi": grammar.IntValue(int64(s.LandlockABI))})
	} else {
		notes = append(notes, Note{Probe: probeIsolation, Message: "filesystem isolation " + s.Filesystem})
	}
	if s.Users == sandbox.UsersDynamic {
		rec(CapIsolationUID, map[string]grammar.Value{"mode": grammar.StringValue(s.Users)})
	} else {
		notes = append(notes, Note{Probe: probeIsolation, Message: "instances run as the daemon's user (" + s.Users + ")"})
	}
	if s.Cgroup == sandbox.CgroupV1 || s.Cgroup == sandbox.CgroupV2 {
		ctls := make([]grammar.Value, len(s.Controllers))
		for i, c := range s.Controllers {
			ctls[i] = grammar.StringValue(c)
		}
		rec(CapIsolationCgroup, map[string]grammar.Value{"version": grammar.IntValue(int64(s.Cgroup[1] - '0')), "controllers": grammar.ListValue(ctls...)})
	} else {
		notes = append(notes, Note{Probe: probeIsolation, Message: "resource isolation (cgroups) " + s.Cgroup})
	}
	return caps, notes
}
