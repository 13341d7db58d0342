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

// InstanceError is one problem of AdopterConfig.Instances[Index]. Field
// names the AdoptedInstance field at fault (FieldRole, FieldKind, FieldURL,
// FieldModel), or is "" when the instance as a whole is (it repeats an
// earlier one).
type InstanceError struct {
	Index int
	Field string
	Err   error
}

// The fields an InstanceError names.
const (
	FieldRole  = "Role"
	FieldKind  = "Kind"
	FieldURL   = "URL"
	FieldModel = "Model"
)

func (e *InstanceError) Error() string { return fmt.Sprintf("instances[%d]: %v", e.Index, e.Err) }

// Unwrap returns the problem.
func (e *InstanceError) Unwrap() error { return e.Err }

// ConfigError is every problem AdopterConfig.Validate found, in order. It
// wraps ErrInvalidConfig and each problem; a problem of one instance is an
// *InstanceError.
type ConfigError struct {
	Problems []error
}

func (e *ConfigError) Error() string {
	return ErrInvalidConfig.Error() + ": " + errors.Join(e.Problems...).Error()
}

// Unwrap returns ErrInvalidConfig and the problems.
func (e *ConfigError) Unwrap() []error { return append([]error{ErrInvalidConfig}, e.Problems...) }

// validateInstance checks one configured instance and returns its endpoint.
func validateInstance(i int, inst AdoptedInstance) (endpoint, []error) {
	var errs []error
	if !grammar.ValidName(inst.Role) {
		errs = append(errs, &InstanceError{i, FieldRole, fmt.Errorf("bad role %q", inst.Role)})
	}
	if !inst.Kind.Valid() {
		errs = append(errs, &InstanceError{i, FieldKind, fmt.Errorf("%w %q (want %s)", ErrUnknownKind, inst.Kind, strings.Join(grammar.AdoptableRuntimes(), ", "))})
	}
	if inst.Model != "" && !validModelName(inst.Model) {
		errs = append(errs, &InstanceError{i, FieldModel, fmt.Errorf("bad model %q", inst.Model)})
	}
	ep, err := parseLoopbackURL(inst.URL)
	if err != nil {
		errs = append(errs, &InstanceError{i, FieldURL, err})
	}
	return ep, errs
}

// withDefaults fills zero durations and the discovery candidates.
func (c AdopterConfig) withDefaults() AdopterConfig {
	if c.Interval == 0 {
		c.Interval = DefaultProbeInterval
	}
	if c.ProbeTimeout == 0 {
		c.ProbeTimeout = DefaultProbeTimeout
	}
	if c.MissLimit == 0 {
		c.MissLimit = DefaultMissLimit
	}
	if c.DiscoverCandidates == nil {
		c.DiscoverCandidates = DefaultDiscoverCandidates()
	}
	return c
}

// Validate checks the whole config (zero values take their defaults) as
// NewAdopter, Prepare and ApplyConfig do, without an Adopter, and reports
// every problem at once as a *ConfigError. It reads and dials nothing.
func (c AdopterConfig) Validate() error {
	_, _, err := c.withDefaults().validate()
	return err
}

// candidate is a validated discovery candidate, as the instance it would
// be adopted as.
type candidate struct {
	inst AdoptedInstance
	ep   endpoint
}

// validate checks the whole config (defaults applied) and reports every
// problem at once. It returns the endpoints in instance order and, when
// discovery is on, the candidates in order.
func (c AdopterConfig) validate() ([]endpoint, []candidate, error) {
	var errs []error
	if c.Interval < minProbeInterval {
		errs = append(errs, fmt.Errorf("interval %s is shorter than %s", c.Interval, minProbeInterval))
	}
	if c.ProbeTimeout <= 0 {
		errs = append(errs, fmt.Errorf("probe timeout %s is not positive", c.ProbeTimeout))
	}
	if c.MissLimit < 1 || c.MissLimit > maxMissLimit {
		errs = append(errs, fmt.Errorf("miss limit %d is not in 1..%d", c.MissLimit, maxMissLimit))
	}
	if len(c.Instances) > maxAdoptedInstances {
		errs = append(errs, fmt.Errorf("%d instances, at most %d", len(c.Instances), maxAdoptedInstances))
		return nil, nil, &ConfigError{Problems: errs}
	}
	eps := make([]endpoint, len(c.Instances))
	type roleAddr struct{ role, hostPort string }
	seen := make(map[roleAddr]int, len(c.Instances))
	for i, inst := range c.Instances {
		ep, ierrs := validateInstance(i, inst)
		if len(ierrs) > 0 {
			errs = append(errs, ierrs...)
			continue
		}
		k := roleAddr{inst.Role, ep.hostPort}
		if j, dup := seen[k]; dup {
			errs = append(errs, &InstanceError{i, "", fmt.Errorf("role %q at %s repeats instances[%d]", inst.Role, ep.hostPort, j)})
			continue
		}
		seen[k] = i
		eps[i] = ep
	}
	var cands []candidate
	if c.Discover {
		var cerrs []error
		cands, cerrs = c.validateDiscovery()
		errs = append(errs, cerrs...)
	}
	if len(errs) > 0 {
		return nil, nil, &ConfigError{Problems: errs}
	}
	return eps, cands, nil
}

// validateDiscovery checks DiscoverRole and DiscoverCandidates.
func (c AdopterConfig) validateDiscovery() ([]candidate, []error) {
	var errs []error
	if !grammar.ValidName(c.DiscoverRole) {
		errs = append(errs, fmt.Errorf("discover role: bad role %q", c.DiscoverRole))
	}
	if len(c.DiscoverCandidates) > maxDiscoverCandidates {
		return nil, append(errs, fmt.Errorf("%d discovery candidates, at most %d", len(c.DiscoverCandidates), maxDiscoverCandidates))
	}
	cands := make([]candidate, 0, len(c.DiscoverCandidates))
	for i, dc := range c.DiscoverCandidates {
		inst := AdoptedInstance{Role: c.DiscoverRole, Kind: dc.Kind, URL: dc.URL}
		if !dc.Kind.Valid() {
			errs = append(errs, fmt.Errorf("discover candidates[%d]: %w %q", i, ErrUnknownKind, dc.Kind))
		}
		ep, err := parseLoopbackURL(dc.URL)
		if err != nil {
			errs = append(errs, fmt.Errorf("discover candidates[%d]: %w", i, err))
		}
		cands = append(cands, candidate{inst: inst, ep: ep})
	}
	return cands, errs
}
