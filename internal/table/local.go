package table

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/nodeld/nodeld/internal/grammar"
)

// ErrReleased reports an Update of a LocalSlot that was already released.
var ErrReleased = errors.New("local slot released")

// Origin says who registered a local instance. It decides, before
// registration order, which of a role's local registrations serves it.
type Origin int

const (
	// OriginPlaced is an instance this node started from a placed package
	// and supervises (the host). It serves before any adopted server.
	OriginPlaced Origin = iota + 1
	// OriginAdopted is a server this node only probes
	// (inference.instances, the runner's Adopter).
	OriginAdopted
)

// String returns "placed" or "adopted" ("unknown" for any other value).
func (o Origin) String() string {
	switch o {
	case OriginPlaced:
		return "placed"
	case OriginAdopted:
		return "adopted"
	default:
		return "unknown"
	}
}

// MarshalText encodes the origin as its String form, for status JSON.
func (o Origin) MarshalText() ([]byte, error) {
	return []byte(o.String()), nil
}

// UnmarshalText decodes the String form, so status JSON reads back.
func (o *Origin) UnmarshalText(b []byte) error {
	switch string(b) {
	case "placed":
		*o = OriginPlaced
	case "adopted":
		*o = OriginAdopted
	default:
		return fmt.Errorf("unknown origin %q", b)
	}
	return nil
}

func (o Origin) valid() bool { return o == OriginPlaced || o == OriginAdopted }

// locals holds this node's registrations of local instances, by role,
// and elects the one that serves each role. A registration is its
// holder's LocalSlot.
type locals struct {
	c *core
	// local: role -> its registrations, in registration order, never
	// empty; the elected one serves.
	local map[string][]*LocalSlot
}

func newLocals(c *core) locals {
	return locals{c: c, local: make(map[string][]*LocalSlot)}
}

// LocalSlot is one registration of a local instance for a role, held by
// whoever registered it (RegisterLocal). Only its holder changes it
// (Update) or withdraws it (Release), so two writers of one role never undo
// each other. A role is served locally while it has any registration; which
// one serves is elected (see RegisterLocal). The methods are safe for
// concurrent use.
type LocalSlot struct {
	l      *locals
	role   string
	origin Origin

	// entry and released are guarded by the table's mu.
	entry    localEntry
	released bool

	// holds counts the Holds of s not yet done. It grows only under mu
	// while s is elected, so never after Release.
	holds atomic.Int64
	// withdrawn is set by Release, under mu, before it looks at holds.
	withdrawn atomic.Bool
	// drained is closed (once) when s is withdrawn with no hold left.
	drained   chan struct{}
	drainOnce sync.Once
	// done counts the Holds of s done so far (Activity).
	done atomic.Uint64
}

// Hold is a forward's use of the local registration its role resolved to,
// taken in the same step as the resolution (ResolveHeld, LocalForPeerHeld)
// and given back with Done once the exchange with the instance has ended.
// A registration released while holds of it are outstanding is drained
// (LocalSlot.Drained) only when the last is done, so its holder stops the
// instance once nothing new reaches it and what was sent to it is
// answered. The zero Hold (a remote target, nothing resolved) holds
// nothing.
type Hold struct{ s *LocalSlot }

// Done gives the hold back. Call it exactly once per hold taken; Done of
// the zero Hold does nothing.
func (h Hold) Done() {
	s := h.s
	if s == nil {
		return
	}
	s.noteDone()
	// Release stores withdrawn before it loads holds, and this adds before
	// it loads withdrawn: one of the two sees the other and closes drained.
	if s.holds.Add(-1) == 0 && s.withdrawn.Load() {
		s.markDrained()
	}
}

// holdLocked takes a hold of s. Call with mu held (for reading at
// least) and s elected, so s is not released.
func (s *LocalSlot) holdLocked() Hold {
	s.holds.Add(1)
	return Hold{s: s}
}

func (s *LocalSlot) markDrained() { s.drainOnce.Do(func() { close(s.drained) }) }

// RegisterLocal adds a registration of role served by the loopback server
// at base, made by origin, and returns it: the caller holds it, updates it
// while the instance changes (LocalSlot.Update) and releases it when the
// instance stops serving (LocalSlot.Release). It refuses an unknown origin,
// a role that is not a grammar.ValidName (ErrBadRole) and a base that
// grammar.ParseLoopbackURL refuses
// (ErrNotLoopback); the base is stored in canonical form.
//
// A role with several registrations is served by exactly one, elected
// deterministically: the lowest Origin first (OriginPlaced before
// OriginAdopted), then the oldest registration. A new registration
// therefore never displaces an older one of its origin (the serving
// instance keeps its warm cache), and releasing the elected one elects the
// next at once. The generation is bumped, and subscribers woken, only when
// the elected base of the role changes (a registration that stands by, or
// a change of model, api or runtime alone, bumps nothing).
func (l *locals) RegisterLocal(origin Origin, role, base, model, api, runtime string) (*LocalSlot, error) {
	if !origin.valid() {
		return nil, fmt.Errorf("register %q: unknown origin %d", role, origin)
	}
	if !grammar.ValidName(role) {
		return nil, fmt.Errorf("register %q: %w", role, ErrBadRole)
	}
	canon, err := canonicalBase(base)
	if err != nil {
		return nil, fmt.Errorf("register %q: %w", role, err)
	}
	s := &LocalSlot{l: l, role: role, origin: origin,
		entry: localEntry{base: canon, model: model, api: api, runtime: runtime}, drained: make(chan struct{})}
	var e effects
	l.c.mu.Lock()
	before := l.electedBaseLocked(role)
	l.local[role] = append(l.local[role], s)
	l.localChangedLocked(&e, role, before)
	l.c.mu.Unlock()
	l.c.finish(e)
	return s, nil
}

