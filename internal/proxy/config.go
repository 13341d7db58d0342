package proxy

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/holdq"
)

// RoleConfig is one role's loopback listener.
type RoleConfig struct {
	// Name is the role the listener fronts; requests never name it.
	Name string
	// Listen is a loopback "ip:port"; port 0 picks a free port, which is
	// then reported through Deps.Ports and Proxy.Addr.
	Listen string
	// Concurrency is the most requests in flight on this role; one more is
	// answered 429. 0 means DefaultConcurrency.
	Concurrency int
	// ModelPassthrough keeps the client's "model" on requests to a local
	// instance, for servers that host several models. By default it is
	// pinned to the instance's model, as on requests served to peers.
	ModelPassthrough bool
}

// Config is the proxy's configuration. Zero fields take the Default values
// of limits.go.
type Config struct {
	Roles []RoleConfig
	// MaxBodyBytes bounds a request body from a local client (413 above).
	MaxBodyBytes int64
	// MeshMaxBodyBytes bounds a request body forwarded to a peer.
	MeshMaxBodyBytes int64
	// StallTimeout is the longest wait for the upstream response head, and
	// the longest upstream silence between body bytes, before the exchange
	// is cut (504 before the head, a cut stream after it).
	StallTimeout time.Duration
	// RequestTimeout caps one forwarded request from arrival to last byte.
	RequestTimeout time.Duration
	// HeaderTimeout bounds reading a client's request head, and a new
	// connection's wait for its first request.
	HeaderTimeout time.Duration
	// MaxConnections is how many client connections each role's listener
	// holds open at once, idle or busy; one more is closed as soon as it
	// is accepted. A reload applies it to the next accepted connection.
	MaxConnections int
	// BodyTimeout bounds reading a client's request body, from the end of
	// its head to its last byte, on both paths: a client still sending
	// when it passes is answered 408 and its concurrency slot is freed.
	BodyTimeout time.Duration
	// DrainTimeout bounds a graceful shutdown of a listener.
	DrainTimeout time.Duration
	// MaxResponseBytes caps the response body relayed to a client; a
	// longer response is cut.
	MaxResponseBytes int64
	// Hold is how requests wait for a role expected back (hold.go);
	// MaxWait 0 holds nothing.
	Hold HoldConfig
}

// HoldConfig is how a request for a role with no live route waits for one.
type HoldConfig = holdq.Config

// FromConfig maps inference (roles, limits) and proxy.hold to the proxy's
// Config: the one mapping config check, run and a reload use.
func FromConfig(cfg *config.Config) Config {
	l, h := cfg.Inference.Limits, cfg.Proxy.Hold
	pc := Config{MaxBodyBytes: l.MaxBodyBytes, MeshMaxBodyBytes: l.MeshMaxBodyBytes, MaxResponseBytes: l.MaxResponseBytes,
		StallTimeout: l.StallTimeout.D, RequestTimeout: l.RequestTimeout.D, BodyTimeout: l.BodyTimeout.D, MaxConnections: l.MaxConnections,
		Hold: HoldConfig{MaxWait: h.MaxWait.D, Queue: h.Queue, Keepalive: h.Keepalive.D, Remember: h.Remember.D}}
	for _, r := range cfg.Inference.Roles {
		pc.Roles = append(pc.Roles, RoleConfig{Name: r.Name, Listen: r.Listen, Concurrency: l.ConcurrencyFor(r), ModelPassthrough: r.ModelPassthrough})
	}
	return pc
}

