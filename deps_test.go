package nodeld_test

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/nodeld/nodeld"

// tiers is the one-way import flow of DESIGN.md "Layout": a package may
// import internal packages of a strictly higher tier number only. A new
// package must be placed here before it can land.
var tiers = map[string]int{
	"cmd/nodeld": 0,
	// Example workloads are programs of their own; they import nothing
	// internal.
	"examples/packages/echo-llm": 0,
	// The comparison benchmarks' upstream and clients (scripts/bench-*.sh).
	"test/benchtool": 0,
	// make demo: drives the nodeld binary, imports nothing internal.
	"test/demo": 0,

	// The operator surface: the socket, its request and response types,
	// every verb and refusal code, routed to the dispatcher and the
	// controller.
	"internal/operator": 1,
	"internal/proxy":    1,
	// Both sides of inference over the mesh; the proxy's RemoteForwarder.
	"internal/meshproxy": 1,
	"internal/plane":     1,
	"internal/host":      1,
	"internal/dispatch":  1,
	// Standby advertisements, the consumer's hold plug and the demand call.
	"internal/demand": 1,
	// The fleet page on the admin port: it renders the operator read
	// model (operator.Router.Fleet) and this node's activity.
	"internal/fleetui": 1,
	// hashicorp/raft over KindRaft mesh streams (issue 25's foundation).
	"internal/raftmesh": 1,
	// The controller's state in raft: plane's StateStore over raftmesh.
	"internal/ctlraft": 1,
	// A follower controller's writes forwarded to the leader (KindOperator).
	"internal/ctlforward": 1,

	// The daemon's life from start to stop: logger, data dir, chain
	// opening, run group, supervisor, reloader.
	"internal/lifecycle": 2,
	"internal/admin":     2,
	"internal/ctl":       2,
	"internal/mesh":      2,
	"internal/table":     2,
	"internal/runner":    2,
	"internal/facts":     2,
	"internal/pkg":       2,
	// Pinned TLS 1.3 connections over TCP between node keys (the key
	// check is identity.PeerKey): the transport issue 26 opens for
	// inference streams; nothing uses it yet.
	"internal/tlspool": 2,

	"internal/chain":    3,
	"internal/identity": 3,
	"internal/config":   3,
	"internal/seqfile":  3,
	// Isolation of placed instances: Landlock, uids, cgroups. The host
	// uses it; it imports only the grammar.
	"internal/sandbox": 3,
	// The pure placement engine: the controller (plane) converts facts,
	// packages and tiers into its own types; it imports only the grammar.
	"internal/engine": 3,

	// Leaves (leafTier): they import the standard library only.
	"internal/grammar":    4,
	"internal/atomicfile": 4,
	// The proxy's HTTP/1.1 server and upstream client, and the model
	// pinning of request bodies both paths share.
	"internal/httpfast": 4,
	"internal/modelpin": 4,
	// Loopback ports reserved for tests (below the ephemeral range, held
	// by a lock file); only tests import it.
	"internal/testport": 4,
	"internal/holdq":    4,
	// What an OpenAI answer reports (its usage) and the medians of
	// recent samples, for the proxy's measured performance.
	"internal/usage": 4,
	// The one shape of a config reload (Prepared, Step, All).
	"internal/reload": 4,
	// The recent requests through the role ports and their per-second
	// counts, fed by the proxy, shown by the fleet page.
	"internal/activity": 4,
	// The GC's heap goal kept a headroom above the live heap (nodeld run).
	"internal/heapgoal": 4,
	"internal/procs":    4,
	// Streams over one connection with per-stream windows and no goroutine
	// of its own (issue 26): tlspool's shared connections.
	"internal/mux": 4,
}

// leafTier is the tier of the leaves, which import nothing but the
// standard library.
const leafTier = 4

// sideways lists the only imports allowed within one tier.
var sideways = map[string][]string{
	"internal/ctl": {"internal/mesh"},
	// The forwarder answers with the proxy's errors and keeps its
	// RemoteForwarder contract; the proxy knows it by that interface only.
	"internal/meshproxy": {"internal/proxy"},
	// The mesh carries the table's advertisements and hands received ones
	// to it; the table stays free of internal imports.
	"internal/mesh": {"internal/table"},
	// The operator router names the controller's types (plane.Order,
	// plane.Placement) in its Controller interface and the documents it
	// answers with; the status read model carries the host's status
	// document (host.HostStatus) as /v1/status's host section.
	"internal/operator": {"internal/plane", "internal/host"},
	// The dispatcher serves the per-node operator verbs (operator.Backend)
	// with the operator's request and response types, and carries the
	// controller's calls (dispatch.ForController is a plane.Dispatcher).
	"internal/dispatch": {"internal/operator", "internal/plane"},
	// The controller offers its on-demand workloads to the demand side
	// (plane.DemandSide is a demand.Controller).
	"internal/plane": {"internal/demand"},
	// The replicated store implements plane's StateStore and Leadership
	// (it encodes plane's changes) and runs raft on raftmesh's layer.
	"internal/ctlraft": {"internal/plane", "internal/raftmesh"},
	// The fleet page renders the operator's read model (FleetDoc) and
	// reads instance logs through its Router.
	"internal/fleetui": {"internal/operator"},
	// The forwarder carries the operator's Request and Response and is the
	// router's operator.Forwarder; the router is its Backend.
	"internal/ctlforward": {"internal/operator"},
}

