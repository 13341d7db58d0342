package facts

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/identity"
)

// SourceOptions tune a Source. Zero values take the defaults.
type SourceOptions struct {
	// TTL is the lifetime of signed facts; DefaultTTL when zero.
	TTL time.Duration
	// MaxProbeAge is how long probed facts are reused before the next
	// probe; DefaultMaxProbeAge when zero.
	MaxProbeAge time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Perf, when set, is read at every probe: its measurements become
	// perf.infer.<role> capability records.
	Perf PerfSource
	// Class, when set, is the operator's node.class: the facts claim the
	// capability record node.class.<class> (ValidateClass).
	Class string
	// Extra are records and notes appended to every probe's facts as
	// they are: what the node enforces (isolation.*), decided once at
	// start. Records must validate (NewSource checks them).
	Extra      []Capability
	ExtraNotes []Note
}

// Source serves this node's facts, probing at most once per MaxProbeAge
// and signing every answer with a fresh seq. It is what describe calls.
type Source struct {
	deps   ProbeDeps
	key    ed25519.PrivateKey
	id     string
	seq    *SeqStore
	ttl    time.Duration
	maxAge time.Duration
	now    func() time.Time
	perf   PerfSource // nil: no measured performance
	// extra and extraNotes are SourceOptions.Extra and ExtraNotes.
	extra      []Capability
	extraNotes []Note

	// probeSem (capacity 1) lets one caller probe at a time while the
	// others wait, or give up when their ctx ends. It guards versions.
	probeSem chan struct{}
	versions *versionCache

	// mu guards labels, class, cached, probedAt and have. It is never
	// held across a probe.
	mu       sync.Mutex
	labels   map[string]string
	class    string
	cached   Facts
	probedAt time.Time
	have     bool
}

// NewSource validates its arguments and returns a Source. It probes
// nothing until the first call.
func NewSource(deps ProbeDeps, key ed25519.PrivateKey, labels map[string]string, seq *SeqStore, opts SourceOptions) (*Source, error) {
	var errs []error
	if err := deps.validate(); err != nil {
		errs = append(errs, err)
	}
	if len(key) != ed25519.PrivateKeySize {
		errs = append(errs, fmt.Errorf("private key has %d bytes, want %d", len(key), ed25519.PrivateKeySize))
	}
	if err := ValidateLabels(labels); err != nil {
		errs = append(errs, err)
	}
	if err := ValidateClass(opts.Class); err != nil {
		errs = append(errs, err)
	}
	if seq == nil {
		errs = append(errs, errors.New("seq store is nil"))
	}
	for _, c := range opts.Extra {
		if err := c.validate(); err != nil {
			errs = append(errs, fmt.Errorf("extra capability: %w", err))
		}
	}
	if opts.TTL == 0 {
		opts.TTL = DefaultTTL
	}
	if opts.TTL < MinTTL || opts.TTL > MaxTTL || opts.TTL%time.Second != 0 {
		errs = append(errs, fmt.Errorf("%w: %s is not whole seconds within %s..%s", ErrInvalidTTL, opts.TTL, MinTTL, MaxTTL))
	}
	if opts.MaxProbeAge == 0 {
		opts.MaxProbeAge = DefaultMaxProbeAge
	}
	if opts.MaxProbeAge < 0 {
		errs = append(errs, fmt.Errorf("max probe age %s is negative", opts.MaxProbeAge))
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("new facts source: %w", err)
	}
	return &Source{
		deps:   deps,
		key:    key,
		id:     identity.NodeID(key.Public().(ed25519.PublicKey)),
		labels: maps.Clone(labels),
		class:  opts.Class,
		seq:    seq,
		ttl:    opts.TTL,
		maxAge: opts.MaxProbeAge,
		now:    opts.Now,
		perf:   opts.Perf,
		extra:  opts.Extra, extraNotes: opts.ExtraNotes,
		probeSem: make(chan struct{}, 1),
		versions: &versionCache{now: opts.Now},
	}, nil
}

// Facts returns this node's facts, probing again when the cached ones are
// older than MaxProbeAge. The result is the caller's to modify.
func (s *Source) Facts(ctx context.Context) (Facts, error) {
	f, err := s.facts(ctx)
	if err != nil {
		return Facts{}, err
	}
	return f.clone(), nil
}

