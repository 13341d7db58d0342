package runner

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nodeld/nodeld/internal/grammar"
)

// ErrNotLoopback reports an instance URL that is not http://<loopback>:<port>.
// Adopted servers are reached over loopback only; anything wider would let a
// config typo send prompts off the host.
var ErrNotLoopback = errors.New("url is not a loopback http endpoint")

// ErrInvalidConfig wraps every problem AdopterConfig validation finds.
var ErrInvalidConfig = errors.New("invalid adopted runtime config")

// ErrUnknownKind reports a runtime kind this package cannot probe.
var ErrUnknownKind = errors.New("unknown runtime kind")

// endpoint is a validated loopback instance address.
type endpoint struct {
	// base is "http://<ip>:<port>" with an IP literal, the form the
	// placement table stores ("localhost" is mapped to 127.0.0.1).
	base string
	// hostPort is "<ip>:<port>", used as the metrics instance label.
	hostPort string
}

// parseLoopbackURL applies grammar.ParseLoopbackURL: http://<loopback ip
// or localhost>:<port>, an optional trailing "/" and nothing else.
func parseLoopbackURL(raw string) (endpoint, error) {
	ap, err := grammar.ParseLoopbackURL(raw)
	if err != nil {
		if len(raw) > grammar.MaxLoopbackURLLen {
			raw = raw[:grammar.MaxLoopbackURLLen] + "..."
		}
		return endpoint{}, fmt.Errorf("%w: %q: %w", ErrNotLoopback, raw, err)
	}
	hp := ap.String()
	return endpoint{base: "http://" + hp, hostPort: hp}, nil
}

// validModelName accepts 1..maxModelNameBytes bytes of printable ASCII
// without space, quote or backslash. Model names include slashes (Hugging
// Face repo ids, GGUF paths) and colons (Ollama tags), so the role rule is
// too narrow; the bound and the charset keep them safe to log and to put in
// a JSON body.
func validModelName(name string) bool {
	if len(name) == 0 || len(name) > maxModelNameBytes {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c <= ' ' || c > '~' || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// validateInstance checks one configured instance and returns its endpoint.
func validateInstance(inst AdoptedInstance) (endpoint, error) {
	var errs []error
	if !grammar.ValidName(inst.Role) {
		errs = append(errs, fmt.Errorf("bad role %q", inst.Role))
	}
	if !inst.Kind.Valid() {
		errs = append(errs, fmt.Errorf("%w %q (want %s)", ErrUnknownKind, inst.Kind, strings.Join(grammar.AdoptableRuntimes(), ", ")))
	}
	if inst.Model != "" && !validModelName(inst.Model) {
		errs = append(errs, fmt.Errorf("bad model %q", inst.Model))
	}
	ep, err := parseLoopbackURL(inst.URL)
	if err != nil {
		errs = append(errs, err)
	}
	return ep, errors.Join(errs...)
}

// withDefaults fills zero durations.
func (c AdopterConfig) withDefaults() AdopterConfig {
	if c.Interval == 0 {
		c.Interval = DefaultProbeInterval
	}
	if c.ProbeTimeout == 0 {
		c.ProbeTimeout = DefaultProbeTimeout
	}
	return c
}

// validate checks the whole config (defaults applied) and reports every
// problem at once. It returns the endpoints in instance order.
func (c AdopterConfig) validate() ([]endpoint, error) {
	var errs []error
	if c.Interval < minProbeInterval {
		errs = append(errs, fmt.Errorf("interval %s is shorter than %s", c.Interval, minProbeInterval))
	}
	if c.ProbeTimeout <= 0 {
		errs = append(errs, fmt.Errorf("probe timeout %s is not positive", c.ProbeTimeout))
	}
	if len(c.Instances) > maxAdoptedInstances {
		errs = append(errs, fmt.Errorf("%d instances, at most %d", len(c.Instances), maxAdoptedInstances))
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
	}
	eps := make([]endpoint, len(c.Instances))
	type roleAddr struct{ role, hostPort string }
	seen := make(map[roleAddr]int, len(c.Instances))
	for i, inst := range c.Instances {
		ep, err := validateInstance(inst)
		if err != nil {
			errs = append(errs, fmt.Errorf("instances[%d]: %w", i, err))
			continue
		}
		k := roleAddr{inst.Role, ep.hostPort}
		if j, dup := seen[k]; dup {
			errs = append(errs, fmt.Errorf("instances[%d]: role %q at %s repeats instances[%d]", i, inst.Role, ep.hostPort, j))
			continue
		}
		seen[k] = i
		eps[i] = ep
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
	}
	return eps, nil
}
