package proxy

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/proxy/proxytest"
	"github.com/nodeld/nodeld/internal/table"
)

// ollamaError decodes an error body as Ollama's client does (a JSON
// object whose "error" is a string), failing the test otherwise.
func ollamaError(t *testing.T, res *http.Response, body []byte) string {
	t.Helper()
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var eb struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(body, &eb); err != nil || eb.Error == "" {
		t.Fatalf("body %q is not Ollama's error shape: %v", body, err)
	}
	return eb.Error
}

func TestOllamaRoot(t *testing.T) {
	up := proxytest.New(t, proxytest.Options{})
	h := startProxy(t, Config{}, Deps{Remote: remoteFunc(nil)})
	targets := []struct {
		name   string
		target *table.Target // nil: nothing serves the role
		ollama bool
	}{
		{"local ollama", &table.Target{Kind: table.TargetLocal, Base: up.URL, Runtime: "ollama"}, true},
		{"remote ollama", &table.Target{Kind: table.TargetRemote, NodeID: "node-b", Runtime: "ollama"}, true},
		{"local llama.cpp", &table.Target{Kind: table.TargetLocal, Base: up.URL, Runtime: "llama.cpp"}, false},
		{"remote of unknown runtime", &table.Target{Kind: table.TargetRemote, NodeID: "node-b"}, false},
		{"nothing", nil, false},
	}
	for _, tt := range targets {
		t.Run(tt.name, func(t *testing.T) {
			h.resolver.mu.Lock()
			delete(h.resolver.targets, "chat")
			h.resolver.mu.Unlock()
			if tt.target != nil {
				h.resolver.set("chat", *tt.target)
			}
			for _, method := range []string{http.MethodHead, http.MethodGet} {
				req, _ := http.NewRequest(method, h.url("chat")+"/", nil)
				res, body := h.do(req)
				switch {
				case tt.ollama:
					if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
						t.Fatalf("%s /: %d %q, want 200 text/plain", method, res.StatusCode, res.Header.Get("Content-Type"))
					}
					want := "Ollama is running"
					if method == http.MethodHead {
						want = ""
						if res.ContentLength != int64(len("Ollama is running")) {
							t.Errorf("HEAD / Content-Length %d", res.ContentLength)
						}
					}
					if string(body) != want {
						t.Errorf("%s / body %q, want %q", method, body, want)
					}
				case method == http.MethodHead:
					if res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") != "GET, POST" {
						t.Errorf("HEAD /: %d Allow %q, want 405 as before", res.StatusCode, res.Header.Get("Allow"))
					}
				default:
					if res.StatusCode != http.StatusNotFound {
						t.Fatalf("GET /: %d, want 404 as before", res.StatusCode)
					}
					if got := apiError(t, res, body); got.Code != CodeNotFound {
						t.Errorf("GET / code %q", got.Code)
					}
				}
			}
		})
	}
	t.Run("foreign host", func(t *testing.T) {
		h.resolver.set("chat", table.Target{Kind: table.TargetLocal, Base: up.URL, Runtime: "ollama"})
		res, body := h.raw("chat", "GET / HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n")
		if res.StatusCode == http.StatusOK || strings.Contains(string(body), "Ollama") {
			t.Errorf("answered a foreign Host: %d %q", res.StatusCode, body)
		}
	})
	if n := up.Count(); n != 0 {
		t.Errorf("upstream received %d requests, want 0 (the proxy answers /)", n)
	}
}

// TestOllamaCLIThroughRolePort walks what Ollama's CLI sends for list, ps,
// show and run against a role served by an Ollama, and checks that its
// management commands are refused in the error shape it prints.
func TestOllamaCLIThroughRolePort(t *testing.T) {
	up := proxytest.New(t, proxytest.Options{Model: "qwen"})
	h := startProxy(t, Config{}, Deps{})
	h.resolver.set("chat", table.Target{Kind: table.TargetLocal, Base: up.URL, Model: "qwen", Runtime: "ollama"})

	send := func(method, path, body string) (*http.Response, []byte) {
		req, _ := http.NewRequest(method, h.url("chat")+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		return h.do(req)
	}
	for _, step := range []struct{ method, path, body string }{
		{http.MethodHead, "/", ""},
		{http.MethodGet, "/api/tags", ""},
		{http.MethodGet, "/api/ps", ""},
		{http.MethodGet, "/api/version", ""},
		{http.MethodPost, "/api/show", `{"model":"qwen"}`},
		{http.MethodPost, "/api/chat", `{"model":"qwen","messages":[{"role":"user","content":"hi"}]}`},
	} {
		if res, body := send(step.method, step.path, step.body); res.StatusCode != http.StatusOK {
			t.Errorf("%s %s: %d %s", step.method, step.path, res.StatusCode, body)
		}
	}
	before := up.Count()
	refused := []struct{ method, path string }{
		{http.MethodPost, "/api/pull"},
		{http.MethodPost, "/api/push"},
		{http.MethodPost, "/api/create"},
		{http.MethodPost, "/api/copy"},
		{http.MethodPost, "/api/delete"},
		{http.MethodDelete, "/api/delete"},
		{http.MethodHead, "/api/blobs/sha256:00"},
	}
	for _, tt := range refused {
		res, body := send(tt.method, tt.path, `{"model":"other"}`)
		if res.StatusCode != http.StatusForbidden {
			t.Errorf("%s %s: %d, want 403", tt.method, tt.path, res.StatusCode)
			continue
		}
		if tt.method == http.MethodHead {
			continue // no body to print
		}
		if msg := ollamaError(t, res, body); !strings.Contains(msg, tt.path) || !strings.Contains(msg, "model server itself") {
			t.Errorf("%s %s: message %q", tt.method, tt.path, msg)
		}
	}
	if up.Count() != before {
		t.Errorf("a management request reached the instance")
	}
}

// TestErrorShapeFollowsAPI checks that the proxy's own errors take
// Ollama's shape on /api/ paths and OpenAI's on the others.
func TestErrorShapeFollowsAPI(t *testing.T) {
	h := startProxy(t, Config{MaxBodyBytes: 64}, Deps{})
	for _, tt := range []struct {
		method, path, body string
		want               int
	}{
		{http.MethodGet, "/api/nothing", "", http.StatusNotFound},
		{http.MethodPut, "/api/tags", "", http.StatusMethodNotAllowed},
		{http.MethodPost, "/api/chat", strings.Repeat("x", 65), http.StatusRequestEntityTooLarge},
		{http.MethodGet, "/api/tags", "", http.StatusServiceUnavailable}, // nothing serves the role
	} {
		req, _ := http.NewRequest(tt.method, h.url("chat")+tt.path, strings.NewReader(tt.body))
		res, body := h.do(req)
		if res.StatusCode != tt.want {
			t.Errorf("%s %s: %d, want %d", tt.method, tt.path, res.StatusCode, tt.want)
			continue
		}
		ollamaError(t, res, body)
	}
	res, body := h.get("chat", "/v1/models")
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("GET /v1/models: %d", res.StatusCode)
	}
	if got := apiError(t, res, body); got.Code != CodeNoInstance {
		t.Errorf("GET /v1/models: code %q", got.Code)
	}
}
