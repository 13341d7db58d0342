package main

// nodeld ctl workloads: every declared workload (controller.workloads)
// with its state and last reason, so that one the controller cannot
// place is seen where an operator looks, not only in the chain.

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nodeld/nodeld/internal/plane"
)

// verbWorkloads lists the declared workloads.
const verbWorkloads = "workloads"

// workloadDoc is one declared workload as the operator reads it.
type workloadDoc struct {
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
}

func workloadDocs(ds []plane.DeclarationView) []workloadDoc {
	out := make([]workloadDoc, len(ds))
	for i, d := range ds {
		out[i] = workloadDoc{Name: d.Name, Package: d.Package, Version: d.Version, Replicas: d.Replicas, Placed: d.Placed,
			State: d.State, Reason: d.Reason, Attempts: d.Attempts}
		if !d.Since.IsZero() {
			out[i].Since = d.Since.UTC().Format(time.RFC3339)
		}
		if !d.NextAttempt.IsZero() {
			out[i].NextAttempt = d.NextAttempt.UTC().Format(time.RFC3339)
		}
	}
	return out
}

// printWorkloads prints the declared workloads as a table.
func printWorkloads(w io.Writer, ws []workloadDoc) {
	if len(ws) == 0 {
		fmt.Fprintln(w, "no declared workloads (controller.workloads)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tPACKAGE\tREPLICAS\tSTATE\tSINCE\tATTEMPTS\tREASON")
	for _, d := range ws {
		version := d.Version
		if version == "" {
			version = "newest"
		}
		since, attempts, reason := "-", "-", "-"
		if d.Since != "" {
			since = d.Since
		}
		if d.Attempts > 0 {
			attempts = fmt.Sprint(d.Attempts)
		}
		if d.Reason != "" {
			reason = d.Reason
		}
		fmt.Fprintf(tw, "%s\t%s %s\t%d/%d\t%s\t%s\t%s\t%s\n", d.Name, d.Package, version, d.Placed, d.Replicas, d.State, since, attempts, reason)
	}
	_ = tw.Flush()
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

// declaredText is the status line of the declared workloads: counts by
// state, and which are unplaceable.
func declaredText(c *controllerDoc) string {
	s := countsText(c.DeclarationsByState, plane.DeclPlaced, plane.DeclPending, plane.DeclUnplaceable)
	if len(c.Unplaceable) > 0 {
		s += " (unplaceable: " + strings.Join(c.Unplaceable, ", ") + "; nodeld ctl workloads says why)"
	}
	return s
}
