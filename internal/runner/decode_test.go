package runner

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDecodeModelList(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		want    []string
		wantErr bool
	}{
		{name: "openai", give: `{"object":"list","data":[{"id":"a","object":"model"},{"id":"b"}]}`, want: []string{"a", "b"}},
		{name: "data first", give: `{"data":[{"id":"a"}],"object":"list"}`, want: []string{"a"}},
		{name: "llama.cpp path", give: `{"models":[{"name":"x"}],"data":[{"id":"/m/q.gguf","meta":{"n_ctx":4096}}]}`, want: []string{"/m/q.gguf"}},
		{name: "empty list", give: `{"data":[]}`, want: nil},
		{name: "null list", give: `{"data":null}`, want: nil},
		{name: "invalid names skipped", give: `{"data":[{"id":""},{"id":"a b"},{"id":"ok"},{},null]}`, want: []string{"ok"}},
		{name: "missing data", give: `{"object":"list"}`, wantErr: true},
		{name: "data repeated", give: `{"data":[],"data":[{"id":"x"}]}`, wantErr: true},
		{name: "data not array", give: `{"data":{"id":"a"}}`, wantErr: true},
		{name: "entry not object", give: `{"data":["a"]}`, wantErr: true},
		{name: "id not string", give: `{"data":[{"id":1}]}`, wantErr: true},
		{name: "top level array", give: `[{"id":"a"}]`, wantErr: true},
		{name: "trailing data", give: `{"data":[]} {}`, wantErr: true},
		{name: "truncated", give: `{"data":[{"id":"a"}`, wantErr: true},
		{name: "empty", give: ``, wantErr: true},
		{name: "html", give: `<html>`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeModelList([]byte(tt.give))
			if (err != nil) != tt.wantErr {
				t.Fatalf("decodeModelList(%s) error = %v, wantErr %v", tt.give, err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("names (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeModelListBound(t *testing.T) {
	list := func(n int) []byte {
		var b strings.Builder
		b.WriteString(`{"data":[`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"id":"m%d"}`, i)
		}
		b.WriteString(`]}`)
		return []byte(b.String())
	}
	got, err := decodeModelList(list(maxListedModels))
	if err != nil || len(got) != maxListedModels {
		t.Fatalf("list of %d: got %d names, %v", maxListedModels, len(got), err)
	}
	if _, err := decodeModelList(list(maxListedModels + 1)); !errors.Is(err, errTooManyModels) {
		t.Fatalf("list of %d: err = %v, want errTooManyModels", maxListedModels+1, err)
	}
}

func TestDecodeOllamaTags(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		want    []string
		wantErr bool
	}{
		{name: "name", give: `{"models":[{"name":"llama3:latest","model":"llama3:latest","size":1}]}`, want: []string{"llama3:latest"}},
		{name: "model when no name", give: `{"models":[{"model":"qwen2.5:7b"}]}`, want: []string{"qwen2.5:7b"}},
		{name: "none", give: `{"models":[]}`, want: nil},
		{name: "no models key", give: `{}`, wantErr: true},
		{name: "openai shape", give: `{"data":[{"id":"a"}]}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeOllamaTags([]byte(tt.give))
			if (err != nil) != tt.wantErr {
				t.Fatalf("decodeOllamaTags(%s) error = %v, wantErr %v", tt.give, err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("names (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeProps(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		want    string
		wantErr bool
	}{
		{name: "alias wins", give: `{"model_alias":"qwen","model_path":"/m/q.gguf"}`, want: "qwen"},
		{name: "path", give: `{"model_path":"/m/q.gguf","default_generation_settings":{"n_ctx":4096}}`, want: "/m/q.gguf"},
		{name: "invalid alias falls back", give: `{"model_alias":"a b","model_path":"/m/q.gguf"}`, want: "/m/q.gguf"},
		{name: "neither", give: `{"total_slots":1}`, want: ""},
		{name: "path not string", give: `{"model_path":7}`, wantErr: true},
		{name: "not json", give: `ok`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeProps([]byte(tt.give))
			if (err != nil) != tt.wantErr {
				t.Fatalf("decodeProps(%s) error = %v, wantErr %v", tt.give, err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("model (-want +got):\n%s", diff)
			}
		})
	}
}

func TestModelMatches(t *testing.T) {
	tests := []struct {
		want, listed string
		openai       bool // modelMatches
		ollama       bool // ollamaMatches
	}{
		{"llama3", "llama3", true, true},
		{"llama3", "llama3:latest", true, true},
		{"llama3:latest", "llama3", true, true},
		{"llama3", "llama3:8b", true, false}, // substring rule, OpenAI-style only
		{"qwen2.5-7b-instruct", "/models/Qwen2.5-7B-Instruct-Q4_K_M.gguf", true, false},
		{"Qwen2.5-7B", "mlx-community/Qwen2.5-7B-Instruct-4bit", true, false},
		{"mlx-community", "mlx-community/Qwen2.5-7B-Instruct-4bit", false, false},
		{"gguf", "/models/x.gguf", false, false},
		{"mistral", "llama3", false, false},
	}
	for _, tt := range tests {
		if got := modelMatches(tt.want, tt.listed); got != tt.openai {
			t.Errorf("modelMatches(%q, %q) = %v, want %v", tt.want, tt.listed, got, tt.openai)
		}
		if got := ollamaMatches(tt.want, tt.listed); got != tt.ollama {
			t.Errorf("ollamaMatches(%q, %q) = %v, want %v", tt.want, tt.listed, got, tt.ollama)
		}
	}
}

// checkNames is the invariant every list decoder keeps on success.
func checkNames(t *testing.T, names []string) {
	t.Helper()
	if len(names) > maxListedModels {
		t.Fatalf("%d names, more than %d", len(names), maxListedModels)
	}
	for _, n := range names {
		if !validModelName(n) {
			t.Fatalf("invalid name %q returned", n)
		}
	}
}

func FuzzDecodeModelList(f *testing.F) {
	for _, s := range []string{
		`{"object":"list","data":[{"id":"a","object":"model"},{"id":"b"}]}`,
		`{"data":[{"id":"/m/q.gguf","meta":{"n_ctx":4096}}]}`,
		`{"data":null}`, `{"data":[null,{}]}`, `{"data":[],"data":[]}`, `[]`, `{"data":[{"id":"\u0000"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		names, err := decodeModelList(body)
		if err == nil {
			checkNames(t, names)
		}
	})
}

func FuzzDecodeOllamaTags(f *testing.F) {
	for _, s := range []string{
		`{"models":[{"name":"llama3:latest","model":"llama3:latest","size":4661224676,"details":{"format":"gguf"}}]}`,
		`{"models":[{"model":"x"}]}`, `{"models":[]}`, `{"models":{}}`, `{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		names, err := decodeOllamaTags(body)
		if err == nil {
			checkNames(t, names)
		}
	})
}

func FuzzDecodeProps(f *testing.F) {
	for _, s := range []string{
		`{"model_alias":"qwen","model_path":"/m/q.gguf"}`,
		`{"model_path":"/m/q.gguf","default_generation_settings":{"n_ctx":4096},"total_slots":1,"chat_template":"{{x}}"}`,
		`{}`, `null`, `{"model_alias":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		name, err := decodeProps(body)
		if err == nil && name != "" && !validModelName(name) {
			t.Fatalf("invalid name %q returned", name)
		}
	})
}
