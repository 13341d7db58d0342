package main

import (
	"fmt"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/sandbox"
)

// newIsolator builds the isolation of placed instances from
// host.isolation: what this machine and daemon can enforce is detected
// once, here.
func newIsolator(cfg *config.Config, nodeID string) (*sandbox.Isolator, error) {
	iso := cfg.Host.Isolation
	first, count, err := config.ParseUIDRange(iso.UIDRange)
	if err != nil {
		return nil, fmt.Errorf("host.isolation.uid_range: %w", err)
	}
	return sandbox.New(sandbox.Config{
		Filesystem: iso.Filesystem, Resources: iso.Resources, Users: iso.Users,
		UIDFirst: first, UIDCount: count, PidsMax: iso.PidsMax, ReadPaths: iso.ReadPaths,
		DataDir: cfg.Node.DataDir, NodeID: nodeID,
	})
}

// Capability records of the isolation a node enforces: a package (or a
// policy) requires one by selecting it; a node lacking it is refused by
// the engine with the reason in ctl explain.
const (
	capIsolationFS     = "isolation.fs"
	capIsolationUID    = "isolation.uid"
	capIsolationCgroup = "isolation.cgroup"
	// probeIsolation names the facts note of a part that is not enforced.
	probeIsolation = "isolation"
)

// isolationFacts are the records of what s enforces (none for a part that
// is off or unavailable) and a note for each part that is not.
func isolationFacts(s sandbox.Support) ([]facts.Capability, []facts.Note) {
	var caps []facts.Capability
	var notes []facts.Note
	rec := func(id string, attrs map[string]grammar.Value) {
		caps = append(caps, facts.Capability{ID: id, Attrs: attrs, Provenance: grammar.ProvenanceProbed, State: grammar.StateAvailable})
	}
	if s.Filesystem == "landlock" {
		rec(capIsolationFS, map[string]grammar.Value{"mechanism": grammar.StringValue("landlock"), "abi": grammar.IntValue(int64(s.LandlockABI))})
	} else {
		notes = append(notes, facts.Note{Probe: probeIsolation, Message: "filesystem isolation " + s.Filesystem})
	}
	if s.Users == sandbox.UsersDynamic {
		rec(capIsolationUID, map[string]grammar.Value{"mode": grammar.StringValue(s.Users)})
	} else {
		notes = append(notes, facts.Note{Probe: probeIsolation, Message: "instances run as the daemon's user (" + s.Users + ")"})
	}
	if s.Cgroup == sandbox.CgroupV1 || s.Cgroup == sandbox.CgroupV2 {
		ctls := make([]grammar.Value, len(s.Controllers))
		for i, c := range s.Controllers {
			ctls[i] = grammar.StringValue(c)
		}
		rec(capIsolationCgroup, map[string]grammar.Value{"version": grammar.IntValue(int64(s.Cgroup[1] - '0')), "controllers": grammar.ListValue(ctls...)})
	} else {
		notes = append(notes, facts.Note{Probe: probeIsolation, Message: "resource isolation (cgroups) " + s.Cgroup})
	}
	return caps, notes
}

// isolationLine is the line nodeld status prints: what is enforced.
func isolationLine(s sandbox.Support) string {
	line := s.String()
	if s.Problem != "" {
		line += "; " + s.Problem
	}
	return line
}
