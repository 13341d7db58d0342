package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/nodeld/nodeld/internal/modelpin"
	"github.com/nodeld/nodeld/internal/proxy/proxytest"
	"github.com/nodeld/nodeld/internal/table"
)

// TestLocalPathPinsModel checks what body a local instance receives: the
// client's, with "model" pinned to the instance's model on the inference
// paths (as the mesh's serving side does), and untouched everywhere else.
func TestLocalPathPinsModel(t *testing.T) {
	up := proxytest.New(t, proxytest.Options{Model: "served"})
	h := startProxy(t, Config{Roles: []RoleConfig{
		{Name: "chat", Listen: "127.0.0.1:0"},
		{Name: "multi", Listen: "127.0.0.1:0", ModelPassthrough: true},
	}}, Deps{})
	served := table.Target{Kind: table.TargetLocal, Base: up.URL, Model: "served", Runtime: "llama.cpp"}
	h.resolver.set("chat", served)
	h.resolver.set("multi", served)

	const chat = `{"model":"client-pick","messages":[{"role":"user","content":"hi"}],"stream":false}`
	tests := []struct {
		name, role, path, body string
		target                 *table.Target // nil: served
		chunked                bool          // no Content-Length
		want                   string        // what the instance receives
		wantStatus             int           // 0: 200
	}{
		{name: "chat", path: "/v1/chat/completions", body: chat,
			want: `{"model":"served","messages":[{"role":"user","content":"hi"}],"stream":false}`},
		{name: "already pinned", path: "/v1/chat/completions", body: `{"model":"served", "messages":[]}`,
			want: `{"model":"served", "messages":[]}`},
		{name: "no model member", path: "/v1/completions", body: `{"prompt":"hi"}`, want: `{"model":"served","prompt":"hi"}`},
		{name: "model in another case", path: "/v1/embeddings", body: `{"input":"x","Model":"m"}`, want: `{"input":"x","Model":"served"}`},
		{name: "ollama chat", path: "/api/chat", body: `{"model":"llama3","messages":[]}`, want: `{"model":"served","messages":[]}`},
		{name: "ollama embed", path: "/api/embed", body: `{"model":"e5","input":"x"}`, want: `{"model":"served","input":"x"}`},
		{name: "chunked body", path: "/v1/chat/completions", body: chat, chunked: true,
			want: `{"model":"served","messages":[{"role":"user","content":"hi"}],"stream":false}`},
		{name: "ollama show is not inference", path: "/api/show", body: `{"model":"other"}`, want: `{"model":"other"}`},
		{name: "other v1 path", path: "/v1/responses", body: `{"model":"other"}`, want: `{"model":"other"}`},
		// The instance answers these as it always did.
		{name: "not json", path: "/v1/chat/completions", body: `model=other`, want: `model=other`, wantStatus: 400},
		{name: "json array", path: "/v1/chat/completions", body: `[{"model":"other"}]`, want: `[{"model":"other"}]`, wantStatus: 400},
		{name: "passthrough role", role: "multi", path: "/v1/chat/completions", body: chat, want: chat},
		{name: "model unknown", path: "/v1/chat/completions", body: chat, want: chat,
			target: &table.Target{Kind: table.TargetLocal, Base: up.URL, Runtime: "llama.cpp"}},
		{name: "mlx-lm", path: "/v1/chat/completions", body: chat,
			want:   `{"model":"default_model","messages":[{"role":"user","content":"hi"}],"stream":false}`,
			target: &table.Target{Kind: table.TargetLocal, Base: up.URL, Model: "mlx-community/x", Runtime: "mlx-lm"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			role := tt.role
			if role == "" {
				role = "chat"
			}
			if tt.target != nil {
				h.resolver.set(role, *tt.target)
				defer h.resolver.set(role, served)
			}
			var body io.Reader = strings.NewReader(tt.body)
			if tt.chunked {
				body = io.MultiReader(body) // hides the length: sent chunked
			}
			req, _ := http.NewRequest(http.MethodPost, h.url(role)+tt.path, body)
			req.Header.Set("Content-Type", "application/json")
			n := up.Count()
			res, rb := h.do(req)
			if want := max(tt.wantStatus, http.StatusOK); res.StatusCode != want {
				t.Fatalf("status %d, want %d (body %s)", res.StatusCode, want, rb)
			}
			if up.Count() != n+1 {
				t.Fatalf("upstream saw %d requests, want %d", up.Count(), n+1)
			}
			reqs := up.Requests()
			if got := string(reqs[len(reqs)-1].Body); got != tt.want {
				t.Errorf("instance received %s\nwant                 %s", got, tt.want)
			}
		})
	}

	t.Run("passthrough reloads", func(t *testing.T) {
		// Same listen addresses: the listeners stay.
		cfg := Config{Roles: []RoleConfig{{Name: "chat", Listen: "127.0.0.1:0"}, {Name: "multi", Listen: "127.0.0.1:0"}}}
		if err := h.p.ApplyConfig(cfg); err != nil {
			t.Fatal(err)
		}
		if res, rb := h.post("multi", "/v1/chat/completions", chat); res.StatusCode != http.StatusOK {
			t.Fatalf("status %d (body %s)", res.StatusCode, rb)
		}
		reqs := up.Requests()
		if got := string(reqs[len(reqs)-1].Body); !strings.HasPrefix(got, `{"model":"served"`) {
			t.Errorf("after model_passthrough was turned off, the instance received %s", got)
		}
	})

	t.Run("oversized", func(t *testing.T) {
		h := startProxy(t, Config{MaxBodyBytes: 64}, Deps{})
		h.resolver.set("chat", served)
		n := up.Count()
		req, _ := http.NewRequest(http.MethodPost, h.url("chat")+"/v1/chat/completions",
			io.MultiReader(strings.NewReader(`{"model":"x","prompt":"`+strings.Repeat("y", 100)+`"}`)))
		res, rb := h.do(req)
		if res.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d, want 413 (body %s)", res.StatusCode, rb)
		}
		if got := apiError(t, res, rb); got.Code != CodeBodyTooLarge {
			t.Errorf("code %q", got.Code)
		}
		if up.Count() != n {
			t.Error("an oversized body reached the instance")
		}
	})
}

