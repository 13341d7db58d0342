package pkg

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// maxJSONDepth bounds the nesting of any JSON document this package
// decodes; the deepest legitimate one (a manifest: variants, a variant,
// its requirements, a requirement, its predicates, a predicate, an "in"
// list) nests eight levels.
const maxJSONDepth = 16

// decodeStrict decodes one JSON value from data into v: unknown fields,
// duplicate object keys, nesting deeper than maxJSONDepth and trailing
// data are errors. Callers bound len(data) first.
func decodeStrict(data []byte, v any) error {
	if err := checkJSONShape(data); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// checkJSONShape walks data's tokens and refuses duplicate object keys
// (encoding/json would silently keep the last one) and excessive nesting.
func checkJSONShape(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	var stack []jsonFrame
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if n := len(stack); n > 0 && stack[n-1].object {
			top := &stack[n-1]
			if top.keyNext {
				if d, ok := tok.(json.Delim); ok && d == '}' {
					stack = stack[:n-1]
					markValueDone(stack)
					continue
				}
				key, ok := tok.(string)
				if !ok {
					return errors.New("object key is not a string")
				}
				if _, dup := top.keys[key]; dup {
					return fmt.Errorf("duplicate key %q", key)
				}
				top.keys[key] = struct{}{}
				top.keyNext = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			if len(stack) >= maxJSONDepth {
				return errors.New("JSON nested too deeply")
			}
			stack = append(stack, jsonFrame{object: true, keys: map[string]struct{}{}, keyNext: true})
		case json.Delim('['):
			if len(stack) >= maxJSONDepth {
				return errors.New("JSON nested too deeply")
			}
			stack = append(stack, jsonFrame{})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
			markValueDone(stack)
		default:
			markValueDone(stack)
		}
	}
}

// jsonFrame is one open object or array in checkJSONShape.
type jsonFrame struct {
	object  bool
	keys    map[string]struct{}
	keyNext bool // in an object: the next token is a key or '}'
}

// markValueDone notes that a value of the innermost container finished,
// so if it is an object its next token is a key.
func markValueDone(stack []jsonFrame) {
	if n := len(stack); n > 0 && stack[n-1].object {
		stack[n-1].keyNext = true
	}
}
