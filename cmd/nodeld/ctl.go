package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/operator"
	"github.com/nodeld/nodeld/internal/plane"
)

const ctlUsage = `usage: nodeld ctl [--config FILE] [--socket PATH] [--json] VERB ARGS...

Verbs (NODE is "self", this node's node.name, a configured peer name, or a node id):
  describe NODE
  place [NODE] DIR|PACKAGE-ID [--variant V] [--no-start]
        [--prefer NODE]... [--avoid NODE]... [--dry-run] [--allow-emulated]
  start NODE INSTANCE
  start ID               (an instance the controller placed: instance id, decision id or its first 8+ characters;
                          a capped placement's cap is cleared, and it is placed again)
  stop NODE INSTANCE [--grace DURATION]
  unload NODE INSTANCE
  status NODE [INSTANCE] [--departed]
  logs NODE INSTANCE
  explain DECISION-ID    (or its first 8 or more characters)
  placements
  workloads              (the declared workloads: state, since when, last reason)
  nodes

When this node runs a controller (controller.enabled), place goes through
it: without NODE its engine chooses the node, with NODE it is pinned there;
a PACKAGE-ID (ID or ID@VERSION) comes from the package store (nodeld
package add); --dry-run prints the explanation and dispatches nothing;
--allow-emulated lets the engine choose an emulated variant when no node
fits a native one;
start, stop and unload of an instance it placed go through it (a
stopped instance is not moved when its node dies, one started again
is); explain,
placements and nodes read it. Without a controller, place needs NODE and
a DIR, and sends the package there directly.

Exit status: 0 ok, 1 refused or failed, 2 usage, 3 unreachable or
indeterminate (a mutating call whose outcome is unknown).`

// ctlMargin is added to a call's own deadline for the daemon's reply.
const ctlMargin = 10 * time.Second

// ctlPlaceTimeout bounds the wait for a place: a controller may try
// several candidates in turn, each within its place timeout.
const ctlPlaceTimeout = 15 * time.Minute

// listFlag is a flag that may be given several times, or once with a
// comma-separated list.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// ctlFlags are the verbs' flags.
type ctlFlags struct {
	variant  string
	noStart  bool
	grace    time.Duration
	departed bool
	prefer   listFlag
	avoid    listFlag
	dryRun   bool
	emulated bool
}

