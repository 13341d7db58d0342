package ctl

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/nodeld/nodeld/internal/grammar"
)

// DescribeResult is the result of describe. The host owns the shape of
// its parts; ctl carries them as raw JSON.
type DescribeResult struct {
	// Facts is the node's signed facts, or null.
	Facts json.RawMessage `json:"facts"`
	// Advertisement is the node's workload-host advertisement.
	Advertisement json.RawMessage `json:"advertisement"`
	// ChainHead is the hash of the node's last chain entry, if any.
	ChainHead string `json:"chain_head,omitempty"`
}

// PlaceParams is the body of place and load. The manifest and its
// signatures travel in the signed request, so the controller's decision
// authorises exactly the files that manifest lists, each pinned by size
// and SHA-256; the host fetches those and nothing else.
type PlaceParams struct {
	// Package is the package id; it must equal the manifest's.
	Package string `json:"package"`
	// Version is the package version; it must equal the manifest's.
	Version string `json:"version"`
	// Variant is the manifest variant chosen by the engine.
	Variant string `json:"variant"`
	// Manifest is the exact bytes of manifest.json.
	Manifest []byte `json:"manifest"`
	// ManifestSig is the exact bytes of manifest.sig.
	ManifestSig []byte `json:"manifest_sig"`
	// Start asks place to start the instance once loaded; load ignores it.
	Start bool `json:"start,omitempty"`
	// Config is the instance configuration (a JSON object, owned by the
	// host and runtime), or absent.
	Config json.RawMessage `json:"config,omitempty"`
}

// InstanceParams is the body of start, stop, unload, status and logs.
type InstanceParams struct {
	// InstanceID names the instance; only status may omit it (to list
	// every instance).
	InstanceID string `json:"instance_id,omitempty"`
	// GraceMS is stop's grace before the kill, in milliseconds; 0 means
	// DefaultStopGrace. Only stop may set it.
	GraceMS int64 `json:"grace_ms,omitempty"`
	// IncludeDeparted asks a status without an instance id to list the
	// instances recently taken down on purpose. Only status may set it.
	IncludeDeparted bool `json:"include_departed,omitempty"`
}

// Grace returns the stop grace: DefaultStopGrace when unset, capped at
// MaxStopGrace.
func (p InstanceParams) Grace() time.Duration {
	if p.GraceMS <= 0 {
		return DefaultStopGrace
	}
	return min(time.Duration(p.GraceMS)*time.Millisecond, MaxStopGrace)
}

// InstanceState is the runtime state of an instance.
//
// Since and Reason were added after the first release. Results are
// decoded strictly, so a node older than its hosts refuses their status
// answers that carry them: upgrade controllers before hosts. A host's
// place answer (PlaceResult) sets neither, so it decodes everywhere.
type InstanceState struct {
	// State is e.g. "loaded", "running", "stopped", "failed".
	State string `json:"state"`
	// ExitCode is set once the process has exited.
	ExitCode *int `json:"exit_code,omitempty"`
	// Detail explains the state, if there is more to say.
	Detail string `json:"detail,omitempty"`
	// Since is when the instance entered State (the host's clock).
	Since time.Time `json:"since,omitzero"`
	// Reason is why the instance is unhealthy, restarting or failed: one
	// of the Reason* codes, stable for a controller to branch on (Detail
	// says it in words); empty in the other states.
	Reason string `json:"reason,omitempty"`
}

// PlaceResult is the result of place and load.
type PlaceResult struct {
	InstanceID string        `json:"instance_id"`
	Runtime    string        `json:"runtime"`
	Variant    string        `json:"variant"`
	Package    string        `json:"package"`
	Status     InstanceState `json:"status"`
	Node       string        `json:"node"`
}

// StartResult is the result of start.
type StartResult struct {
	Started string `json:"started"`
}

// StopResult is the result of stop: the instance and its run evidence
// (host-owned).
type StopResult struct {
	Stopped  string          `json:"stopped"`
	Evidence json.RawMessage `json:"evidence,omitempty"`
}

// UnloadResult is the result of unload.
type UnloadResult struct {
	Unloaded string `json:"unloaded"`
}

// InstanceStatus is one instance in a status result.
type InstanceStatus struct {
	InstanceID string        `json:"instance_id"`
	Package    string        `json:"package,omitempty"`
	Variant    string        `json:"variant,omitempty"`
	DecisionID string        `json:"decision_id,omitempty"`
	Status     InstanceState `json:"status"`
	// Lifecycle is the host's lifecycle state of the instance.
	Lifecycle string `json:"lifecycle"`
	// Restarts counts restarts in the supervision window.
	Restarts int `json:"restarts,omitempty"`
	// Activity is what an inference instance has served, where it is
	// served (peers' requests included); nil for other instances.
	Activity *InstanceActivity `json:"activity,omitempty"`
}

