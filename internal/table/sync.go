package table

import (
	"context"
	"errors"
	"fmt"
)

// errNotUp reports a probe that answered but found the instance not up.
var errNotUp = errors.New("instance is not up")

// ProbeResult is what a probe of a local instance found.
type ProbeResult struct {
	// Up is true only when the instance answers its health check and can
	// serve now (not loading, not unhealthy).
	Up bool
	// Base is the instance's loopback base URL.
	Base string
	// Model is the model the server serves, when known.
	Model string
	// API names the API the server speaks ("openai", "ollama").
	API string
	// Runtime names the server software ("llama.cpp", "ollama", "mlx-lm").
	Runtime string
}

// Probe checks a local instance. The runtime adapters implement it; the
// table declares it so that it imports no runtime code.
type Probe interface {
	Probe(ctx context.Context) (ProbeResult, error)
}

// SyncOutcome is what SyncLocal found and did.
type SyncOutcome struct {
	// Registered is whether role is now served locally.
	Registered bool
	// Result is the probe's answer (zero when the probe failed).
	Result ProbeResult
	// Err says why role is not registered: the probe's error, a refused
	// registration (ErrBadRole, ErrNotLoopback), or an instance not up.
	// Nil when Registered.
	Err error
}

// SyncLocal probes role's local instance and serves role from it only while
// it is up: an up instance is registered (RegisterLocal), anything else (a
// probe error, an instance not up, a refused registration) deregisters the
// role. The caller owns restarting instances; the table only follows them.
func (t *Table) SyncLocal(ctx context.Context, role string, p Probe) SyncOutcome {
	res, err := p.Probe(ctx)
	switch {
	case err != nil:
		err = fmt.Errorf("probe %q: %w", role, err)
	case !res.Up:
		err = fmt.Errorf("probe %q: %w", role, errNotUp)
	default:
		err = t.RegisterLocal(role, res.Base, res.Model, res.API, res.Runtime)
	}
	if err != nil {
		t.DeregisterLocal(role)
		return SyncOutcome{Result: res, Err: err}
	}
	return SyncOutcome{Registered: true, Result: res}
}
