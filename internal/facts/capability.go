package facts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/nodeld/nodeld/internal/grammar"
)

// Capability is one capability record (reference 3.3): something the node
// has, as the placement engine matches it against a package's
// requirements. IDs follow grammar.ValidCapabilityRecordID and may repeat
// (two identical GPUs, one perf record per metric); the trust family is
// never allowed.
type Capability struct {
	// ID names what is described ("accel.gpu.nvidia.geforce-rtx-4090").
	ID string `json:"id"`
	// Attrs are named values: names by grammar.ValidAttrName, at most
	// grammar.MaxCapabilityAttrs.
	Attrs map[string]grammar.Value `json:"attrs,omitempty"`
	// Provenance is how the node knows it: grammar.ProvenanceClaimed
	// (configuration), ProvenanceProbed or ProvenanceMeasured.
	Provenance string `json:"provenance"`
	// State is grammar.StateAvailable, StateBusy, StateReserved or
	// StateDegraded. Decoding takes an absent state as available.
	State string `json:"state"`
	// Exclusive says the capability cannot be shared while busy. Probe
	// marks nothing exclusive; requirements ask for exclusive use.
	Exclusive bool `json:"exclusive,omitempty"`
}

// Attr returns the attribute called name, and whether there is one.
func (c Capability) Attr(name string) (grammar.Value, bool) {
	v, ok := c.Attrs[name]
	return v, ok
}

// validate reports the first problem of c.
func (c Capability) validate() error {
	if !grammar.ValidCapabilityRecordID(c.ID) {
		return fmt.Errorf("id %q is not a capability record id (at least %d dot-separated words of %s, at most %d words and %d bytes)",
			clip(c.ID), grammar.MinCapabilityRecordSegments, "a-z 0-9 _ -", grammar.MaxCapabilitySegments, grammar.MaxCapabilityLen)
	}
	if grammar.CapabilityFamily(c.ID) == grammar.TrustFamily {
		return fmt.Errorf("%q is in the %s family: trust is assigned by operators, never claimed", c.ID, grammar.TrustFamily)
	}
	if _, ok := grammar.ProvenanceRank(c.Provenance); !ok {
		return fmt.Errorf("%s: provenance %q is not claimed, probed or measured", c.ID, clip(c.Provenance))
	}
	if !grammar.ValidCapabilityState(c.State) {
		return fmt.Errorf("%s: state %q is not available, busy, reserved or degraded", c.ID, clip(c.State))
	}
	if len(c.Attrs) > grammar.MaxCapabilityAttrs {
		return fmt.Errorf("%s: %d attributes, at most %d", c.ID, len(c.Attrs), grammar.MaxCapabilityAttrs)
	}
	for _, name := range slices.Sorted(maps.Keys(c.Attrs)) {
		if !grammar.ValidAttrName(name) {
			return fmt.Errorf("%s: attribute name %q is not 1 to %d bytes of a-z 0-9 _ starting with a-z", c.ID, clip(name), grammar.MaxAttrNameLen)
		}
		if err := c.Attrs[name].Check(); err != nil {
			return fmt.Errorf("%s: attribute %s: %w", c.ID, name, err)
		}
	}
	return nil
}

// clone deep-copies c (Values are immutable).
func (c Capability) clone() Capability {
	c.Attrs = maps.Clone(c.Attrs)
	return c
}

// Load is the node's load (reference 3.3): the share of its capabilities
// that are busy or reserved, from 0 to 1. ok is false when there are no
// capabilities, so the load is unknown (old facts, or none probed).
func (f *Facts) Load() (load float64, ok bool) {
	if len(f.Capabilities) == 0 {
		return 0, false
	}
	busy := 0
	for _, c := range f.Capabilities {
		if c.State == grammar.StateBusy || c.State == grammar.StateReserved {
			busy++
		}
	}
	return float64(busy) / float64(len(f.Capabilities)), true
}

