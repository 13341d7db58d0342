package plane

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/facts"
)

// ErrNoFacts is wrapped by DecodeDescribe for a describe answer that
// carries no signed facts: such a node cannot be placed on.
var ErrNoFacts = errors.New("sent no signed facts")

// DecodeDescribe reads a verified describe result (ctl.DescribeResult):
// the signed facts, strictly (unknown fields and trailing data are
// refused), and what the node's workload-host advertisement says of its
// host (Description.Host; nil, with HostNote saying why, when it carries
// none the controller can read: such a node is not placed on, but its
// describe still counts as contact). The facts are not verified here; the
// controller verifies them against the target's pinned key when it
// caches them. Status is left nil.
func DecodeDescribe(result json.RawMessage) (Description, error) {
	var res ctl.DescribeResult
	if err := ctl.DecodeResult(result, &res); err != nil {
		return Description{}, fmt.Errorf("describe: %w", err)
	}
	s, err := decodeSignedFacts(res.Facts)
	if err != nil {
		return Description{}, err
	}
	d := Description{Facts: s}
	d.Host, d.HostNote = decodeHostAdvert(res.Advertisement)
	return d, nil
}

// hostAdvert is the part of a workload-host advertisement (the table's
// Advertisement) the controller reads; other fields are ignored, so a
// newer host may add some.
type hostAdvert struct {
	Name     string            `json:"name"`
	Metadata map[string]string `json:"metadata"`
}

// decodeHostAdvert reads the host metadata of a describe's advertisement;
// nil and why when there is none, or none readable.
func decodeHostAdvert(raw json.RawMessage) (*ctl.HostMetadata, string) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, "its describe shows no workload host"
	}
	var ad hostAdvert
	if err := json.Unmarshal(raw, &ad); err != nil {
		return nil, "its describe's host advertisement is not readable: " + err.Error()
	}
	if ad.Name != ctl.HostAdvertName {
		return nil, fmt.Sprintf("its describe shows no workload host (advertisement %.64q)", ad.Name)
	}
	m, err := ctl.ParseHostMetadata(ad.Metadata)
	if err != nil {
		return nil, "its describe's host advertisement is not readable: " + err.Error()
	}
	return &m, ""
}

// decodeSignedFacts reads the signed facts of a describe, strictly.
func decodeSignedFacts(fs json.RawMessage) (facts.Signed, error) {
	raw := bytes.TrimSpace(fs)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return facts.Signed{}, fmt.Errorf("describe: %w", ErrNoFacts)
	}
	var s facts.Signed
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return facts.Signed{}, fmt.Errorf("describe: signed facts: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return facts.Signed{}, errors.New("describe: signed facts: trailing data")
	}
	if len(s.Payload) == 0 || s.PublicKey == "" || s.Signature == "" {
		return facts.Signed{}, fmt.Errorf("describe: signed facts without payload, key or signature: %w", ErrNoFacts)
	}
	return s, nil
}