// isolated packages import no other internal package except the leaf
// that holds the shared grammar.
var isolated = []string{"internal/table", "internal/chain", "internal/engine"}

// leaf is the one internal package every package may import, isolated ones
// included; it imports no internal package itself.
const leaf = "internal/grammar"

type goPackage struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

func listPackages(t *testing.T) []goPackage {
	t.Helper()
	out, err := exec.Command("go", "list", "-json", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []goPackage
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p goPackage
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// rel returns the path inside the module, and whether it is one.
func rel(importPath string) (string, bool) {
	if importPath == module {
		return "", true
	}
	return strings.CutPrefix(importPath, module+"/")
}

// owner maps a test-double package ("internal/proxy/proxytest") to the
// package it serves ("internal/proxy").
func owner(p string) (string, bool) {
	i := strings.LastIndex(p, "/")
	if i < 0 {
		return "", false
	}
	parent, last := p[:i], p[i+1:]
	if strings.HasSuffix(last, "test") && strings.HasSuffix(parent, strings.TrimSuffix(last, "test")) {
		return parent, true
	}
	return "", false
}

func TestImportFlow(t *testing.T) {
	for _, p := range listPackages(t) {
		from, _ := rel(p.ImportPath)
		if from == "" {
			continue // this test-only root package
		}
		fromTier, known := tiers[from]
		double, isDouble := owner(from)
		if isDouble {
			fromTier, known = tiers[double]
		}
		if !known {
			t.Errorf("%s has no place in the import flow; add it to tiers in deps_test.go", from)
			continue
		}
		for _, imp := range p.Imports {
			to, internal := rel(imp)
			if fromTier == leafTier && !isDouble && !isStandard(imp) {
				t.Errorf("%s is a leaf and may import the standard library only, imports %s", from, imp)
			}
			if !internal {
				continue
			}
			if _, ok := owner(to); ok {
				t.Errorf("%s imports the test double %s; only tests may", from, to)
				continue
			}
			if isDouble && to == double {
				continue
			}
			for _, iso := range isolated {
				if from == iso && to != leaf {
					t.Errorf("%s must import no internal package but %s, imports %s", from, leaf, to)
				}
			}
			toTier, ok := tiers[to]
			if !ok {
				continue // reported as unknown on its own
			}
			if toTier > fromTier {
				continue
			}
			// A test double may import what its owner may.
			owner := from
			if isDouble {
				owner = double
			}
			allowed := false
			for _, s := range sideways[owner] {
				allowed = allowed || s == to
			}
			if !allowed {
				t.Errorf("forbidden import: %s (tier %d) -> %s (tier %d)", from, fromTier, to, toTier)
			}
		}
	}
}

// isStandard reports whether an import path is in the standard library:
// its first element has no dot.
func isStandard(importPath string) bool {
	first, _, _ := strings.Cut(importPath, "/")
	return !strings.Contains(first, ".")
}

func TestOwnerOfTestDoubles(t *testing.T) {
	for give, want := range map[string]string{
		"internal/proxy/proxytest":   "internal/proxy",
		"internal/runner/runnertest": "internal/runner",
		"internal/proxy":             "",
		"internal/engine":            "",
	} {
		got, _ := owner(give)
		if got != want {
			t.Errorf("owner(%q) = %q, want %q", give, got, want)
		}
	}
}

// quicModule is imported by internal/mesh alone: every other package,
// tests included, sees mesh.Stream and mesh.StreamCode instead.
const quicModule = "github.com/quic-go/quic-go"

func TestQUICOnlyInMesh(t *testing.T) {
	for _, p := range listPackages(t) {
		from, _ := rel(p.ImportPath)
		if double, ok := owner(from); ok {
			from = double // a test double may import what its owner may
		}
		if from == "internal/mesh" {
			continue
		}
		for _, imp := range slices.Concat(p.Imports, p.TestImports, p.XTestImports) {
			if imp == quicModule || strings.HasPrefix(imp, quicModule+"/") {
				t.Errorf("%s imports %s; only internal/mesh may", p.ImportPath, imp)
			}
		}
	}
}
