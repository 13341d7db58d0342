package host

import (
	"context"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/sandbox"
	"github.com/nodeld/nodeld/internal/table"
)

// readModel answers what the host is doing and changes nothing: describe,
// status and logs for workload.ctl, the workload-host advertisement and
// the host's part of /v1/status. It reads the registry, the instances and
// the config, each under its own lock, and has none of its own.
type readModel struct {
	self   *identity.Identity
	facts  *facts.Source // nil: describe answers null facts
	audit  Auditor       // its Head, for describe
	config func() Config
	reg    *registry
	iso    *isolation
	now    func() time.Time
}

// describe returns the signed facts, the advertisement and the chain head.
func (v *readModel) describe(ctx context.Context) (any, *ctl.Refusal) {
	res := ctl.DescribeResult{Facts: json.RawMessage("null")}
	if v.facts != nil {
		signed, err := v.facts.Signed(ctx)
		if err != nil {
			return nil, ctl.NewRefusal(ctl.CodeRuntime, "facts: "+err.Error())
		}
		b, err := json.Marshal(signed)
		if err != nil {
			return nil, ctl.NewRefusal(ctl.CodeRuntime, "facts not encodable")
		}
		res.Facts = b
	}
	ad, err := json.Marshal(v.advertisement(v.now()))
	if err != nil {
		return nil, ctl.NewRefusal(ctl.CodeRuntime, "advertisement not encodable")
	}
	res.Advertisement = ad
	_, res.ChainHead = v.audit.Head()
	return res, nil
}

// advertisement returns the workload-host advertisement (ctl.HostAdvertName):
// the methods, ctl.VersionTerm (the highest request version it accepts: a
// controller can tell a host that fences by term from an older one, which
// would refuse its calls) and the metadata of ctl.HostMetadata (instances,
// in_flight, enabled and label.<k>).
func (v *readModel) advertisement(now time.Time) table.Advertisement {
	instances, inFlight := v.reg.counts()
	cfg := v.config()
	md := ctl.HostMetadata{
		Instances: instances,
		InFlight:  inFlight,
		Enabled:   cfg.Enabled,
		Labels:    cfg.Labels,
	}.Metadata()
	methods := make([]string, 0, 8)
	for _, m := range ctl.Methods() {
		methods = append(methods, string(m))
	}
	return table.Advertisement{
		Name: ctl.HostAdvertName, NodeID: v.self.ID(), Methods: methods, Version: strconv.Itoa(ctl.VersionTerm),
		Metadata: md, LastUpdated: now.Unix(),
	}
}

// hostStatus returns in-flight decisions, instances and departed instances,
// each sorted (in-flight by start time, instances by id).
func (v *readModel) hostStatus() HostStatus {
	fl, insts, departed := v.reg.listing(true)
	st := HostStatus{Enabled: v.config().Enabled, InFlight: fl, Departed: departed}
	if sup, ok := v.iso.support(); ok {
		st.Isolation = &sup
	}
	for _, in := range insts {
		snap := in.snapshot()
		ep, _ := in.managed.Endpoint()
		st.Instances = append(st.Instances, InstanceInfo{
			ID: in.id, DecisionID: in.decision, Package: in.pkgID, Version: in.version, Variant: in.variant,
			Role: in.role, Runtime: string(in.kind), State: snap.state, Since: snap.since, Reason: snap.reason, Restarts: snap.restarts,
			Endpoint: ep, Detail: snap.detail,
		})
	}
	return st
}

// HostStatus is the host's part of /v1/status.
type HostStatus struct {
	Enabled   bool             `json:"enabled"`
	InFlight  []InFlightStatus `json:"in_flight"`
	Instances []InstanceInfo   `json:"instances"`
	Departed  []ctl.Departed   `json:"departed"`
	// Isolation is what the host enforces on the instances it starts;
	// nil when it isolates nothing.
	Isolation *sandbox.Support `json:"isolation,omitempty"`
	// ControllerTerm is the highest raft term the host has seen from the
	// controllers host.controllers names now (Host.ControllerTerm); absent
	// before any.
	ControllerTerm uint64 `json:"controller_term,omitempty"`
}

