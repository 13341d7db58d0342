package runner

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
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
	// base is "http://<ip>:<port>" with an IP literal, the only form the
	// placement table accepts ("localhost" is mapped to 127.0.0.1).
	base string
	// hostPort is "<ip>:<port>", used as the metrics instance label.
	hostPort string
}

// parseLoopbackURL accepts http://<loopback ip or localhost>:<port> with an
// optional trailing "/" and nothing else: no userinfo, path, query or
// fragment, no zone, no port 0.
func parseLoopbackURL(raw string) (endpoint, error) {
	if len(raw) > maxURLBytes {
		return endpoint{}, fmt.Errorf("%w: longer than %d bytes", ErrNotLoopback, maxURLBytes)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return endpoint{}, fmt.Errorf("%w: %q does not parse", ErrNotLoopback, raw)
	}
	if u.Scheme != "http" || u.Opaque != "" || u.User != nil || u.RawQuery != "" ||
		u.ForceQuery || u.Fragment != "" || (u.Path != "" && u.Path != "/") {
		return endpoint{}, fmt.Errorf("%w: %q must be http://<loopback ip>:<port>", ErrNotLoopback, raw)
	}
	host, portStr, err := net.SplitHostPort(u.Host)
	if err != nil {
		return endpoint{}, fmt.Errorf("%w: %q needs an explicit port", ErrNotLoopback, raw)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		return endpoint{}, fmt.Errorf("%w: %q has a bad port", ErrNotLoopback, raw)
	}
	var ip netip.Addr
	if strings.EqualFold(host, "localhost") {
		ip = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	} else {
		ip, err = netip.ParseAddr(host)
		if err != nil || ip.Zone() != "" {
			return endpoint{}, fmt.Errorf("%w: %q: host must be an IP literal or localhost", ErrNotLoopback, raw)
		}
		ip = ip.Unmap()
	}
	if !ip.IsLoopback() {
		return endpoint{}, fmt.Errorf("%w: %q", ErrNotLoopback, raw)
	}
	hp := net.JoinHostPort(ip.String(), strconv.FormatUint(port, 10))
	return endpoint{base: "http://" + hp, hostPort: hp}, nil
}

// validRole applies the placement table's role rule: 1..64 bytes, first an
// ASCII letter or digit, then letters, digits or one of "._+:-".
func validRole(role string) bool {
	if len(role) == 0 || len(role) > maxRoleBytes || !isAlnum(role[0]) {
		return false
	}
	for i := 1; i < len(role); i++ {
		c := role[i]
		if !isAlnum(c) && !strings.ContainsRune("._+:-", rune(c)) {
			return false
		}
	}
	return true
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

func isAlnum(c byte) bool {
	return ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9')
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
	if !validRole(inst.Role) {
		errs = append(errs, &InstanceError{i, FieldRole, fmt.Errorf("bad role %q", inst.Role)})
	}
	if !inst.Kind.Valid() {
		errs = append(errs, &InstanceError{i, FieldKind, fmt.Errorf("%w %q (want llama.cpp, ollama, mlx-lm or openai)", ErrUnknownKind, inst.Kind)})
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
	if !validRole(c.DiscoverRole) {
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
