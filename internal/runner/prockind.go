package runner

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// procKind is what one process-backed runtime kind adds to procDriver:
// everything nodeld knows about that kind's server program, and nothing
// about running processes.
type procKind struct {
	// program is the server looked up on PATH when Spec.Command is "" (a
	// bare Spec.Command is looked up instead, a path must be absolute).
	// "" means the kind has no program of its own: the Spec must name its
	// command, absolute or inside Spec.Dir.
	program string
	// owned are the flags nodeld sets, which Spec.Args may not repeat,
	// alone or as --flag=value.
	owned []string
	// args returns the arguments nodeld owns, which come before Spec.Args,
	// given the Spec and its resolved model file ("" if none), and reports
	// what the Spec lacks for them. They may hold {port}, {dir} and
	// {model_file}.
	args func(spec Spec, modelFile string) ([]string, error)
	// healthPath is true when Spec.HealthPath is the server's health; the
	// other kinds may not set it.
	healthPath bool
	// probe asks the server at base (http://127.0.0.1:<port>) for its
	// health; err is non-nil exactly when the Health is not up. nil means
	// the server has no HTTP health: Start does not wait for it and Health
	// is up while the process runs.
	probe func(ctx context.Context, c *http.Client, spec Spec, base string) (Health, error)
}

// processKind is any command from a package manifest: the Spec names the
// program and all its arguments, and healthPath, when not "", is probed
// with GET (200 up, 503 loading).
func processKind(healthPath string) procKind {
	k := procKind{
		args:       func(Spec, string) ([]string, error) { return nil, nil },
		healthPath: true,
	}
	if healthPath != "" {
		k.probe = probePath
	}
	return k
}

// probePath is the health of a process server: GET Spec.HealthPath.
func probePath(ctx context.Context, c *http.Client, spec Spec, base string) (Health, error) {
	status, _, err := prober{c: c, base: base}.get(ctx, spec.HealthPath)
	switch {
	case err != nil:
		return HealthDown, err
	case status == http.StatusOK:
		return HealthUp, nil
	case status == http.StatusServiceUnavailable:
		return HealthLoading, fmt.Errorf("GET %s: %w", spec.HealthPath, errLoading)
	default:
		return HealthDown, fmt.Errorf("GET %s: HTTP %d", spec.HealthPath, status)
	}
}

// llamaCppKind is llama.cpp's llama-server: llama-server --model <model
// file> --host 127.0.0.1 --port <port> [args], probed like an adopted
// llama.cpp (GET /health, 503 while loading).
func llamaCppKind() procKind {
	return procKind{
		program: "llama-server",
		owned:   []string{"--model", "-m", "--host", "--port"},
		args: func(_ Spec, modelFile string) ([]string, error) {
			var err error
			if modelFile == "" {
				err = errors.New("llama.cpp needs a model file")
			}
			return []string{"--model", "{model_file}", "--host", "127.0.0.1", "--port", "{port}"}, err
		},
		probe: probeAdopted,
	}
}

// mlxLMKind is mlx_lm.server: mlx_lm.server --model <model file, else
// model, else package dir> --host 127.0.0.1 --port <port> [args], probed
// like an adopted mlx-lm (GET /v1/models).
func mlxLMKind() procKind {
	return procKind{
		program: "mlx_lm.server",
		owned:   []string{"--model", "--host", "--port"},
		args: func(spec Spec, modelFile string) ([]string, error) {
			model := "{model_file}"
			switch {
			case modelFile != "":
			case spec.Model != "":
				model = spec.Model
			default:
				model = "{dir}"
			}
			return []string{"--model", model, "--host", "127.0.0.1", "--port", "{port}"}, nil
		},
		probe: probeAdopted,
	}
}

// probeAdopted probes a managed server the way Probe probes an adopted
// one of the same kind, checking Spec.Model when set.
func probeAdopted(ctx context.Context, c *http.Client, spec Spec, base string) (Health, error) {
	res, err := Probe(ctx, c, AdoptedInstance{Kind: spec.Kind, URL: base, Model: spec.Model})
	return res.Health, err
}
