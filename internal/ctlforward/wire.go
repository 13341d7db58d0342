package ctlforward

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/operator"
)

// Frame types of a KindOperator stream: one request, then one answer.
const (
	FrameRequest  mesh.FrameType = 1
	FrameResponse mesh.FrameType = 2
)

// Stream codes a KindOperator stream is reset with. The mesh's own codes
// are 0x1xx and KindRaft's 0x2xx; these are KindOperator's, stable on the
// wire.
const (
	// CodeNotVoter: the peer that opened the stream is not a controller
	// voter here.
	CodeNotVoter mesh.StreamCode = 0x301
	// CodeMalformed: the request frame was not one valid request.
	CodeMalformed mesh.StreamCode = 0x302
	// CodeNotServing: this node serves no forwarded requests (no
	// controller, or shutting down).
	CodeNotServing mesh.StreamCode = 0x303
)

// decodeStrict decodes one JSON object into v: unknown fields and
// anything after the object are refused.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the object")
	}
	return nil
}

// decodeRequest reads a forwarded request frame's payload: one operator
// Request, strictly, with a verb.
func decodeRequest(b []byte) (operator.Request, error) {
	if len(b) > MaxRequestBytes {
		return operator.Request{}, fmt.Errorf("request of %d bytes, bound %d", len(b), MaxRequestBytes)
	}
	var req operator.Request
	if err := decodeStrict(b, &req); err != nil {
		return operator.Request{}, fmt.Errorf("decode forwarded request: %w", err)
	}
	if req.Verb == "" {
		return operator.Request{}, errors.New("decode forwarded request: no verb")
	}
	return req, nil
}

// classes are the operator response classes an answer may carry.
var classes = map[string]bool{operator.ClassOK: true, operator.ClassRefused: true, operator.ClassUnreachable: true,
	operator.ClassIndeterminate: true, operator.ClassError: true}

// decodeResponse reads an answer frame's payload: one operator Response,
// strictly, of a known class, ok exactly when the class is, and never
// itself forwarded (the leader does not forward again).
func decodeResponse(b []byte) (operator.Response, error) {
	if len(b) > MaxResponseBytes {
		return operator.Response{}, fmt.Errorf("answer of %d bytes, bound %d", len(b), MaxResponseBytes)
	}
	var resp operator.Response
	if err := decodeStrict(b, &resp); err != nil {
		return operator.Response{}, fmt.Errorf("decode forwarded answer: %w", err)
	}
	switch {
	case !classes[resp.Class]:
		return operator.Response{}, fmt.Errorf("decode forwarded answer: class %q", resp.Class)
	case resp.OK != (resp.Class == operator.ClassOK):
		return operator.Response{}, fmt.Errorf("decode forwarded answer: ok %v with class %s", resp.OK, resp.Class)
	case resp.ForwardedTo != "":
		return operator.Response{}, errors.New("decode forwarded answer: forwarded again")
	}
	return resp, nil
}

// encodeResponse encodes an answer within MaxResponseBytes: one whose
// result does not fit goes without it, saying so.
func encodeResponse(resp operator.Response) []byte {
	b, err := json.Marshal(resp)
	if err == nil && len(b) <= MaxResponseBytes {
		return b
	}
	n := len(b)
	resp.Result = nil
	resp.Reason = fmt.Sprintf("%s (its result of %d bytes is too large to forward: run nodeld ctl on the leader to read it)", resp.Reason, n)
	if len(resp.Reason) > MaxResponseBytes/8 {
		resp.Reason = resp.Reason[:MaxResponseBytes/8]
	}
	if b, err = json.Marshal(resp); err != nil {
		b, _ = json.Marshal(operator.Response{Class: operator.ClassError, Code: operator.CodeInternal, Reason: "answer not encodable"})
	}
	return b
}
