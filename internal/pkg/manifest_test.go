package pkg

import (
	"encoding/json"
	"strings"
	"testing"
)

// validManifestJSON is testManifest with one listed file, as JSON.
func validManifestJSON(t *testing.T) map[string]any {
	t.Helper()
	m := testManifest()
	m.Schema = SchemaVersion
	m.Files = []File{{Path: "bin/serve", Size: 3, SHA256: strings.Repeat("ab", 32), Exec: true}}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestParseManifest(t *testing.T) {
	file := func(p string) map[string]any {
		return map[string]any{"path": p, "size": 1, "sha256": strings.Repeat("0", 64)}
	}
	tests := []struct {
		name     string
		edit     func(m map[string]any)
		raw      string // used instead of the edited manifest when set
		wantCode string
		wantIn   string // substring of the detail
	}{
		{name: "valid", edit: func(map[string]any) {}},
		{name: "unknown field", edit: func(m map[string]any) { m["extra"] = 1 }, wantCode: CodeBadManifest, wantIn: "unknown field"},
		{name: "duplicate key", raw: `{"schema":1,"schema":1}`, wantCode: CodeBadManifest, wantIn: "duplicate key"},
		{name: "trailing data", raw: `{"schema":1} {}`, wantCode: CodeBadManifest, wantIn: "trailing"},
		{name: "deep nesting", raw: strings.Repeat("[", 40), wantCode: CodeBadManifest, wantIn: "deeply"},
		{name: "schema 2", edit: func(m map[string]any) { m["schema"] = 2 }, wantCode: CodeBadManifest, wantIn: "schema"},
		{name: "bad id", edit: func(m map[string]any) { m["id"] = "Echo" }, wantCode: CodeBadManifest, wantIn: "id:"},
		{name: "bad version", edit: func(m map[string]any) { m["version"] = "-1" }, wantCode: CodeBadManifest, wantIn: "version:"},
		{name: "inference without role", edit: func(m map[string]any) { delete(m, "role") }, wantCode: CodeBadManifest, wantIn: "role:"},
		{name: "service with role", edit: func(m map[string]any) { m["kind"] = "service" }, wantCode: CodeBadManifest, wantIn: "serves no role"},
		{name: "no variants", edit: func(m map[string]any) { m["variants"] = []any{} }, wantCode: CodeBadManifest, wantIn: "at least one variant"},
		{name: "unknown runtime", edit: func(m map[string]any) { rt(m)["type"] = "docker" }, wantCode: CodeBadManifest, wantIn: "runtime.type"},
		{name: "command not listed", edit: func(m map[string]any) { rt(m)["command"] = "bin/other" }, wantCode: CodeBadManifest, wantIn: "not a listed file"},
		{name: "absolute command", edit: func(m map[string]any) { rt(m)["command"] = "/usr/bin/python3" }},
		{name: "command not exec", edit: func(m map[string]any) {
			delete(m["files"].([]any)[0].(map[string]any), "exec")
		}, wantCode: CodeBadManifest, wantIn: "not marked exec"},
		{name: "llama.cpp without model file", edit: func(m map[string]any) { rt(m)["type"] = "llama.cpp" }, wantCode: CodeBadManifest, wantIn: "model_file"},
		{name: "ollama with command", edit: func(m map[string]any) {
			rt(m)["type"] = "ollama"
			rt(m)["model"] = "qwen2.5"
		}, wantCode: CodeBadManifest, wantIn: "not allowed"},
		{name: "bad env key", edit: func(m map[string]any) { rt(m)["env"] = map[string]any{"A=B": "x"} }, wantCode: CodeBadManifest, wantIn: "variable name"},
		{name: "NUL in arg", edit: func(m map[string]any) { rt(m)["args"] = []any{"a\x00b"} }, wantCode: CodeBadManifest, wantIn: "NUL"},
		{name: "bad health path", edit: func(m map[string]any) { rt(m)["health"] = map[string]any{"path": "health"} }, wantCode: CodeBadManifest, wantIn: "health.path"},
		{name: "negative size", edit: func(m map[string]any) { files(m)[0].(map[string]any)["size"] = -1 }, wantCode: CodeBadManifest, wantIn: "size"},
		{name: "file too large", edit: func(m map[string]any) { files(m)[0].(map[string]any)["size"] = int64(MaxFileSize) + 1 }, wantCode: CodeBadManifest, wantIn: "size"},
		{name: "upper-case hash", edit: func(m map[string]any) { files(m)[0].(map[string]any)["sha256"] = strings.Repeat("AB", 32) }, wantCode: CodeBadManifest, wantIn: "sha256"},
		{name: "duplicate file", edit: func(m map[string]any) { m["files"] = append(files(m), files(m)[0]) }, wantCode: CodeBadManifest, wantIn: "duplicate"},
		{name: "file is a directory of another", edit: func(m map[string]any) { m["files"] = append(files(m), file("bin/serve/x")) }, wantCode: CodeBadManifest, wantIn: "is a directory of"},
		{name: "backslash", edit: func(m map[string]any) { m["files"] = append(files(m), file(`a\b`)) }, wantCode: CodeBadManifest, wantIn: "backslash"},
		{name: "unclean path", edit: func(m map[string]any) { m["files"] = append(files(m), file("./a")) }, wantCode: CodeBadManifest, wantIn: "clean"},
		{name: "dot-dot inside", edit: func(m map[string]any) { m["files"] = append(files(m), file("a/../../b")) }, wantCode: CodePathEscape},
		{name: "absolute path", edit: func(m map[string]any) { m["files"] = append(files(m), file("/a")) }, wantCode: CodePathEscape},
		{name: "lists the manifest", edit: func(m map[string]any) { m["files"] = append(files(m), file(ManifestFile)) }, wantCode: CodeBadManifest, wantIn: "reserved"},
		{name: "lists the signature", edit: func(m map[string]any) { m["files"] = append(files(m), file(SignatureFile)) }, wantCode: CodeBadManifest, wantIn: "reserved"},
		{name: "too many files", edit: func(m map[string]any) {
			var fs []any
			for i := range MaxFiles + 1 {
				fs = append(fs, file("f"+strings.Repeat("x", i%7)+string(rune('a'+i%26))))
			}
			m["files"] = fs
		}, wantCode: CodeBadManifest, wantIn: "limit"},
		{name: "oversized", raw: `{"id":"` + strings.Repeat("a", MaxManifestBytes) + `"}`, wantCode: CodeTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := []byte(tt.raw)
			if tt.raw == "" {
				m := validManifestJSON(t)
				tt.edit(m)
				var err error
				if data, err = json.Marshal(m); err != nil {
					t.Fatal(err)
				}
			}
			_, err := ParseManifest(data)
			if got := ErrorCode(err); got != tt.wantCode {
				t.Fatalf("code = %q, want %q (err %v)", got, tt.wantCode, err)
			}
			if tt.wantIn != "" && !strings.Contains(err.Error(), tt.wantIn) {
				t.Errorf("error %q does not contain %q", err, tt.wantIn)
			}
		})
	}
}

func rt(m map[string]any) map[string]any { return m["runtime"].(map[string]any) }
func files(m map[string]any) []any       { return m["files"].([]any) }

func TestValidateReportsEveryProblem(t *testing.T) {
	m := testManifest()
	m.ID = ""
	m.Version = ""
	m.Variants = nil
	err := m.Validate()
	if err == nil {
		t.Fatal("invalid manifest validated")
	}
	for _, want := range []string{"id:", "version:", "variants:", "runtime.command"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not report %q: %v", want, err)
		}
	}
}
