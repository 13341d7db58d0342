package runner

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
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

// decodeNameList walks a JSON object token by token, finds the array under
// key and picks a name out of each element. Entries are counted before they
// are decoded, so a list longer than maxListedModels is refused without
// allocating its tail. Names that fail validModelName are skipped, not
// errors: one odd entry must not hide the others. A missing or repeated key,
// a non-array value, or trailing data is an error.
func decodeNameList(body []byte, key string, pick func(listItem) string) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := expectDelim(dec, '{'); err != nil {
		return nil, err
	}
	var (
		names []string
		found bool
	)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("read key: %w", err)
		}
		k, _ := tok.(string)
		if k != key {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, fmt.Errorf("skip %q: %w", k, err)
			}
			continue
		}
		if found {
			return nil, fmt.Errorf("key %q repeated", key)
		}
		found = true
		tok, err = dec.Token()
		if err != nil {
			return nil, fmt.Errorf("read %q: %w", key, err)
		}
		if tok == nil { // "key": null is an empty list
			continue
		}
		if d, ok := tok.(json.Delim); !ok || d != '[' {
			return nil, fmt.Errorf("%q is not an array", key)
		}
		for n := 0; dec.More(); n++ {
			if n == maxListedModels {
				return nil, fmt.Errorf("%w: more than %d entries", errTooManyModels, maxListedModels)
			}
			var it listItem
			if err := dec.Decode(&it); err != nil {
				return nil, fmt.Errorf("%s[%d]: %w", key, n, err)
			}
			if name := pick(it); validModelName(name) {
				names = append(names, name)
			}
		}
		if err := expectDelim(dec, ']'); err != nil {
			return nil, err
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the object")
	}
	if !found {
		return nil, fmt.Errorf("no %q list", key)
	}
	return names, nil
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