// Signed returns this node's facts signed with the node key, with the
// next seq from the SeqStore and the Source's TTL.
func (s *Source) Signed(ctx context.Context) (Signed, error) {
	f, err := s.facts(ctx)
	if err != nil {
		return Signed{}, err
	}
	seq, err := s.seq.Next()
	if err != nil {
		return Signed{}, fmt.Errorf("sign facts: %w", err)
	}
	return Sign(s.key, f, seq, s.now(), s.ttl)
}

// facts returns the cached facts, shared: callers must not modify them.
func (s *Source) facts(ctx context.Context) (Facts, error) {
	if f, ok := s.fresh(); ok {
		return f, nil
	}
	select {
	case s.probeSem <- struct{}{}:
	case <-ctx.Done():
		return Facts{}, ctx.Err()
	}
	defer func() { <-s.probeSem }()
	// Another caller may have probed while this one waited.
	if f, ok := s.fresh(); ok {
		return f, nil
	}
	s.mu.Lock()
	labels := s.labels
	s.mu.Unlock()
	f, err := probe(ctx, s.deps, labels, s.versions)
	if err != nil {
		return Facts{}, fmt.Errorf("probe facts: %w", err)
	}
	f.NodeID = s.id
	for _, c := range s.extra {
		f.Capabilities = append(f.Capabilities, c.clone())
	}
	f.Notes = append(f.Notes, s.extraNotes...)
	if s.perf != nil {
		f.Capabilities = append(f.Capabilities, perfRecords(s.perf.InferPerf())...)
	}
	s.mu.Lock()
	// Labels set while this probe ran win over the ones it was given.
	f.Labels = labelsOf(s.labels)
	f.Capabilities = replaceFamily(f.Capabilities, grammar.CapLabel, labelRecords(s.labels))
	f.Capabilities = replaceFamily(f.Capabilities, classFamily, classRecords(s.class))
	s.cached, s.probedAt, s.have = f, s.now(), true
	s.mu.Unlock()
	return f, nil
}

// SetLabels replaces the operator labels (a config reload): the next
// Facts and Signed carry them, without waiting for the next probe. Invalid
// labels (ValidateLabels) are refused and nothing changes.
func (s *Source) SetLabels(labels map[string]string) error {
	if err := ValidateLabels(labels); err != nil {
		return fmt.Errorf("set facts labels: %w", err)
	}
	labels = maps.Clone(labels)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.labels = labels
	if s.have {
		// A new map and slice, never the old ones changed: callers may
		// hold them.
		s.cached.Labels = labelsOf(labels)
		s.cached.Capabilities = replaceFamily(s.cached.Capabilities, grammar.CapLabel, labelRecords(labels))
	}
	return nil
}

// SetClass replaces the operator's node class (a config reload): the next
// Facts and Signed claim node.class.<class> (none when class is empty),
// without waiting for the next probe. An invalid class (ValidateClass) is
// refused and nothing changes.
func (s *Source) SetClass(class string) error {
	if err := ValidateClass(class); err != nil {
		return fmt.Errorf("set facts class: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.class = class
	if s.have {
		// A new slice, never the old one changed: callers may hold it.
		s.cached.Capabilities = replaceFamily(s.cached.Capabilities, classFamily, classRecords(class))
	}
	return nil
}

// labelsOf is labels as Probe puts them in Facts: a copy, nil when empty.
func labelsOf(labels map[string]string) map[string]string {
	if len(labels) == 0 {
		return nil
	}
	return maps.Clone(labels)
}

// fresh returns the cached facts when they are younger than maxAge. A
// clock that went backwards makes them stale.
func (s *Source) fresh() (Facts, bool) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.have {
		return Facts{}, false
	}
	age := now.Sub(s.probedAt)
	return s.cached, age >= 0 && age < s.maxAge
}

// clone deep-copies f.
func (f Facts) clone() Facts {
	f.GPUs = slices.Clone(f.GPUs)
	f.Runtimes = slices.Clone(f.Runtimes)
	f.Labels = maps.Clone(f.Labels)
	f.Notes = slices.Clone(f.Notes)
	if f.Capabilities != nil {
		caps := make([]Capability, len(f.Capabilities))
		for i, c := range f.Capabilities {
			caps[i] = c.clone()
		}
		f.Capabilities = caps
	}
	return f
}
