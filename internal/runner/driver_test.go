package runner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// driverDir returns a package directory holding an executable "bin" and
// an empty "m.gguf", and a LookPath that finds "bin" for every name.
func driverDir(t *testing.T) (string, func(string) (string, error)) {
	t.Helper()
	dir := t.TempDir()
	exe := filepath.Join(dir, "bin")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "m.gguf"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, func(string) (string, error) { return exe, nil }
}

func TestNewDriverMapsKinds(t *testing.T) {
	dir, look := driverDir(t)
	tests := []struct {
		spec Spec
		want string // the driver's type, or "" when the kind is refused
	}{
		{Spec{Kind: KindProcess, Dir: dir, Command: "bin"}, "*runner.procDriver"},
		{Spec{Kind: KindLlamaCpp, Dir: dir, ModelFile: "m.gguf"}, "*runner.procDriver"},
		{Spec{Kind: KindMLXLM, Dir: dir}, "*runner.procDriver"},
		{Spec{Kind: KindOllama, Model: "llama3"}, "*runner.ollamaDriver"},
		{Spec{Kind: KindOpenAI, Dir: dir}, ""},
		{Spec{Kind: "", Dir: dir}, ""},
		{Spec{Kind: "docker", Dir: dir}, ""},
	}
	for _, tt := range tests {
		t.Run(string(tt.spec.Kind), func(t *testing.T) {
			d, err := newDriver(tt.spec, driverDeps{lookPath: look})
			if tt.want == "" {
				if d != nil || !errors.Is(err, ErrUnknownKind) {
					t.Fatalf("newDriver = %T, %v; want nil, ErrUnknownKind", d, err)
				}
				if _, err := NewManaged(tt.spec, ManagedDeps{LookPath: look}); !errors.Is(err, ErrInvalidSpec) || !errors.Is(err, ErrUnknownKind) {
					t.Errorf("NewManaged = %v, want ErrInvalidSpec and ErrUnknownKind", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("newDriver: %v", err)
			}
			if got := fmt.Sprintf("%T", d); got != tt.want {
				t.Errorf("driver %s, want %s", got, tt.want)
			}
		})
	}
}

func TestProcKindCommandLine(t *testing.T) {
	dir, _ := driverDir(t)
	var looked []string
	look := func(name string) (string, error) {
		looked = append(looked, name)
		return filepath.Join(dir, "bin"), nil
	}
	tests := []struct {
		name string
		spec Spec
		kind procKind
		want []string // argv after substitution with port 8090
	}{
		{"process passes args through", Spec{Kind: KindProcess, Dir: dir, Command: "bin", Args: []string{"--port", "{port}", "-m", "{dir}"}},
			processKind(""), []string{"--port", "8090", "-m", dir}},
		{"process without args", Spec{Kind: KindProcess, Dir: dir, Command: "/bin/sh"}, processKind(""), nil},
		{"llama.cpp", Spec{Kind: KindLlamaCpp, Dir: dir, ModelFile: "m.gguf", Args: []string{"-c", "{port}"}},
			llamaCppKind(), []string{"--model", dir + "/m.gguf", "--host", "127.0.0.1", "--port", "8090", "-c", "8090"}},
		{"mlx-lm model file first", Spec{Kind: KindMLXLM, Dir: dir, ModelFile: "m.gguf", Model: "org/repo"},
			mlxLMKind(), []string{"--model", dir + "/m.gguf", "--host", "127.0.0.1", "--port", "8090"}},
		{"mlx-lm model", Spec{Kind: KindMLXLM, Dir: dir, Model: "org/repo", Args: []string{"-m", "x"}},
			mlxLMKind(), []string{"--model", "org/repo", "--host", "127.0.0.1", "--port", "8090", "-m", "x"}},
		{"mlx-lm dir", Spec{Kind: KindMLXLM, Dir: dir}, mlxLMKind(), []string{"--model", dir, "--host", "127.0.0.1", "--port", "8090"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			looked = nil
			drv, err := newProcDriver(tt.spec, tt.kind, driverDeps{lookPath: look})
			if err != nil {
				t.Fatalf("newProcDriver: %v", err)
			}
			d := drv.(*procDriver)
			var got []string
			for _, a := range d.argv {
				got = append(got, d.expand(a, 8090))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("argv (-want +got):\n%s", diff)
			}
			// Only a kind with a program of its own looks it up, once.
			var wantLooked []string
			if tt.kind.program != "" {
				wantLooked = []string{tt.kind.program}
			}
			if diff := cmp.Diff(wantLooked, looked); diff != "" {
				t.Errorf("looked up (-want +got):\n%s", diff)
			}
		})
	}
}

func TestProcKindOwnedFlags(t *testing.T) {
	dir, look := driverDir(t)
	kinds := []struct {
		spec  Spec
		kind  procKind
		owned []string // flags nodeld sets
		free  []string // flags the kind leaves to the Spec
	}{
		{Spec{Kind: KindProcess, Dir: dir, Command: "bin"}, processKind(""),
			nil, []string{"--model", "-m", "--host", "--port"}},
		{Spec{Kind: KindLlamaCpp, Dir: dir, ModelFile: "m.gguf"}, llamaCppKind(),
			[]string{"--model", "-m", "--host", "--port"}, []string{"--hostname", "--model-draft", "-c"}},
		{Spec{Kind: KindMLXLM, Dir: dir}, mlxLMKind(),
			[]string{"--model", "--host", "--port"}, []string{"-m", "--hostname", "--adapter-path"}},
	}
	for _, k := range kinds {
		for _, f := range k.owned {
			for _, arg := range []string{f, f + "=x"} {
				spec := k.spec
				spec.Args = []string{"--ok", arg}
				_, err := newProcDriver(spec, k.kind, driverDeps{lookPath: look})
				if want := f + " is set by nodeld"; err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("%s args %q: err %v, want %q", spec.Kind, spec.Args, err, want)
				}
			}
		}
		for _, f := range k.free {
			spec := k.spec
			spec.Args = []string{f, "1"}
			if _, err := newProcDriver(spec, k.kind, driverDeps{lookPath: look}); err != nil {
				t.Errorf("%s args %q: %v", spec.Kind, spec.Args, err)
			}
		}
	}
}

func TestProcKindHealthPath(t *testing.T) {
	dir, look := driverDir(t)
	tests := []struct {
		name string
		spec Spec
		kind procKind
		want string // substring of the error; "" means valid
	}{
		{"process", Spec{Kind: KindProcess, Dir: dir, Command: "bin", HealthPath: "/health"}, processKind("/health"), ""},
		{"llama.cpp", Spec{Kind: KindLlamaCpp, Dir: dir, ModelFile: "m.gguf", HealthPath: "/health"}, llamaCppKind(), "only for process"},
		{"mlx-lm", Spec{Kind: KindMLXLM, Dir: dir, HealthPath: "/v1/models"}, mlxLMKind(), "only for process"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := newProcDriver(tt.spec, tt.kind, driverDeps{lookPath: look})
			if tt.want == "" {
				if err != nil {
					t.Fatalf("newProcDriver: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("newProcDriver = %v, want %q", err, tt.want)
			}
		})
	}
	// A process without a health path has no probe: Start does not wait.
	if processKind("").probe != nil {
		t.Error(`processKind("") has a probe`)
	}
}

func TestManagedOllamaRunsNoProcess(t *testing.T) {
	m, err := NewManaged(Spec{Kind: KindOllama, Model: "llama3"}, ManagedDeps{})
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr := m.Logs()
	if pid := m.PID(); pid != 0 || stdout != nil || stderr != nil {
		t.Errorf("PID %d, Logs %q %q; want 0, nil, nil", pid, stdout, stderr)
	}
	if base, alive := m.Endpoint(); base != DefaultOllamaURL || alive {
		t.Errorf("Endpoint = %q, %v; want %s, false", base, alive, DefaultOllamaURL)
	}
}