// InFlightStatus is a place being handled.
type InFlightStatus struct {
	DecisionID string    `json:"decision_id"`
	Package    string    `json:"package,omitempty"`
	Version    string    `json:"version,omitempty"`
	InstanceID string    `json:"instance_id,omitempty"`
	Since      time.Time `json:"since"`
}

// InstanceInfo is one instance in HostStatus.
type InstanceInfo struct {
	ID         string `json:"id"`
	DecisionID string `json:"decision_id"`
	Package    string `json:"package"`
	Version    string `json:"version"`
	Variant    string `json:"variant"`
	Role       string `json:"role,omitempty"`
	Runtime    string `json:"runtime"`
	State      string `json:"state"`
	// Since is when the instance entered State.
	Since time.Time `json:"since,omitzero"`
	// Reason is why it is unhealthy, restarting or failed (a ctl.Reason*
	// code).
	Reason   string `json:"reason,omitempty"`
	Restarts int    `json:"restarts"`
	Endpoint string `json:"endpoint,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

func (in *instance) ctlStatus() ctl.InstanceStatus {
	snap := in.snapshot()
	st := ctl.InstanceStatus{
		InstanceID: in.id, Package: in.pkgID, Variant: in.variant, DecisionID: in.decision,
		Status: snap.wireState(), Lifecycle: snap.state, Restarts: snap.restarts,
		Activity: in.activity(),
	}
	if ex, ok := in.lastExit(); ok {
		code := ex.Code
		st.Status.ExitCode = &code
	}
	return st
}

// status lists in-flight decisions first, then instances, then (when
// asked) departed instances; or one instance.
func (v *readModel) status(p ctl.InstanceParams) (any, *ctl.Refusal) {
	if p.InstanceID != "" {
		in, r := v.reg.lookup(p.InstanceID)
		if r != nil {
			return nil, r
		}
		return in.ctlStatus(), nil
	}
	fl, insts, departed := v.reg.listing(p.IncludeDeparted)
	if p.IncludeDeparted {
		departed = append([]ctl.Departed{}, departed...)
	}
	out := ctl.StatusList{InFlight: make([]string, 0, len(fl)), Instances: make([]ctl.InstanceStatus, 0, len(insts)), Departed: departed}
	for _, f := range fl {
		out.InFlight = append(out.InFlight, f.DecisionID)
	}
	for _, in := range insts {
		out.Instances = append(out.Instances, in.ctlStatus())
	}
	return out, nil
}

// logs returns the last run's output, each stream capped at MaxLogBytes
// (the newest bytes, cut on a UTF-8 boundary).
func (v *readModel) logs(p ctl.InstanceParams) (any, *ctl.Refusal) {
	in, r := v.reg.lookup(p.InstanceID)
	if r != nil {
		return nil, r
	}
	if !in.snapshot().started {
		return ctl.LogsResult{InstanceID: in.id, Note: "no run yet"}, nil
	}
	stdout, stderr := in.managed.Logs()
	res := ctl.LogsResult{InstanceID: in.id}
	var cut1, cut2 bool
	res.Stdout, cut1 = tailUTF8(stdout, MaxLogBytes)
	res.Stderr, cut2 = tailUTF8(stderr, MaxLogBytes)
	res.Truncated = cut1 || cut2
	if ex, ok := in.lastExit(); ok {
		code := ex.Code
		res.ExitCode = &code
	}
	return res, nil
}

// tailUTF8 keeps the last n bytes of b, starting on a rune boundary, as a
// valid UTF-8 string.
func tailUTF8(b []byte, n int) (string, bool) {
	cut := false
	if len(b) > n {
		b = b[len(b)-n:]
		cut = true
		for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
			b = b[1:]
		}
	}
	return string(b), cut
}
