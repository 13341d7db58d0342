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

// DecodeDescribe reads the signed facts out of a verified describe
// result (ctl.DescribeResult), strictly: unknown fields and trailing data
// are refused. The facts are not verified here; the controller verifies
// them against the target's pinned key when it caches them.
func DecodeDescribe(result json.RawMessage) (facts.Signed, error) {
	var res ctl.DescribeResult
	if err := ctl.DecodeResult(result, &res); err != nil {
		return facts.Signed{}, fmt.Errorf("describe: %w", err)
	}
	raw := bytes.TrimSpace(res.Facts)
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