// BenchmarkPinLocal measures pinning a chat body of a typical and of a
// large size, naming the instance's model already or another one.
func BenchmarkPinLocal(b *testing.B) {
	target := table.Target{Kind: table.TargetLocal, Model: "served"}
	for _, size := range []int{4 << 10, 1 << 20} {
		for _, model := range []string{"served", "client-pick"} {
			body := []byte(`{"model":"` + model + `","messages":[{"role":"user","content":"` +
				strings.Repeat("x", size) + `"}],"stream":true}`)
			b.Run(strings.Join([]string{model, strconv.Itoa(size >> 10), "KiB"}, "_"), func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					pinLocal(body, target)
				}
			})
		}
	}
}

// TestPinnedAlready checks the fast check pinLocal makes before modelpin.Pin:
// true only where modelpin.Pin returns the body as is.
func TestPinnedAlready(t *testing.T) {
	tests := []struct {
		body string
		want bool
	}{
		{`{"model":"served","messages":[]}`, true},
		{" \n{ \"model\" : \"served\" , \"x\": {\"model\":\"other\"}, \"y\":[1,\"]}\"] }\n", true},
		{`{"messages":[{"content":"}"}],"model":"served","stream":true}`, true},
		{`{"model":"served","MODEL":"served"}`, true},
		{`{"model":"served","Model":"other"}`, false},
		{`{"model":"other"}`, false},
		{`{"model":"served2"}`, false},
		{`{"model":"serve"}`, false},
		{`{"x":1}`, false},
		{`{}`, false},
		{`{"mod\u0065l":"served"}`, false},
		{`{"model":"served"} {}`, false},
		{`[{"model":"served"}]`, false},
		{`{"model":"served"`, false},
		{`{"model":"served",}`, false},
		{`{"model":served}`, false},
		{``, false},
	}
	for _, tt := range tests {
		if got := pinnedAlready([]byte(tt.body), "served"); got != tt.want {
			t.Errorf("pinnedAlready(%q) = %t, want %t", tt.body, got, tt.want)
		}
		if tt.want {
			if got, err := modelpin.Pin([]byte(tt.body), "served", ""); err != nil || string(got) != tt.body {
				t.Errorf("modelpin.Pin(%q) = %q, %v: the fast check disagrees", tt.body, got, err)
			}
		}
	}
	for _, model := range []string{"", `a"b`, `a\b`, "a<b", "a&b", "é", "a\x00"} {
		if pinnedAlready([]byte(`{"model":"x"}`), model) {
			t.Errorf("pinnedAlready with model %q = true", model)
		}
	}
}

// FuzzPinnedAlready checks that the fast check never says a body is pinned
// when modelpin.Pin would change it.
func FuzzPinnedAlready(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"Model":"m","model":"m"}`, `{"model":"m","x":{"model":"n"}}`, `{"a":"\"","model":"m"}`,
		`{"model":"m"}x`, `{"model" :"m" ,"b":[{}]}`, `{"model":"m","n":-1.5e3,"t":true,"z":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !pinnedAlready(body, "m") {
			return
		}
		got, err := modelpin.Pin(body, "m", "")
		if err == nil && string(got) != string(body) {
			t.Fatalf("pinnedAlready(%q) = true, but modelpin.Pin makes it %q", body, got)
		}
	})
}

// BenchmarkPathSets looks up a chat completion's path as a remote forward
// does: measured (pinnedPath) and MeshPathRefusal (meshPath).
func BenchmarkPathSets(b *testing.B) {
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	for b.Loop() {
		if measure, _ := measured(r); !measure || MeshPathRefusal(r.URL.Path, "") != "" {
			b.Fatal("a chat completion is measured and carried to peers")
		}
	}
}