// withDefaults returns cfg with zero fields set to their defaults.
func (cfg Config) withDefaults() Config {
	out := cfg
	out.Roles = make([]RoleConfig, len(cfg.Roles))
	for i, rc := range cfg.Roles {
		rc.Concurrency = cmp.Or(rc.Concurrency, DefaultConcurrency)
		out.Roles[i] = rc
	}
	out.MaxBodyBytes = cmp.Or(out.MaxBodyBytes, DefaultMaxBodyBytes)
	out.MeshMaxBodyBytes = cmp.Or(out.MeshMaxBodyBytes, DefaultMeshMaxBodyBytes)
	out.StallTimeout = cmp.Or(out.StallTimeout, DefaultStallTimeout)
	out.RequestTimeout = cmp.Or(out.RequestTimeout, DefaultRequestTimeout)
	out.MaxConnections = cmp.Or(out.MaxConnections, DefaultMaxConnections)
	out.HeaderTimeout = cmp.Or(out.HeaderTimeout, DefaultHeaderTimeout)
	out.BodyTimeout = cmp.Or(out.BodyTimeout, DefaultBodyTimeout)
	out.MaxResponseBytes = cmp.Or(out.MaxResponseBytes, DefaultMaxResponseBytes)
	out.DrainTimeout = cmp.Or(out.DrainTimeout, DefaultDrainTimeout)
	out.Hold = out.Hold.WithDefaults()
	return out
}

// Validate reports every static problem of cfg at once. Zero values are
// valid (they take defaults).
func (cfg Config) Validate() error {
	var errs []error
	if len(cfg.Roles) > MaxRoles {
		errs = append(errs, fmt.Errorf("%d roles, at most %d", len(cfg.Roles), MaxRoles))
	}
	names := make(map[string]bool, len(cfg.Roles))
	addrs := make(map[string]string, len(cfg.Roles))
	for i, rc := range cfg.Roles {
		if !grammar.ValidName(rc.Name) {
			errs = append(errs, fmt.Errorf("roles[%d]: role name %q is not %s", i, rc.Name, grammar.NameSyntax))
		} else if names[rc.Name] {
			errs = append(errs, fmt.Errorf("roles[%d]: duplicate role %q", i, rc.Name))
		}
		names[rc.Name] = true
		ap, err := grammar.ParseLoopbackAddrPort(rc.Listen)
		if err != nil {
			errs = append(errs, fmt.Errorf("roles[%d] (%s): listen %q: %w", i, rc.Name, rc.Listen, err))
		} else if ap.Port() != 0 {
			if other, ok := addrs[ap.String()]; ok {
				errs = append(errs, fmt.Errorf("roles[%d] (%s): listen %s already used by role %q", i, rc.Name, rc.Listen, other))
			}
			addrs[ap.String()] = rc.Name
		}
		if rc.Concurrency < 0 || rc.Concurrency > MaxConcurrency {
			errs = append(errs, fmt.Errorf("roles[%d] (%s): concurrency %d outside 0..%d", i, rc.Name, rc.Concurrency, MaxConcurrency))
		}
	}
	if cfg.MaxConnections < 0 || cfg.MaxConnections > MaxConnectionsLimit {
		errs = append(errs, fmt.Errorf("max connections %d outside 0..%d", cfg.MaxConnections, MaxConnectionsLimit))
	}
	checkBytes := func(name string, v int64) {
		if v < 0 || v > MaxBodyBytesLimit {
			errs = append(errs, fmt.Errorf("%s %d outside 0..%d", name, v, MaxBodyBytesLimit))
		}
	}
	checkBytes("max body bytes", cfg.MaxBodyBytes)
	checkBytes("mesh max body bytes", cfg.MeshMaxBodyBytes)
	if cfg.MaxResponseBytes < 0 {
		errs = append(errs, fmt.Errorf("max response bytes %d is negative", cfg.MaxResponseBytes))
	}
	checkDur := func(name string, d time.Duration) {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s %s is negative", name, d))
		}
	}
	checkDur("stall timeout", cfg.StallTimeout)
	checkDur("request timeout", cfg.RequestTimeout)
	checkDur("header timeout", cfg.HeaderTimeout)
	checkDur("body timeout", cfg.BodyTimeout)
	checkDur("drain timeout", cfg.DrainTimeout)
	if err := cfg.Hold.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
