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
	// Registered is whether the caller holds a registration of the role
	// now (Slot is not nil). Whether that registration serves the role is
	// the election's (LocalSlot.Serving).
	Registered bool
	// Slot is the caller's registration after the sync: pass it to the
	// next SyncLocal. Nil when not Registered.
	Slot *LocalSlot
	// Result is the probe's answer (zero when the probe failed).
	Result ProbeResult
	// Err says why role is not registered: the probe's error, a refused
	// registration (ErrBadRole, ErrNotLoopback), or an instance not up.
	// Nil when Registered.
	Err error
}

// SyncLocal probes an instance of role and keeps the caller's registration
// of it in line: held is that registration (nil when there is none, as
// before the first sync; otherwise a registration of role made by this table). While
// the instance is up, held is updated, or a registration of role by origin
// is made; anything else (a probe error, an instance not up, a refused
// registration) releases held, and only held: other registrations of role
// stay. The caller owns restarting instances; the table only follows them.
func (l *locals) SyncLocal(ctx context.Context, held *LocalSlot, origin Origin, role string, p Probe) SyncOutcome {
	res, err := p.Probe(ctx)
	switch {
	case err != nil:
		err = fmt.Errorf("probe %q: %w", role, err)
	case !res.Up:
		err = fmt.Errorf("probe %q: %w", role, errNotUp)
	case held != nil:
		err = held.Update(res.Base, res.Model, res.API, res.Runtime)
	default:
		held, err = l.RegisterLocal(origin, role, res.Base, res.Model, res.API, res.Runtime)
	}
	if err != nil {
		held.Release()
		return SyncOutcome{Result: res, Err: err}
	}
	return SyncOutcome{Registered: true, Slot: held, Result: res}
}
