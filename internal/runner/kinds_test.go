package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap/zaptest"
)

func TestNewManagedValidation(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "srv")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "m.gguf"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	look := func(string) (string, error) { return exe, nil }
	tests := []struct {
		name string
		spec Spec
		want string // substring of the error; "" means valid
	}{
		{"process ok", Spec{Kind: KindProcess, Dir: dir, Command: "srv"}, ""},
		{"unknown kind", Spec{Kind: "docker", Dir: dir}, "unknown runtime kind"},
		{"adopted-only kind", Spec{Kind: KindOpenAI, Dir: dir}, "unknown runtime kind"},
		{"relative dir", Spec{Kind: KindProcess, Dir: "pkg", Command: "srv"}, "absolute"},
		{"no command", Spec{Kind: KindProcess, Dir: dir}, "needs a command"},
		{"command leaves dir", Spec{Kind: KindProcess, Dir: dir, Command: "../srv"}, "leaves the package directory"},
		{"command not executable", Spec{Kind: KindProcess, Dir: dir, Command: "data"}, "not an executable"},
		{"command missing", Spec{Kind: KindProcess, Dir: dir, Command: "nope"}, "no such file"},
		{"too many args", Spec{Kind: KindProcess, Dir: dir, Command: "srv", Args: make([]string, maxSpecArgs+1)}, "arguments"},
		{"NUL in arg", Spec{Kind: KindProcess, Dir: dir, Command: "srv", Args: []string{"a\x00"}}, "NUL"},
		{"bad env name", Spec{Kind: KindProcess, Dir: dir, Command: "srv", Env: map[string]string{"1X": ""}}, "bad name"},
		{"env sets NODELD_PORT", Spec{Kind: KindProcess, Dir: dir, Command: "srv", Env: map[string]string{"NODELD_PORT": "1"}}, "NODELD_PORT"},
		{"bad health path", Spec{Kind: KindProcess, Dir: dir, Command: "srv", HealthPath: "health?x"}, "health path"},
		{"log cap too big", Spec{Kind: KindProcess, Dir: dir, Command: "srv", LogCap: maxLogCap + 1}, "log cap"},
		{"port out of range", Spec{Kind: KindProcess, Dir: dir, Command: "srv", Port: 70000}, "port"},
		{"llama ok", Spec{Kind: KindLlamaCpp, Dir: dir, ModelFile: "m.gguf"}, ""},
		{"llama without model file", Spec{Kind: KindLlamaCpp, Dir: dir}, "needs a model file"},
		{"llama model file missing", Spec{Kind: KindLlamaCpp, Dir: dir, ModelFile: "x.gguf"}, "model file"},
		{"llama owned flag", Spec{Kind: KindLlamaCpp, Dir: dir, ModelFile: "m.gguf", Args: []string{"--host=0.0.0.0"}}, "--host is set by nodeld"},
		{"llama relative command path", Spec{Kind: KindLlamaCpp, Dir: dir, ModelFile: "m.gguf", Command: "bin/llama-server"}, "bare name or an absolute path"},
		{"mlx ok", Spec{Kind: KindMLXLM, Dir: dir, Model: "mlx-community/x"}, ""},
		{"mlx owned flag", Spec{Kind: KindMLXLM, Dir: dir, Args: []string{"--port", "1"}}, "--port is set by nodeld"},
		{"ollama ok", Spec{Kind: KindOllama, Model: "llama3:8b"}, ""},
		{"ollama without model", Spec{Kind: KindOllama}, "needs a model"},
		{"ollama with command", Spec{Kind: KindOllama, Model: "m", Command: "ollama"}, "takes no command"},
		{"ollama remote url", Spec{Kind: KindOllama, Model: "m", URL: "http://10.0.0.1:11434"}, "loopback"},
		{"url for process", Spec{Kind: KindProcess, Dir: dir, Command: "srv", URL: "http://127.0.0.1:1"}, "ollama only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewManaged(tt.spec, ManagedDeps{LookPath: look})
			if tt.want == "" {
				if err != nil {
					t.Fatalf("NewManaged: %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewManaged = %v, want ErrInvalidSpec containing %q", err, tt.want)
			}
		})
	}
}