// InstanceActivity is an inference instance's requests, as its host
// counts them: a controller unloads an idle on-demand instance by it, and
// never one with a request in flight.
type InstanceActivity struct {
	// InFlight counts requests forwarded to the instance and not yet
	// answered.
	InFlight int64 `json:"in_flight"`
	// LastRequest is when the host saw the last request to it answered
	// (the host's clock; at most one status read after it was, never
	// before); zero when none was since the host placed it.
	LastRequest time.Time `json:"last_request,omitzero"`
}

// Departed is an instance taken down on purpose ("unloaded", "revoked").
type Departed struct {
	InstanceID string `json:"instance_id"`
	Reason     string `json:"reason"`
}

// StatusList is the result of status without an instance id. InFlight
// lists the decision ids being placed right now, so a controller can
// reconcile a lost place answer.
type StatusList struct {
	InFlight  []string         `json:"in_flight"`
	Instances []InstanceStatus `json:"instances"`
	Departed  []Departed       `json:"departed,omitempty"`
}

// LogsResult is the result of logs: the output of the last captured run,
// or a note when there is none.
type LogsResult struct {
	InstanceID string `json:"instance_id"`
	Stdout     string `json:"stdout,omitempty"`
	Stderr     string `json:"stderr,omitempty"`
	ExitCode   *int   `json:"exit_code,omitempty"`
	Truncated  bool   `json:"truncated,omitempty"`
	Note       string `json:"note,omitempty"`
}

// invalidParams is the refusal of a body that does not decode or check.
func invalidParams(format string, args ...any) error {
	return NewRefusal(CodeInvalidRequest, fmt.Sprintf(format, args...))
}

// DecodePlaceParams strictly decodes and checks the body of place or load.
// Its errors are *Refusal with CodeInvalidRequest.
func DecodePlaceParams(body json.RawMessage) (PlaceParams, error) {
	var p PlaceParams
	if err := decodeStrict(body, &p); err != nil {
		return PlaceParams{}, invalidParams("place body: %v", err)
	}
	switch {
	case !grammar.ValidName(p.Package):
		return PlaceParams{}, invalidParams("place body: bad package id")
	case !grammar.ValidVersion(p.Version):
		return PlaceParams{}, invalidParams("place body: bad version")
	case !grammar.ValidName(p.Variant):
		return PlaceParams{}, invalidParams("place body: bad variant")
	case len(p.Manifest) == 0 || len(p.Manifest) > MaxManifestBytes:
		return PlaceParams{}, invalidParams("place body: manifest of %d bytes, want 1..%d", len(p.Manifest), MaxManifestBytes)
	case len(p.ManifestSig) == 0 || len(p.ManifestSig) > MaxManifestSigBytes:
		return PlaceParams{}, invalidParams("place body: manifest signature of %d bytes, want 1..%d", len(p.ManifestSig), MaxManifestSigBytes)
	case len(p.Config) > MaxInstanceConfigBytes:
		return PlaceParams{}, invalidParams("place body: config of %d bytes, bound %d", len(p.Config), MaxInstanceConfigBytes)
	}
	if len(p.Config) > 0 {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(p.Config, &obj); err != nil || obj == nil {
			return PlaceParams{}, invalidParams("place body: config is not a JSON object")
		}
	}
	return p, nil
}

// DecodeInstanceParams strictly decodes and checks the body of start,
// stop, unload, status or logs; a null or absent body is an empty one.
// Its errors are *Refusal with CodeInvalidRequest.
func DecodeInstanceParams(method Method, body json.RawMessage) (InstanceParams, error) {
	switch method {
	case MethodStart, MethodStop, MethodUnload, MethodStatus, MethodLogs:
	default:
		return InstanceParams{}, invalidParams("%q takes no instance body", method)
	}
	var p InstanceParams
	if len(body) > 0 && string(body) != "null" {
		if err := decodeStrict(body, &p); err != nil {
			return InstanceParams{}, invalidParams("instance body: %v", err)
		}
	}
	switch {
	case p.InstanceID == "" && method != MethodStatus:
		return InstanceParams{}, invalidParams("instance_id required")
	case p.InstanceID != "" && !grammar.ValidInstanceID(p.InstanceID):
		return InstanceParams{}, invalidParams("bad instance_id")
	case p.GraceMS != 0 && method != MethodStop:
		return InstanceParams{}, invalidParams("grace_ms is only for stop")
	case p.GraceMS < 0:
		return InstanceParams{}, invalidParams("negative grace_ms")
	case p.IncludeDeparted && (method != MethodStatus || p.InstanceID != ""):
		return InstanceParams{}, invalidParams("include_departed is only for a status list")
	}
	return p, nil
}

// DecodeResult strictly decodes a verified result onto v (one of the
// result types above), rejecting unknown fields and trailing data.
func DecodeResult(raw json.RawMessage, v any) error {
	if err := decodeStrict(raw, v); err != nil {
		return fmt.Errorf("decode ctl result: %w", err)
	}
	return nil
}