// Role returns the role s registers.
func (s *LocalSlot) Role() string { return s.role }

// Origin returns who registered s.
func (s *LocalSlot) Origin() Origin { return s.origin }

// Update replaces what s registers, keeping its place in the election. It
// refuses a base that grammar.ParseLoopbackURL refuses (ErrNotLoopback) and a
// released slot (ErrReleased), and then leaves s as it was. It bumps the
// generation only when s is elected and its base changes.
func (s *LocalSlot) Update(base, model, api, runtime string) error {
	canon, err := canonicalBase(base)
	if err != nil {
		return fmt.Errorf("update %q: %w", s.role, err)
	}
	l := s.l
	var e effects
	l.c.mu.Lock()
	if s.released {
		l.c.mu.Unlock()
		return fmt.Errorf("update %q: %w", s.role, ErrReleased)
	}
	before := l.electedBaseLocked(s.role)
	s.entry = localEntry{base: canon, model: model, api: api, runtime: runtime}
	l.localChangedLocked(&e, s.role, before)
	l.c.mu.Unlock()
	l.c.finish(e)
	return nil
}

// Release withdraws s and only s: the role stays served while another
// registration of it remains, re-elected at once, so no resolution returns
// s from here on. Requests resolved to it before may still be on their
// way to its instance: Drained says when the last is answered. Releasing
// a released slot, or a nil one, does nothing.
func (s *LocalSlot) Release() {
	if s == nil {
		return
	}
	l := s.l
	var e effects
	l.c.mu.Lock()
	if !s.released {
		s.released = true
		s.withdrawn.Store(true)
		before := l.electedBaseLocked(s.role)
		slots := l.local[s.role]
		for i, o := range slots {
			if o == s {
				slots = append(slots[:i:i], slots[i+1:]...)
				break
			}
		}
		if len(slots) == 0 {
			delete(l.local, s.role)
		} else {
			l.local[s.role] = slots
		}
		l.localChangedLocked(&e, s.role, before)
	}
	l.c.mu.Unlock()
	if s.holds.Load() == 0 {
		s.markDrained()
	}
	l.c.finish(e)
}

// Drained returns a channel closed once s is released and every Hold of
// it is done: from then on no forward resolved to s is using its instance,
// which its holder may stop without cutting one. It is never closed while
// s is registered; a nil slot's is closed.
func (s *LocalSlot) Drained() <-chan struct{} {
	if s == nil {
		return closedChan
	}
	return s.drained
}

// closedChan is the Drained of a nil slot.
var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// Holds returns how many holds of s are outstanding (0 for a nil slot).
func (s *LocalSlot) Holds() int {
	if s == nil {
		return 0
	}
	return int(s.holds.Load())
}

// Serving reports whether s is the registration elected to serve its role
// now. A released slot never serves.
func (s *LocalSlot) Serving() bool {
	l := s.l
	l.c.mu.RLock()
	defer l.c.mu.RUnlock()
	return !s.released && l.electedLocked(s.role) == s
}

// electedLocked returns the registration that serves role locally, nil
// when there is none: the lowest origin, then the oldest (l.local[role] is
// kept in registration order). Call with mu held.
func (l *locals) electedLocked(role string) *LocalSlot {
	var best *LocalSlot
	for _, s := range l.local[role] {
		if best == nil || s.origin < best.origin {
			best = s
		}
	}
	return best
}

// electionOrderLocked returns role's registrations in election order, the
// elected one first. Call with mu held.
func (l *locals) electionOrderLocked(role string) []*LocalSlot {
	slots := slices.Clone(l.local[role])
	slices.SortStableFunc(slots, func(a, b *LocalSlot) int { return cmp.Compare(a.origin, b.origin) })
	return slots
}

// localLocked returns the entry of role's elected registration. Call with
// mu held.
func (l *locals) localLocked(role string) (localEntry, bool) {
	s := l.electedLocked(role)
	if s == nil {
		return localEntry{}, false
	}
	return s.entry, true
}

// electedBaseLocked returns the base of role's elected registration, ""
// when there is none (a registered base is never empty). Call with mu held.
func (l *locals) electedBaseLocked(role string) string {
	e, _ := l.localLocked(role)
	return e.base
}

// localChangedLocked bumps the generation when role's elected base is no
// longer before. Call with mu held for writing.
func (l *locals) localChangedLocked(e *effects, role, before string) {
	if l.electedBaseLocked(role) != before {
		l.c.bump(e)
	}
}

// LocalBaseForRole returns the OpenAI base URL ("…/v1") of role's instance
// on this node only, for consumers that must not go through the mesh.
func (l *locals) LocalBaseForRole(role string) (string, bool) {
	l.c.mu.RLock()
	defer l.c.mu.RUnlock()
	e, ok := l.localLocked(role)
	if !ok {
		return "", false
	}
	return e.base + "/v1", true
}

// canonicalBase returns base as "http://<loopback IP>:<port>" ("localhost"
// stored as 127.0.0.1), so nothing registered is ever resolved by name, or
// an error wrapping ErrNotLoopback.
func canonicalBase(base string) (string, error) {
	ap, err := grammar.ParseLoopbackURL(base)
	if err != nil {
		// %q keeps control bytes of a hostile base out of log lines.
		if len(base) > grammar.MaxLoopbackURLLen {
			base = base[:grammar.MaxLoopbackURLLen] + "..."
		}
		return "", fmt.Errorf("%w: %q: %w", ErrNotLoopback, base, err)
	}
	return "http://" + ap.String(), nil
}
