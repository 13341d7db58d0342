package runner

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/runner/runnertest"
	"github.com/nodeld/nodeld/internal/testport"
)

func probeOnce(t *testing.T, inst AdoptedInstance) (ProbeResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	return Probe(ctx, NewProbeClient(5*time.Second), inst)
}

func TestProbeRuntimes(t *testing.T) {
	tests := []struct {
		name      string
		kind      Kind
		models    []string // what the fake server lists
		loading   bool
		model     string // configured
		want      ProbeResult
		wantErrIn string // substring of the error; "" = no error
	}{
		{name: "llama.cpp up, configured", kind: KindLlamaCpp, models: []string{"/m/Qwen2.5-7B-Q4.gguf"}, model: "qwen2.5-7b", want: ProbeResult{HealthUp, "qwen2.5-7b"}},
		{name: "llama.cpp discovers", kind: KindLlamaCpp, models: []string{"/m/q.gguf"}, want: ProbeResult{HealthUp, "/m/q.gguf"}},
		{name: "llama.cpp empty list, configured", kind: KindLlamaCpp, model: "x", want: ProbeResult{HealthUp, "x"}},
		{name: "llama.cpp loading", kind: KindLlamaCpp, models: []string{"/m/q.gguf"}, loading: true, want: ProbeResult{Health: HealthLoading}, wantErrIn: "loading"},
		{name: "llama.cpp other model", kind: KindLlamaCpp, models: []string{"/m/llama3.gguf"}, model: "qwen", want: ProbeResult{Health: HealthModelMissing}, wantErrIn: "not listed"},
		{name: "ollama up, configured", kind: KindOllama, models: []string{"llama3:latest", "qwen2.5:7b"}, model: "llama3", want: ProbeResult{HealthUp, "llama3"}},
		{name: "ollama model not pulled", kind: KindOllama, models: []string{"qwen2.5:7b"}, model: "llama3", want: ProbeResult{Health: HealthModelMissing}, wantErrIn: "not pulled"},
		{name: "ollama no substring match", kind: KindOllama, models: []string{"qwen2.5:7b"}, model: "qwen", want: ProbeResult{Health: HealthModelMissing}, wantErrIn: "not pulled"},
		{name: "ollama one model discovered", kind: KindOllama, models: []string{"qwen2.5:7b"}, want: ProbeResult{HealthUp, "qwen2.5:7b"}},
		{name: "ollama several models", kind: KindOllama, models: []string{"a:1", "b:2"}, want: ProbeResult{Health: HealthUp}},
		{name: "ollama no models", kind: KindOllama, want: ProbeResult{Health: HealthModelMissing}, wantErrIn: "no models"},
		{name: "ollama loading", kind: KindOllama, models: []string{"a:1"}, loading: true, want: ProbeResult{Health: HealthLoading}, wantErrIn: "loading"},
		{name: "openai discovers first", kind: KindOpenAI, models: []string{"gpt-x", "gpt-y"}, want: ProbeResult{HealthUp, "gpt-x"}},
		{name: "openai configured", kind: KindOpenAI, models: []string{"gpt-x", "gpt-y"}, model: "gpt-y", want: ProbeResult{HealthUp, "gpt-y"}},
		{name: "openai missing", kind: KindOpenAI, models: []string{"gpt-x"}, model: "other", want: ProbeResult{Health: HealthModelMissing}, wantErrIn: "not listed"},
		{name: "openai empty list", kind: KindOpenAI, want: ProbeResult{Health: HealthUp}},
		{name: "mlx-lm discovers", kind: KindMLXLM, models: []string{"mlx-community/Qwen2.5-7B-4bit"}, want: ProbeResult{HealthUp, "mlx-community/Qwen2.5-7B-4bit"}},
		{name: "mlx-lm loading", kind: KindMLXLM, models: []string{"m"}, loading: true, want: ProbeResult{Health: HealthLoading}, wantErrIn: "loading"},
		{name: "llama.cpp nothing to discover", kind: KindLlamaCpp, want: ProbeResult{HealthUp, ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := runnertest.NewServer(t, string(tt.kind), tt.models...)
			srv.SetLoading(tt.loading)
			got, err := probeOnce(t, AdoptedInstance{Role: "chat", Kind: tt.kind, URL: srv.URL, Model: tt.model})
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			switch {
			case tt.wantErrIn == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tt.wantErrIn != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErrIn)):
				t.Errorf("error = %v, want one mentioning %q", err, tt.wantErrIn)
			}
		})
	}
}

