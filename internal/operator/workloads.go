package operator

import (
	"time"

	"github.com/nodeld/nodeld/internal/plane"
)

// WorkloadDoc is one declared workload as the operator reads it.
type WorkloadDoc struct {
	Name     string `json:"name"`
	Package  string `json:"package"`
	Version  string `json:"version,omitempty"`
	Replicas int    `json:"replicas"`
	Placed   int    `json:"placed"`
	// State is placed, pending or unplaceable.
	State string `json:"state"`
	// Reason is the last failure to place it; Since is when it was first
	// given (RFC 3339).
	Reason      string `json:"reason,omitempty"`
	Since       string `json:"since,omitempty"`
	Attempts    int    `json:"attempts,omitempty"`
	NextAttempt string `json:"next_attempt,omitempty"`
	// OnDemand is an on-demand workload's state: cold, starting, ready
	// or idle; absent for a workload placed all the time.
	OnDemand string `json:"on_demand,omitempty"`
}

// WorkloadDocs are the controller's declarations as the operator reads
// them.
func WorkloadDocs(ds []plane.DeclarationView) []WorkloadDoc {
	out := make([]WorkloadDoc, len(ds))
	for i, d := range ds {
		out[i] = WorkloadDoc{Name: d.Name, Package: d.Package, Version: d.Version, Replicas: d.Replicas, Placed: d.Placed,
			State: d.State, Reason: d.Reason, Attempts: d.Attempts, OnDemand: d.OnDemand}
		if !d.Since.IsZero() {
			out[i].Since = d.Since.UTC().Format(time.RFC3339)
		}
		if !d.NextAttempt.IsZero() {
			out[i].NextAttempt = d.NextAttempt.UTC().Format(time.RFC3339)
		}
	}
	return out
}

// declarationCounts are the declared workloads by state, and the names of
// the unplaceable ones, for /v1/status.
func declarationCounts(ds []plane.DeclarationView) (byState map[string]int, unplaceable []string) {
	byState = map[string]int{}
	unplaceable = []string{}
	for _, d := range ds {
		byState[d.State]++
		if d.State == plane.DeclUnplaceable {
			unplaceable = append(unplaceable, d.Name)
		}
	}
	return byState, unplaceable
}
