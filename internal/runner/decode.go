package runner

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// errTooManyModels reports a model list longer than maxListedModels.
var errTooManyModels = errors.New("model list too long")

// listItem is the union of the fields read from one entry of a model list:
// OpenAI's data[].id and Ollama's models[].name / models[].model.
type listItem struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Model string `json:"model"`
}

// decodeModelList decodes an OpenAI /v1/models body and returns data[].id.
func decodeModelList(body []byte) ([]string, error) {
	return decodeNameList(body, "data", func(it listItem) string { return it.ID })
}

// decodeOllamaTags decodes an Ollama /api/tags body and returns
// models[].name (models[].model when name is empty).
func decodeOllamaTags(body []byte) ([]string, error) {
	return decodeNameList(body, "models", func(it listItem) string {
		if it.Name != "" {
			return it.Name
		}
		return it.Model
	})
}

// decodeNameList decodes the array under key (see decodeList) and picks a
// name out of each element. Names that fail validModelName are skipped,
// not errors: one odd entry must not hide the others.
func decodeNameList(body []byte, key string, pick func(listItem) string) ([]string, error) {
	var names []string
	err := decodeList(body, key, func(it listItem) {
		if name := pick(it); validModelName(name) {
			names = append(names, name)
		}
	})
	if err != nil {
		return nil, err
	}
	return names, nil
}

// decodeList walks a JSON object token by token, finds the array under
// key and decodes each element onto a T for keep. Entries are counted
// before they are decoded, so a list longer than maxListedModels is
// refused without allocating its tail. A missing or repeated key, a
// non-array value, an element that does not decode onto T, or trailing
// data is an error; "key": null is an empty list.
func decodeList[T any](body []byte, key string, keep func(T)) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := expectDelim(dec, '{'); err != nil {
		return err
	}
	found := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("read key: %w", err)
		}
		k, _ := tok.(string)
		if k != key {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return fmt.Errorf("skip %q: %w", k, err)
			}
			continue
		}
		if found {
			return fmt.Errorf("key %q repeated", key)
		}
		found = true
		tok, err = dec.Token()
		if err != nil {
			return fmt.Errorf("read %q: %w", key, err)
		}
		if tok == nil { // "key": null is an empty list
			continue
		}
		if d, ok := tok.(json.Delim); !ok || d != '[' {
			return fmt.Errorf("%q is not an array", key)
		}
		for n := 0; dec.More(); n++ {
			if n == maxListedModels {
				return fmt.Errorf("%w: more than %d entries", errTooManyModels, maxListedModels)
			}
			var it T
			if err := dec.Decode(&it); err != nil {
				return fmt.Errorf("%s[%d]: %w", key, n, err)
			}
			keep(it)
		}
		if err := expectDelim(dec, ']'); err != nil {
			return err
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the object")
	}
	if !found {
		return fmt.Errorf("no %q list", key)
	}
	return nil
}

// ollamaLoaded is one model an Ollama /api/ps lists as loaded.
type ollamaLoaded struct {
	// Name is models[].name (models[].model when name is empty).
	Name string
	// ExpiresAt is when Ollama unloads the model (models[].expires_at);
	// zero when the entry gives none that parses as RFC 3339.
	ExpiresAt time.Time
}

// psItem is the part of a /api/ps entry that is read. expires_at is kept
// raw so that an odd value only loses the expiry, not the entry.
type psItem struct {
	Name      string          `json:"name"`
	Model     string          `json:"model"`
	ExpiresAt json.RawMessage `json:"expires_at"`
}

// decodeOllamaPS decodes an Ollama /api/ps body:
// {"models":[{"name":...,"model":...,"expires_at":"<RFC 3339>",...}]}.
// Entries whose name fails validModelName are skipped.
func decodeOllamaPS(body []byte) ([]ollamaLoaded, error) {
	var out []ollamaLoaded
	err := decodeList(body, "models", func(it psItem) {
		name := it.Name
		if name == "" {
			name = it.Model
		}
		if !validModelName(name) {
			return
		}
		e := ollamaLoaded{Name: name}
		var raw string
		if len(it.ExpiresAt) <= maxTimestampBytes && json.Unmarshal(it.ExpiresAt, &raw) == nil {
			if t, err := time.Parse(time.RFC3339Nano, raw); err == nil {
				e.ExpiresAt = t
			}
		}
		out = append(out, e)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("want %q: %w", want, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("want %q, got %v", want, tok)
	}
	return nil
}

// decodeProps decodes a llama.cpp /props body and returns the name the
// server knows its model by: model_alias when set, else model_path (the
// same choice llama-server makes for /v1/models). It returns "" when
// neither is a valid model name.
func decodeProps(body []byte) (string, error) {
	var p struct {
		ModelAlias string `json:"model_alias"`
		ModelPath  string `json:"model_path"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return "", fmt.Errorf("decode /props: %w", err)
	}
	switch {
	case validModelName(p.ModelAlias):
		return p.ModelAlias, nil
	case validModelName(p.ModelPath):
		return p.ModelPath, nil
	default:
		return "", nil
	}
}

// modelListed reports whether want matches any of listed under
// modelMatches.
func modelListed(want string, listed []string, match func(want, listed string) bool) bool {
	for _, l := range listed {
		if match(want, l) {
			return true
		}
	}
	return false
}

// modelMatches is the OpenAI-style match: exact; or equal once a ":latest"
// suffix is dropped from either side; or the listed id's last "/" segment,
// minus ".gguf", contains want case-insensitively (llama-server lists a
// GGUF path, mlx-lm a Hugging Face repo id).
func modelMatches(want, listed string) bool {
	if ollamaMatches(want, listed) {
		return true
	}
	seg := listed[strings.LastIndexByte(listed, '/')+1:]
	seg = strings.TrimSuffix(seg, ".gguf")
	return strings.Contains(strings.ToLower(seg), strings.ToLower(want))
}

// ollamaMatches is the Ollama tag match: exact, or equal once a ":latest"
// suffix is dropped from either side. No substring rule: the name is sent to
// Ollama, which needs the tag itself.
func ollamaMatches(want, listed string) bool {
	return want == listed ||
		strings.TrimSuffix(want, ":latest") == strings.TrimSuffix(listed, ":latest")
}