// handlerServer serves routes (path -> status, body) and counts hits.
func handlerServer(t *testing.T, routes map[string]func(w http.ResponseWriter)) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if h, ok := routes[r.URL.Path]; ok {
			h(w)
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func reply(status int, body string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}
}

func TestProbeEdgeCases(t *testing.T) {
	big := `{"data":[{"id":"` + strings.Repeat("x", maxProbeBodyBytes) + `"}]}`
	tests := []struct {
		name      string
		kind      Kind
		routes    map[string]func(http.ResponseWriter)
		want      ProbeResult
		wantErrIn string
	}{
		{
			name:   "llama.cpp /health 404 falls back to /v1/models",
			kind:   KindLlamaCpp,
			routes: map[string]func(http.ResponseWriter){"/v1/models": reply(200, `{"data":[{"id":"old"}]}`)},
			want:   ProbeResult{HealthUp, "old"},
		},
		{
			name:      "llama.cpp fallback loading",
			kind:      KindLlamaCpp,
			routes:    map[string]func(http.ResponseWriter){"/v1/models": reply(503, ``)},
			want:      ProbeResult{Health: HealthLoading},
			wantErrIn: "loading",
		},
		{
			name: "llama.cpp discovers from /props",
			kind: KindLlamaCpp,
			routes: map[string]func(http.ResponseWriter){
				"/health": reply(200, `{"status":"ok"}`),
				"/props":  reply(200, `{"model_alias":"qwen","model_path":"/m/q.gguf"}`),
			},
			want: ProbeResult{HealthUp, "qwen"},
		},
		{
			name:      "llama.cpp 503 without loading is down",
			kind:      KindLlamaCpp,
			routes:    map[string]func(http.ResponseWriter){"/health": reply(503, `{"status":"no slot available"}`)},
			want:      ProbeResult{Health: HealthDown},
			wantErrIn: "HTTP 503",
		},
		{
			name:      "llama.cpp 500",
			kind:      KindLlamaCpp,
			routes:    map[string]func(http.ResponseWriter){"/health": reply(500, `x`)},
			want:      ProbeResult{Health: HealthDown},
			wantErrIn: "HTTP 500",
		},
		{
			name:      "openai bad json",
			kind:      KindOpenAI,
			routes:    map[string]func(http.ResponseWriter){"/v1/models": reply(200, `<html>hello</html>`)},
			want:      ProbeResult{Health: HealthDown},
			wantErrIn: "decode /v1/models",
		},
		{
			name:      "openai body too large",
			kind:      KindOpenAI,
			routes:    map[string]func(http.ResponseWriter){"/v1/models": reply(200, big)},
			want:      ProbeResult{Health: HealthDown},
			wantErrIn: "exceeds",
		},
		{
			name: "openai body too large, unannounced",
			kind: KindOpenAI,
			routes: map[string]func(http.ResponseWriter){"/v1/models": func(w http.ResponseWriter) {
				w.WriteHeader(200)
				w.(http.Flusher).Flush() // chunked: no Content-Length
				_, _ = w.Write([]byte(big))
			}},
			want:      ProbeResult{Health: HealthDown},
			wantErrIn: "exceeds",
		},
		{
			name:      "openai 404",
			kind:      KindOpenAI,
			want:      ProbeResult{Health: HealthDown},
			wantErrIn: "HTTP 404",
		},
		{
			name:      "ollama bad tags",
			kind:      KindOllama,
			routes:    map[string]func(http.ResponseWriter){"/api/version": reply(200, `{}`), "/api/tags": reply(200, `{"models":"x"}`)},
			want:      ProbeResult{Health: HealthDown},
			wantErrIn: "decode /api/tags",
		},
		{
			name:      "ollama tags 500",
			kind:      KindOllama,
			routes:    map[string]func(http.ResponseWriter){"/api/version": reply(200, `{}`), "/api/tags": reply(500, ``)},
			want:      ProbeResult{Health: HealthDown},
			wantErrIn: "HTTP 500",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, _ := handlerServer(t, tt.routes)
			got, err := probeOnce(t, AdoptedInstance{Role: "chat", Kind: tt.kind, URL: srv.URL})
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			switch {
			case tt.wantErrIn == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tt.wantErrIn != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErrIn)):
				t.Errorf("error = %v, want one mentioning %q", err, tt.wantErrIn)
			}
		})
	}
}

