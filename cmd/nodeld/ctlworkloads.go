package main

// nodeld ctl workloads: every declared workload (controller.workloads)
// with its state and last reason, so that one the controller cannot
// place is seen where an operator looks, not only in the chain.

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/nodeld/nodeld/internal/operator"
	"github.com/nodeld/nodeld/internal/plane"
)

// printWorkloads prints the declared workloads as a table.
func printWorkloads(w io.Writer, ws []operator.WorkloadDoc) {
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
		state := d.State
		if d.OnDemand != "" && d.State != plane.DeclUnplaceable {
			// An on-demand workload: cold, starting, ready or idle, and
			// its replicas are those demanded now.
			state = "on-demand " + d.OnDemand
		}
		fmt.Fprintf(tw, "%s\t%s %s\t%d/%d\t%s\t%s\t%s\t%s\n", d.Name, d.Package, version, d.Placed, d.Replicas, state, since, attempts, reason)
	}
	_ = tw.Flush()
}

// declaredText is the status line of the declared workloads: counts by
// state, and which are unplaceable.
func declaredText(c *operator.ControllerDoc) string {
	s := countsText(c.DeclarationsByState, plane.DeclPlaced, plane.DeclPending, plane.DeclUnplaceable)
	if len(c.Unplaceable) > 0 {
		s += " (unplaceable: " + strings.Join(c.Unplaceable, ", ") + "; nodeld ctl workloads says why)"
	}
	if len(c.OnDemand) > 0 {
		// The on-demand workloads' states, by name.
		parts := make([]string, 0, len(c.OnDemand))
		for _, name := range slices.Sorted(maps.Keys(c.OnDemand)) {
			parts = append(parts, name+" "+c.OnDemand[name])
		}
		s += "; on demand: " + strings.Join(parts, ", ")
	}
	return s
}