// UnmarshalJSON decodes facts strictly (unknown fields are errors) and
// counts capability records as they are read, refusing the one past
// MaxCapabilities before decoding it.
func (f *Facts) UnmarshalJSON(data []byte) error {
	type plain Facts // without methods, so decoding does not recurse
	var aux struct {
		plain
		Capabilities json.RawMessage `json:"capabilities,omitempty"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&aux); err != nil {
		return err
	}
	caps, err := decodeCapabilities(aux.Capabilities)
	if err != nil {
		return fmt.Errorf("capabilities: %w", err)
	}
	*f = Facts(aux.plain)
	f.Capabilities = caps
	return nil
}

// decodeCapabilities decodes a JSON array of capability records (or null,
// or nothing), at most MaxCapabilities.
func decodeCapabilities(raw json.RawMessage) ([]Capability, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := expectDelim(dec, '['); err != nil {
		return nil, err
	}
	var out []Capability
	for dec.More() {
		if len(out) == MaxCapabilities {
			return nil, fmt.Errorf("more than %d records", MaxCapabilities)
		}
		var c Capability
		if err := dec.Decode(&c); err != nil {
			return nil, fmt.Errorf("record %d: %w", len(out), err)
		}
		out = append(out, c)
	}
	if err := expectDelim(dec, ']'); err != nil {
		return nil, err
	}
	return out, nil
}

// Keys of a capability record in JSON.
const (
	keyID         = "id"
	keyAttrs      = "attrs"
	keyProvenance = "provenance"
	keyState      = "state"
	keyExclusive  = "exclusive"
)

// UnmarshalJSON decodes one capability record strictly: unknown and
// repeated keys are errors, attributes are counted, named and checked as
// they are read (the one past grammar.MaxCapabilityAttrs is refused
// before its value is decoded), and an absent state is available. The
// remaining rules (id, provenance, state) are checked by Facts.Validate.
func (c *Capability) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := expectDelim(dec, '{'); err != nil {
		return err
	}
	out := Capability{State: grammar.StateAvailable}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if seen[key] {
			return fmt.Errorf("repeated key %q", key)
		}
		seen[key] = true
		switch key {
		case keyID:
			err = dec.Decode(&out.ID)
		case keyProvenance:
			err = dec.Decode(&out.Provenance)
		case keyState:
			err = dec.Decode(&out.State)
		case keyExclusive:
			err = dec.Decode(&out.Exclusive)
		case keyAttrs:
			out.Attrs, err = decodeAttrs(dec)
		default:
			return fmt.Errorf("unknown key %q", clip(key))
		}
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the record")
	}
	*c = out
	return nil
}

// decodeAttrs decodes an attribute object from dec.
func decodeAttrs(dec *json.Decoder) (map[string]grammar.Value, error) {
	if err := expectDelim(dec, '{'); err != nil {
		return nil, err
	}
	attrs := map[string]grammar.Value{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, _ := tok.(string)
		switch {
		case len(attrs) == grammar.MaxCapabilityAttrs:
			return nil, fmt.Errorf("more than %d attributes", grammar.MaxCapabilityAttrs)
		case !grammar.ValidAttrName(name):
			return nil, fmt.Errorf("attribute name %q is not 1 to %d bytes of a-z 0-9 _ starting with a-z", clip(name), grammar.MaxAttrNameLen)
		}
		if _, dup := attrs[name]; dup {
			return nil, fmt.Errorf("repeated attribute %q", name)
		}
		var v grammar.Value
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("attribute %s: %w", name, err)
		}
		attrs[name] = v
	}
	if err := expectDelim(dec, '}'); err != nil {
		return nil, err
	}
	if len(attrs) == 0 {
		return nil, nil // as encoded: omitted
	}
	return attrs, nil
}

// expectDelim reads the next token and requires it to be d.
func expectDelim(dec *json.Decoder, d json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if got, ok := tok.(json.Delim); !ok || got != d {
		return fmt.Errorf("want %q, got %v", d, tok)
	}
	return nil
}

// clip bounds untrusted strings quoted in error messages.
func clip(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