func TestProbeDoesNotFollowRedirects(t *testing.T) {
	target, targetHits := handlerServer(t, map[string]func(http.ResponseWriter){"/v1/models": reply(200, `{"data":[{"id":"a"}]}`)})
	srv := httptest.NewServer(http.RedirectHandler(target.URL+"/v1/models", http.StatusFound))
	t.Cleanup(srv.Close)
	got, err := probeOnce(t, AdoptedInstance{Role: "chat", Kind: KindOpenAI, URL: srv.URL})
	if got.Health != HealthDown || err == nil || !strings.Contains(err.Error(), "HTTP 302") {
		t.Errorf("Probe = %+v, %v; want down with HTTP 302", got, err)
	}
	if n := targetHits.Load(); n != 0 {
		t.Errorf("redirect target was hit %d times", n)
	}
}

func TestProbeClientRefusesNonLoopback(t *testing.T) {
	c := NewProbeClient(time.Second)
	if tr := c.Transport.(*http.Transport); tr.Proxy != nil {
		t.Error("probe transport uses a proxy function")
	}
	// The dialer's Control hook refuses before any packet is sent.
	resp, err := c.Get("http://192.0.2.1:9/health")
	if err == nil {
		resp.Body.Close()
	}
	if !errors.Is(err, ErrNotLoopback) {
		t.Errorf("GET to a non-loopback address: err = %v, want ErrNotLoopback", err)
	}
}

func TestProbeRefusesBadInstance(t *testing.T) {
	tests := []struct {
		name   string
		inst   AdoptedInstance
		wantIs error
	}{
		{"non-loopback", AdoptedInstance{Kind: KindOpenAI, URL: "http://192.0.2.1:80"}, ErrNotLoopback},
		{"unknown kind", AdoptedInstance{Kind: "vllm", URL: "http://127.0.0.1:1"}, ErrUnknownKind},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := probeOnce(t, tt.inst)
			if got.Health == HealthUp || !errors.Is(err, tt.wantIs) {
				t.Errorf("Probe = %+v, %v; want not up and %v", got, err, tt.wantIs)
			}
		})
	}
}

func TestProbeUnreachable(t *testing.T) {
	addr := testport.Addr(t)
	got, err := probeOnce(t, AdoptedInstance{Kind: KindLlamaCpp, URL: "http://" + addr})
	if got.Health != HealthDown || err == nil {
		t.Errorf("Probe = %+v, %v; want down with an error", got, err)
	}
}

func TestProbeTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	got, err := Probe(ctx, NewProbeClient(10*time.Second), AdoptedInstance{Kind: KindOpenAI, URL: srv.URL})
	if got.Health != HealthDown || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Probe = %+v, %v; want down with deadline exceeded", got, err)
	}
}
