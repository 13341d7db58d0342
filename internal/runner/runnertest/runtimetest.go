package runnertest

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
)

// Server is a fake model server of one runtime kind.
type Server struct {
	// URL is the base URL, http://127.0.0.1:<port>.
	URL string
	// Addr is 127.0.0.1:<port>.
	Addr string

	kind string
	srv  *httptest.Server

	// mu guards loading, models and hits.
	mu      sync.Mutex
	loading bool
	models  []string
	hits    map[string]int
}

// NewServer starts a fake server of kind ("llama.cpp", "ollama", "mlx-lm"
// or "openai") on 127.0.0.1:0 serving models (listed in this order).
func NewServer(tb testing.TB, kind string, models ...string) *Server {
	tb.Helper()
	return NewServerAt(tb, "127.0.0.1:0", kind, models...)
}

// NewServerAt is NewServer listening on addr, so a test can bring a server
// back on the port of one it closed.
func NewServerAt(tb testing.TB, addr, kind string, models ...string) *Server {
	tb.Helper()
	switch kind {
	case "llama.cpp", "ollama", "mlx-lm", "openai":
	default:
		tb.Fatalf("runtimetest: unknown kind %q", kind)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		tb.Fatalf("runtimetest: listen on %s: %v", addr, err)
	}
	s := &Server{kind: kind, models: slices.Clone(models), hits: make(map[string]int)}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.srv.Listener.Close()
	s.srv.Listener = l
	s.srv.Start()
	s.URL = s.srv.URL
	s.Addr = l.Addr().String()
	tb.Cleanup(s.Close)
	return s
}

// Close stops the server and waits for its requests to finish. It may be
// called more than once.
func (s *Server) Close() { s.srv.Close() }

// SetLoading makes the server answer as if it were loading its model.
func (s *Server) SetLoading(loading bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loading = loading
}

// SetModels replaces the listed models.
func (s *Server) SetModels(models ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.models = slices.Clone(models)
}

// Hits returns how many requests path received.
func (s *Server) Hits(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits[path]
}

type modelEntry struct {
	ID     string `json:"id"`
	Object string `json:"object"`
}

type tagEntry struct {
	Name  string `json:"name"`
	Model string `json:"model"`
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.hits[r.URL.Path]++
	loading, models := s.loading, slices.Clone(s.models)
	s.mu.Unlock()

	if r.Method != http.MethodGet {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	unavailable := func() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{
			"error": map[string]any{"code": 503, "message": "Loading model", "type": "unavailable_error"},
		})
	}
	list := func() {
		if loading {
			unavailable()
			return
		}
		data := make([]modelEntry, 0, len(models))
		for _, m := range models {
			data = append(data, modelEntry{ID: m, Object: "model"})
		}
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
	}

	switch {
	case r.URL.Path == "/v1/models":
		list()
	case s.kind == "llama.cpp" && r.URL.Path == "/health":
		if loading {
			unavailable()
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	case s.kind == "llama.cpp" && r.URL.Path == "/props":
		path := ""
		if len(models) > 0 {
			path = models[0]
		}
		writeJSON(w, http.StatusOK, map[string]any{"model_path": path, "total_slots": 1})
	case s.kind == "ollama" && r.URL.Path == "/api/version":
		if loading {
			unavailable()
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"version": "0.6.0"})
	case s.kind == "ollama" && r.URL.Path == "/api/tags":
		tags := make([]tagEntry, 0, len(models))
		for _, m := range models {
			tags = append(tags, tagEntry{Name: m, Model: m})
		}
		writeJSON(w, http.StatusOK, map[string]any{"models": tags})
	default:
		http.NotFound(w, r)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