// cmdCtl sends one operator request to the local daemon's socket.
func cmdCtl(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ctl", stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, ctlUsage) }
	cfgPath := fs.String("config", "", "config file (default "+defaultConfigPath+")")
	socket := fs.String("socket", "", "operator socket (default from the config)")
	asJSON := fs.Bool("json", false, "print the raw result as JSON")
	var f ctlFlags
	fs.StringVar(&f.variant, "variant", "", "place: the manifest variant (default: the first)")
	fs.BoolVar(&f.noStart, "no-start", false, "place: load without starting")
	fs.DurationVar(&f.grace, "grace", 0, "stop: grace before the kill")
	fs.BoolVar(&f.departed, "departed", false, "status: list departed instances too")
	fs.Var(&f.prefer, "prefer", "place: a node the engine prefers (repeatable)")
	fs.Var(&f.avoid, "avoid", "place: a node the engine avoids (repeatable)")
	fs.BoolVar(&f.dryRun, "dry-run", false, "place: decide and explain, dispatch nothing")
	fs.BoolVar(&f.emulated, "allow-emulated", false, "place: an emulated variant may be chosen when no node fits a native one")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	req, err := ctlRequest(pos, set, f)
	if err != nil {
		fmt.Fprintln(stderr, ctlUsage)
		return err
	}
	req.JSON = *asJSON

	path, err := ctlSocket(*socket, *cfgPath, stderr)
	if err != nil {
		return err
	}
	timeout := ctl.CallTimeout + ctlMargin
	if req.Verb == operator.VerbPlace {
		timeout = ctlPlaceTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := operator.Dial(ctx, path, req)
	if err != nil {
		if errors.Is(err, operator.ErrDaemonNotRunning) {
			return &exitError{code: 3, err: fmt.Errorf("cannot reach the daemon at %s: is nodeld running?", path)}
		}
		return &exitError{code: 3, err: err}
	}
	return printCtl(stdout, req, resp, *asJSON)
}

// ctlRequest checks a verb's positionals and flags and builds its request.
func ctlRequest(pos []string, set map[string]bool, f ctlFlags) (operator.Request, error) {
	if len(pos) == 0 {
		return operator.Request{}, usageError("ctl: no verb")
	}
	verb, rest := pos[0], pos[1:]
	allowed := map[string][]string{
		operator.VerbPlace:  {"variant", "no-start", "prefer", "avoid", "dry-run", "allow-emulated"},
		operator.VerbStop:   {"grace"},
		operator.VerbStatus: {"departed"},
	}
	for _, fl := range []string{"variant", "no-start", "grace", "departed", "prefer", "avoid", "dry-run", "allow-emulated"} {
		if set[fl] && !slices.Contains(allowed[verb], fl) {
			return operator.Request{}, usageError("ctl %s: --%s does not apply", verb, fl)
		}
	}
	nargs := func(min, max int) error {
		if len(rest) < min || len(rest) > max {
			return usageError("ctl %s: wrong number of arguments", verb)
		}
		return nil
	}
	req := operator.Request{Verb: verb}
	switch verb {
	case operator.VerbDescribe:
		if err := nargs(1, 1); err != nil {
			return req, err
		}
	case operator.VerbPlace:
		if err := nargs(1, 2); err != nil {
			return req, err
		}
		req.Args = operator.Args{Variant: f.variant, NoStart: f.noStart, Prefer: f.prefer, Avoid: f.avoid, DryRun: f.dryRun, AllowEmulated: f.emulated}
		what := rest[len(rest)-1]
		if fi, err := os.Stat(what); err == nil && fi.IsDir() {
			dir, err := filepath.Abs(what)
			if err != nil {
				return req, usageError("ctl place: %v", err)
			}
			req.Args.PackageDir = dir
		} else if id, ok := packageRef(what); ok {
			req.Args.Package = id
		} else {
			return req, usageError("ctl place: %q is neither a package directory nor a package id (ID or ID@VERSION)", what)
		}
		if len(rest) == 2 {
			req.Node = rest[0]
		}
		return req, nil
	case operator.VerbStart, operator.VerbStop, operator.VerbUnload, operator.VerbLogs:
		if verb == operator.VerbStart && len(rest) == 1 {
			// start ID: an instance the controller placed, by its
			// instance id or decision id.
			req.Args.Instance = rest[0]
			return req, nil
		}
		if err := nargs(2, 2); err != nil {
			return req, err
		}
		req.Args.Instance = rest[1]
		if verb == operator.VerbStop {
			if f.grace < 0 || f.grace > ctl.MaxStopGrace {
				return req, usageError("ctl stop: --grace %s outside [0, %s]", f.grace, ctl.MaxStopGrace)
			}
			req.Args.GraceMS = f.grace.Milliseconds()
		}
	case operator.VerbStatus:
		if err := nargs(1, 2); err != nil {
			return req, err
		}
		if len(rest) == 2 {
			if f.departed {
				return req, usageError("ctl status: --departed lists all instances; give no INSTANCE")
			}
			req.Args.Instance = rest[1]
		}
		req.Args.Departed = f.departed
	case operator.VerbExplain:
		if err := nargs(1, 1); err != nil {
			return req, err
		}
		if !ctl.ValidDecisionPrefix(rest[0]) {
			return req, usageError("ctl explain: %q is not a decision id (%d to 64 lower-case hex characters: the id or a prefix of it)", rest[0], ctl.MinDecisionPrefix)
		}
		req.Args.DecisionID = rest[0]
		return req, nil
	case operator.VerbPlacements, operator.VerbNodes, operator.VerbWorkloads:
		return req, nargs(0, 0)
	default:
		return req, usageError("ctl: unknown verb %q", verb)
	}
	req.Node = rest[0]
	return req, nil
}

// printCtl prints an answer and returns the exit status as an error. A
// controller's place answers with its explanation whatever the outcome:
// it is printed before the error.
func printCtl(stdout io.Writer, req operator.Request, resp operator.Response, asJSON bool) error {
	if resp.ForwardedTo != "" && !asJSON {
		// The answer is the leader's: this controller is a follower.
		fmt.Fprintf(stdout, "forwarded to the leader %s (this controller is a follower)\n", resp.ForwardedTo)
	}
	if resp.Class == operator.ClassOK || len(resp.Result) > 0 && req.Verb == operator.VerbPlace {
		if asJSON {
			var buf bytes.Buffer
			if err := json.Indent(&buf, resp.Result, "", "  "); err != nil {
				buf.Reset()
				buf.Write(resp.Result)
			}
			buf.WriteByte('\n')
			if _, err := stdout.Write(buf.Bytes()); err != nil {
				return err
			}
		} else {
			printReadable(stdout, req, resp)
		}
	}
	node := req.Node
	if node == "" {
		node = "the controller"
	}
	switch resp.Class {
	case operator.ClassOK:
		return nil
	case operator.ClassRefused:
		if by := operator.RefusedBy(req, resp); by != "" {
			return &exitError{code: 1, err: fmt.Errorf("%s refused by %s: %s: %s", req.Verb, by, resp.Code, resp.Reason)}
		}
		return &exitError{code: 1, err: fmt.Errorf("%s refused: %s: %s", req.Verb, resp.Code, resp.Reason)}
	case operator.ClassUnreachable:
		if req.Node == "" {
			return &exitError{code: 3, err: fmt.Errorf("%s: unreachable: %s", req.Verb, resp.Reason)}
		}
		return &exitError{code: 3, err: fmt.Errorf("%s: %s unreachable: %s", req.Verb, req.Node, resp.Reason)}
	case operator.ClassIndeterminate:
		check := "nodeld ctl status " + req.Node
		if req.Node == "" {
			check = "nodeld ctl placements"
		}
		return &exitError{code: 3, err: fmt.Errorf("%s on %s indeterminate (it may have happened; check with %s): %s",
			req.Verb, node, check, resp.Reason)}
	default:
		code := resp.Code
		if code == "" {
			code = "error"
		}
		return &exitError{code: 1, err: fmt.Errorf("%s: %s: %s", req.Verb, code, resp.Reason)}
	}
}

// printReadable prints a result for a person; a result it cannot decode
// is printed as indented JSON.
func printReadable(w io.Writer, req operator.Request, resp operator.Response) {
	raw := resp.Result
	asJSON := func() {
		var buf bytes.Buffer
		if json.Indent(&buf, raw, "", "  ") != nil {
			buf.Reset()
			buf.Write(raw)
		}
		fmt.Fprintln(w, buf.String())
	}
	compact := func(r json.RawMessage) string {
		var buf bytes.Buffer
		if len(r) == 0 || json.Compact(&buf, r) != nil {
			return "none"
		}
		return buf.String()
	}
	switch req.Verb {
	case operator.VerbDescribe:
		var r ctl.DescribeResult
		if json.Unmarshal(raw, &r) != nil {
			asJSON()
			return
		}
		fmt.Fprintf(w, "node:          %s\n", resp.Node)
		if r.ChainHead != "" {
			fmt.Fprintf(w, "chain head:    %s\n", r.ChainHead)
		}
		fmt.Fprintf(w, "advertisement: %s\nfacts:         %s\n", compact(r.Advertisement), compact(r.Facts))
	case operator.VerbPlace:
		var cr operator.PlaceResult
		if json.Unmarshal(raw, &cr) == nil && cr.Explain != "" {
			printControllerPlace(w, req, cr)
			return
		}
		var r ctl.PlaceResult
		if json.Unmarshal(raw, &r) != nil || r.InstanceID == "" {
			asJSON()
			return
		}
		what := "placed"
		if req.Args.NoStart {
			what = "loaded"
		}
		fmt.Fprintf(w, "%s %s (%s, variant %s, runtime %s) on %s: %s\n", what, r.InstanceID, r.Package, r.Variant, r.Runtime, resp.Node, stateText(r.Status))
		fmt.Fprintf(w, "decision: %s\n", resp.DecisionID)
	case operator.VerbStart:
		var p operator.PlacementDoc
		if req.Node == "" && json.Unmarshal(raw, &p) == nil && p.InstanceID != "" {
			if p.Life == plane.LifeLost {
				// A capped placement: the start cleared its cap.
				fmt.Fprintf(w, "cap cleared: %s (decision %s), lost on %s, is placed again at the next tick\n", p.Workload, p.DecisionID, p.Node)
				return
			}
			fmt.Fprintf(w, "started %s on %s (decision %s)\n", p.InstanceID, p.Node, p.DecisionID)
			return
		}
		fmt.Fprintf(w, "started %s on %s\n", req.Args.Instance, resp.Node)
	case operator.VerbStop:
		fmt.Fprintf(w, "stopped %s on %s\n", req.Args.Instance, resp.Node)
	case operator.VerbUnload:
		fmt.Fprintf(w, "unloaded %s on %s\n", req.Args.Instance, resp.Node)
	case operator.VerbStatus:
		if req.Args.Instance != "" {
			var r ctl.InstanceStatus
			if json.Unmarshal(raw, &r) != nil || r.InstanceID == "" {
				asJSON()
				return
			}
			fmt.Fprintf(w, "%s: %s, lifecycle %s, restarts %d\n", r.InstanceID, stateText(r.Status), r.Lifecycle, r.Restarts)
			return
		}
		var r ctl.StatusList
		if json.Unmarshal(raw, &r) != nil {
			asJSON()
			return
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "INSTANCE\tPACKAGE\tVARIANT\tSTATE\tLIFECYCLE\tRESTARTS")
		for _, in := range r.Instances {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", in.InstanceID, in.Package, in.Variant, stateText(in.Status), in.Lifecycle, in.Restarts)
		}
		_ = tw.Flush()
		for _, id := range r.InFlight {
			fmt.Fprintf(w, "in flight: decision %s\n", id)
		}
		for _, dep := range r.Departed {
			fmt.Fprintf(w, "departed: %s (%s)\n", dep.InstanceID, dep.Reason)
		}
	case operator.VerbLogs:
		var r ctl.LogsResult
		if json.Unmarshal(raw, &r) != nil {
			asJSON()
			return
		}
		if r.Note != "" {
			fmt.Fprintf(w, "note: %s\n", r.Note)
		}
		if r.ExitCode != nil {
			fmt.Fprintf(w, "exit code: %d\n", *r.ExitCode)
		}
		if r.Truncated {
			fmt.Fprintln(w, "(truncated)")
		}
		fmt.Fprintf(w, "--- stdout ---\n%s", r.Stdout)
		if r.Stdout != "" && !strings.HasSuffix(r.Stdout, "\n") {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "--- stderr ---\n%s", r.Stderr)
		if r.Stderr != "" && !strings.HasSuffix(r.Stderr, "\n") {
			fmt.Fprintln(w)
		}
	case operator.VerbExplain:
		var r operator.ExplainResult
		if json.Unmarshal(raw, &r) != nil || r.Explain == "" {
			asJSON()
			return
		}
		fmt.Fprint(w, r.Explain)
	case operator.VerbPlacements:
		var ps []operator.PlacementDoc
		if json.Unmarshal(raw, &ps) != nil {
			asJSON()
			return
		}
		printPlacements(w, ps)
	case operator.VerbWorkloads:
		var ws []operator.WorkloadDoc
		if json.Unmarshal(raw, &ws) != nil {
			asJSON()
			return
		}
		printWorkloads(w, ws)
	case operator.VerbNodes:
		var ns []operator.NodeDoc
		if json.Unmarshal(raw, &ns) != nil {
			asJSON()
			return
		}
		printNodes(w, ns)
	default:
		asJSON()
	}
}

// printControllerPlace prints a controller's place: its explanation, then
// what became of it.
func printControllerPlace(w io.Writer, req operator.Request, r operator.PlaceResult) {
	fmt.Fprint(w, r.Explain)
	if !strings.HasSuffix(r.Explain, "\n") {
		fmt.Fprintln(w)
	}
	switch r.Outcome {
	case "placed":
		what := "placed"
		if req.Args.NoStart {
			what = "loaded"
		}
		fmt.Fprintf(w, "%s %s (variant %s) on %s: %s\n", what, r.InstanceID, r.Variant, r.Node, r.HostState)
	case "dry_run":
		if r.Node != "" {
			fmt.Fprintf(w, "dry run: would place on %s via %s; nothing dispatched\n", r.Node, r.Variant)
		} else {
			fmt.Fprintln(w, "dry run: unplaceable; nothing dispatched")
		}
	}
}

// printPlacements prints the controller's placements as a table.
func printPlacements(w io.Writer, ps []operator.PlacementDoc) {
	if len(ps) == 0 {
		fmt.Fprintln(w, "no placements")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DECISION\tWORKLOAD\tPACKAGE\tNODE\tVARIANT\tINSTANCE\tLIFE\tHOST STATE\tMOVES\tNOTE")
	for _, p := range ps {
		state := p.HostStateText()
		note := p.LastError
		if note == "" && p.LostReason != "" {
			note = "lost: " + p.LostReason
		}
		if p.ReplacedBy != "" {
			note = "replaced by " + shortHash(p.ReplacedBy)
			if p.LostReason != "" {
				note += " (lost: " + p.LostReason + ")"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s %s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", shortHash(p.DecisionID), p.Workload, p.Package, p.Version,
			p.Node, p.Variant, p.InstanceID, p.Life, state, len(p.Moves), note)
	}
	_ = tw.Flush()
}

// printNodes prints the controller's targets as a table.
func printNodes(w io.Writer, ns []operator.NodeDoc) {
	if len(ns) == 0 {
		fmt.Fprintln(w, "no nodes (mesh.peers with a known key, and this node when host.enabled)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tNAME\tTIER\tCLASS\tLIVENESS\tFACTS AGE\tMEM FREE\tVRAM FREE\tINSTANCES\tPLACEMENTS")
	for _, n := range ns {
		name, class := n.Name, n.Class
		if name == "" {
			name = "-"
		}
		if class == "" {
			class = "-"
		}
		age, mem, vram, insts := "-", "-", "-", "-"
		if n.HasFacts {
			age = (time.Duration(n.FactsAgeS * float64(time.Second))).Round(time.Second).String()
			mem = operator.HumanBytes(n.MemFree, "") + "/" + operator.HumanBytes(n.MemTotal, "")
			if n.GPUs > 0 {
				vram = operator.HumanBytes(n.VRAMFree, "") + "/" + operator.HumanBytes(n.VRAMTotal, "")
			}
		}
		if n.Instances >= 0 {
			insts = strconv.Itoa(n.Instances)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", n.ID, name, n.Tier, class, n.Liveness, age, mem, vram, insts, n.Placements)
	}
	_ = tw.Flush()
}

// stateText renders a host's instance state: "failed (exit 1)
// (restart_budget) since 2026-12-05T15:04:05Z: <detail>".
func stateText(s ctl.InstanceState) string {
	out := s.State
	if s.ExitCode != nil {
		out += fmt.Sprintf(" (exit %d)", *s.ExitCode)
	}
	out += reasonSinceText(s.Reason, s.Since)
	if s.Detail != "" {
		out += ": " + s.Detail
	}
	return out
}

// reasonSinceText is " (<reason>) since <time>", each part only when set.
func reasonSinceText(reason string, since time.Time) string {
	out := ""
	if reason != "" {
		out += " (" + reason + ")"
	}
	if !since.IsZero() {
		out += " since " + since.UTC().Format(time.RFC3339)
	}
	return out
}

// packageRef splits a place argument that is a package id, "ID" or
// "ID@VERSION"; ok is false for anything else.
func packageRef(arg string) (string, bool) {
	id, version, hasVersion := strings.Cut(arg, "@")
	if !grammar.ValidName(id) || hasVersion && !grammar.ValidVersion(version) {
		return "", false
	}
	return arg, true
}

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

// ctlSocket is the operator socket of nodeld ctl: --socket, else the
// config's. A config file that does not load (exactly what a refused
// reload leaves behind while the daemon runs on the old one) still gives
// the socket path written in it (config.SocketPathOf), said on stderr;
// when even that cannot be read, the error says to pass --socket.
func ctlSocket(socket, cfgPath string, stderr io.Writer) (string, error) {
	if socket != "" {
		return socket, nil
	}
	cfg, _, err := loadConfig(cfgPath, true)
	if err == nil {
		return cfg.SocketPath(), nil
	}
	file := cfgPath
	if file == "" {
		file = defaultConfigPath
	}
	data, rerr := os.ReadFile(file)
	if rerr != nil {
		return "", fmt.Errorf("%w\n(pass --socket PATH to reach the daemon without the config)", err)
	}
	path, perr := config.SocketPathOf(data)
	if perr != nil {
		return "", fmt.Errorf("%w\n(the operator socket cannot be read from %s either: %v; pass --socket PATH)", err, file, perr)
	}
	if abs, aerr := filepath.Abs(path); aerr == nil {
		path = abs
	}
	fmt.Fprintf(stderr, "nodeld ctl: %s does not load; using the operator socket written in it, %s (--socket PATH chooses another)\n", file, path)
	return path, nil
}