func TestManagedArgv(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "bin")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "m.gguf"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var looked []string
	look := func(name string) (string, error) { looked = append(looked, name); return exe, nil }
	tests := []struct {
		spec Spec
		want []string
	}{
		{Spec{Kind: KindLlamaCpp, Dir: dir, ModelFile: "m.gguf", Args: []string{"--threads", "2"}},
			[]string{"--model", dir + "/m.gguf", "--host", "127.0.0.1", "--port", "8090", "--threads", "2"}},
		{Spec{Kind: KindMLXLM, Dir: dir}, []string{"--model", dir, "--host", "127.0.0.1", "--port", "8090"}},
		{Spec{Kind: KindMLXLM, Dir: dir, Model: "org/repo"}, []string{"--model", "org/repo", "--host", "127.0.0.1", "--port", "8090"}},
		{Spec{Kind: KindProcess, Dir: dir, Command: "bin", Args: []string{"{dir}/x", "--p={port}"}}, []string{dir + "/x", "--p=8090"}},
	}
	for _, tt := range tests {
		m, err := NewManaged(tt.spec, ManagedDeps{LookPath: look})
		if err != nil {
			t.Fatal(err)
		}
		d := m.drv.(*procDriver)
		var got []string
		for _, a := range d.argv {
			got = append(got, d.expand(a, 8090))
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s argv (-want +got):\n%s", tt.spec.Kind, diff)
		}
	}
	if diff := cmp.Diff([]string{"llama-server", "mlx_lm.server", "mlx_lm.server"}, looked); diff != "" {
		t.Errorf("looked up (-want +got):\n%s", diff)
	}
}

// TestManagedLlamaCpp launches a stand-in llama-server: a script that maps
// llama.cpp's flags onto echo-llm's, so the argv nodeld builds and the
// llama.cpp health probe are exercised end to end.
func TestManagedLlamaCpp(t *testing.T) {
	echo := needEchoLLM(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "llama-server")
	body := fmt.Sprintf(`#!/bin/sh
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$2; shift 2;;
    --host) host=$2; shift 2;;
    --port) port=$2; shift 2;;
    *) echo "unexpected $1" >&2; exit 9;;
  esac
done
exec %s --listen "$host:$port" --model "$(basename "$model")"
`, echo)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tiny.gguf"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := NewManaged(Spec{Kind: KindLlamaCpp, Dir: dir, ModelFile: "tiny.gguf", Model: "tiny"},
		ManagedDeps{Logger: zaptest.NewLogger(t), LookPath: func(string) (string, error) { return script, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := m.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer m.Stop(ctx, time.Second)
	if h, err := m.Health(ctx); h != HealthUp {
		t.Errorf("Health = %s, %v", h, err)
	}
	if err := m.Stop(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if st := recvExit(t, m.Wait()); st.Code != 0 || st.Killed {
		t.Errorf("exit %+v, want 0 after SIGTERM", st)
	}
}

// fakeOllama answers /api/ps and /api/generate like an Ollama daemon.
type fakeOllama struct {
	mu       sync.Mutex
	resident map[string]bool
	bodies   []ollamaGenerate
	paths    []string
}

func (f *fakeOllama) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.paths = append(f.paths, r.Method+" "+r.URL.Path)
	switch r.Method + " " + r.URL.Path {
	case "GET /api/ps":
		var models []map[string]string
		for name := range f.resident {
			models = append(models, map[string]string{"name": name})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"models": models})
	case "POST /api/generate":
		var g ollamaGenerate
		if err := json.NewDecoder(r.Body).Decode(&g); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		f.bodies = append(f.bodies, g)
		f.resident[g.Model+":latest"] = g.KeepAlive != 0
		if g.KeepAlive == 0 {
			delete(f.resident, g.Model+":latest")
		}
		_, _ = w.Write([]byte(`{"done":true}`))
	default:
		http.NotFound(w, r)
	}
}

func TestManagedOllama(t *testing.T) {
	fake := &fakeOllama{resident: map[string]bool{}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	m, err := NewManaged(Spec{Kind: KindOllama, Model: "llama3", URL: srv.URL}, ManagedDeps{Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if h, err := m.Health(ctx); h != HealthDown || !errors.Is(err, ErrNotRunning) {
		t.Errorf("Health before Start = %s, %v", h, err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if h, err := m.Health(ctx); h != HealthUp {
		t.Errorf("Health = %s, %v", h, err)
	}
	if base, ok := m.Endpoint(); !ok || base != srv.URL {
		t.Errorf("Endpoint = %q, %v; want %s", base, ok, srv.URL)
	}
	exit := m.Wait()
	if err := m.Stop(ctx, 0); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if st := recvExit(t, exit); !st.Stopped {
		t.Errorf("exit %+v", st)
	}
	if m.Alive() {
		t.Error("Alive after Stop")
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	want := []ollamaGenerate{{Model: "llama3", KeepAlive: -1}, {Model: "llama3", KeepAlive: 0}}
	if diff := cmp.Diff(want, fake.bodies); diff != "" {
		t.Errorf("generate bodies (-want +got):\n%s", diff)
	}
	for _, p := range fake.paths {
		if p != "GET /api/ps" && p != "POST /api/generate" {
			t.Errorf("unexpected request %s", p)
		}
	}
}

func TestManagedOllamaAlreadyResidentNotUnloaded(t *testing.T) {
	fake := &fakeOllama{resident: map[string]bool{"llama3:latest": true}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	m, err := NewManaged(Spec{Kind: KindOllama, Model: "llama3", URL: srv.URL}, ManagedDeps{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(ctx, 0); err != nil {
		t.Fatal(err)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.bodies) != 0 {
		t.Errorf("generate sent for a model someone else loaded: %+v", fake.bodies)
	}
}
