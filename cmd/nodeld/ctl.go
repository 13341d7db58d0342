package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/dispatch"
)

const ctlUsage = `usage: nodeld ctl [--config FILE] [--socket PATH] [--json] VERB ARGS...

Verbs (NODE is a node id, a configured peer name, or "self"):
  describe NODE
  place NODE PACKAGE-DIR [--variant V] [--no-start]
  start NODE INSTANCE
  stop NODE INSTANCE [--grace DURATION]
  unload NODE INSTANCE
  status NODE [INSTANCE] [--departed]
  logs NODE INSTANCE

Exit status: 0 ok, 1 refused or failed, 2 usage, 3 unreachable or
indeterminate (a mutating call whose outcome is unknown).`

// ctlMargin is added to a call's own deadline for the daemon's reply.
const ctlMargin = 10 * time.Second

// cmdCtl sends one operator request to the local daemon's socket.
func cmdCtl(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ctl", stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, ctlUsage) }
	cfgPath := fs.String("config", "", "config file (default "+defaultConfigPath+")")
	socket := fs.String("socket", "", "operator socket (default from the config)")
	asJSON := fs.Bool("json", false, "print the raw result as JSON")
	variant := fs.String("variant", "", "place: the manifest variant (default: the first)")
	noStart := fs.Bool("no-start", false, "place: load without starting")
	grace := fs.Duration("grace", 0, "stop: grace before the kill")
	departed := fs.Bool("departed", false, "status: list departed instances too")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	req, err := ctlRequest(pos, set, *variant, *noStart, *grace, *departed)
	if err != nil {
		fmt.Fprintln(stderr, ctlUsage)
		return err
	}
	req.JSON = *asJSON

	path := *socket
	if path == "" {
		cfg, _, err := loadConfig(*cfgPath, true)
		if err != nil {
			return err
		}
		path = cfg.SocketPath()
	}
	timeout := ctl.CallTimeout + ctlMargin
	if req.Verb == dispatch.VerbPlace {
		timeout = ctl.PlaceTimeout + ctlMargin
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := dispatch.DialOperator(ctx, path, req)
	if err != nil {
		if errors.Is(err, dispatch.ErrDaemonNotRunning) {
			return &exitError{code: 3, err: fmt.Errorf("cannot reach the daemon at %s: is nodeld running?", path)}
		}
		return &exitError{code: 3, err: err}
	}
	return printCtl(stdout, req, resp, *asJSON)
}

// ctlRequest checks a verb's positionals and flags and builds its request.
func ctlRequest(pos []string, set map[string]bool, variant string, noStart bool, grace time.Duration, departed bool) (dispatch.OperatorRequest, error) {
	if len(pos) == 0 {
		return dispatch.OperatorRequest{}, usageError("ctl: no verb")
	}
	verb, rest := pos[0], pos[1:]
	allowed := map[string][]string{
		dispatch.VerbPlace:  {"variant", "no-start"},
		dispatch.VerbStop:   {"grace"},
		dispatch.VerbStatus: {"departed"},
	}
	for _, f := range []string{"variant", "no-start", "grace", "departed"} {
		if set[f] && !strings.Contains(" "+strings.Join(allowed[verb], " ")+" ", " "+f+" ") {
			return dispatch.OperatorRequest{}, usageError("ctl %s: --%s does not apply", verb, f)
		}
	}
	nargs := func(min, max int) error {
		if len(rest) < min || len(rest) > max {
			return usageError("ctl %s: wrong number of arguments", verb)
		}
		return nil
	}
	req := dispatch.OperatorRequest{Verb: verb}
	switch verb {
	case dispatch.VerbDescribe:
		if err := nargs(1, 1); err != nil {
			return req, err
		}
	case dispatch.VerbPlace:
		if err := nargs(2, 2); err != nil {
			return req, err
		}
		dir, err := filepath.Abs(rest[1])
		if err != nil {
			return req, usageError("ctl place: %v", err)
		}
		req.Args = dispatch.OperatorArgs{PackageDir: dir, Variant: variant, NoStart: noStart}
	case dispatch.VerbStart, dispatch.VerbStop, dispatch.VerbUnload, dispatch.VerbLogs:
		if err := nargs(2, 2); err != nil {
			return req, err
		}
		req.Args.Instance = rest[1]
		if verb == dispatch.VerbStop {
			if grace < 0 || grace > ctl.MaxStopGrace {
				return req, usageError("ctl stop: --grace %s outside [0, %s]", grace, ctl.MaxStopGrace)
			}
			req.Args.GraceMS = grace.Milliseconds()
		}
	case dispatch.VerbStatus:
		if err := nargs(1, 2); err != nil {
			return req, err
		}
		if len(rest) == 2 {
			if departed {
				return req, usageError("ctl status: --departed lists all instances; give no INSTANCE")
			}
			req.Args.Instance = rest[1]
		}
		req.Args.Departed = departed
	default:
		return req, usageError("ctl: unknown verb %q", verb)
	}
	req.Node = rest[0]
	return req, nil
}

// printCtl prints an answer and returns the exit status as an error.
func printCtl(stdout io.Writer, req dispatch.OperatorRequest, resp dispatch.OperatorResponse, asJSON bool) error {
	switch resp.Class {
	case dispatch.ClassOK:
	case dispatch.ClassRefused:
		return &exitError{code: 1, err: fmt.Errorf("%s refused by %s: %s: %s", req.Verb, req.Node, resp.Code, resp.Reason)}
	case dispatch.ClassUnreachable:
		return &exitError{code: 3, err: fmt.Errorf("%s: %s unreachable: %s", req.Verb, req.Node, resp.Reason)}
	case dispatch.ClassIndeterminate:
		return &exitError{code: 3, err: fmt.Errorf("%s on %s indeterminate (it may have happened; check with nodeld ctl status %s): %s",
			req.Verb, req.Node, req.Node, resp.Reason)}
	default:
		code := resp.Code
		if code == "" {
			code = "error"
		}
		return &exitError{code: 1, err: fmt.Errorf("%s: %s: %s", req.Verb, code, resp.Reason)}
	}
	if asJSON {
		var buf bytes.Buffer
		if err := json.Indent(&buf, resp.Result, "", "  "); err != nil {
			buf.Reset()
			buf.Write(resp.Result)
		}
		buf.WriteByte('\n')
		_, err := stdout.Write(buf.Bytes())
		return err
	}
	printReadable(stdout, req, resp)
	return nil
}

// printReadable prints a result for a person; a result it cannot decode
// is printed as indented JSON.
func printReadable(w io.Writer, req dispatch.OperatorRequest, resp dispatch.OperatorResponse) {
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
	case dispatch.VerbDescribe:
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
	case dispatch.VerbPlace:
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
	case dispatch.VerbStart:
		fmt.Fprintf(w, "started %s on %s\n", req.Args.Instance, resp.Node)
	case dispatch.VerbStop:
		fmt.Fprintf(w, "stopped %s on %s\n", req.Args.Instance, resp.Node)
	case dispatch.VerbUnload:
		fmt.Fprintf(w, "unloaded %s on %s\n", req.Args.Instance, resp.Node)
	case dispatch.VerbStatus:
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
	case dispatch.VerbLogs:
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
	default:
		asJSON()
	}
}

func stateText(s ctl.InstanceState) string {
	out := s.State
	if s.ExitCode != nil {
		out += fmt.Sprintf(" (exit %d)", *s.ExitCode)
	}
	if s.Detail != "" {
		out += ": " + s.Detail
	}
	return out
}
