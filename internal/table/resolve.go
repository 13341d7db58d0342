package table

import (
	"cmp"
	"slices"
	"strconv"
	"time"
)

// candidate is a remote node that may serve a role, before the admission
// check.
type candidate struct {
	node    string
	model   string
	runtime string
	healthy bool
	load    float64
	// waiting: the node restarted and its routes wait for its new link
	// (KeepForRestart).
	waiting bool
}

// compareCandidates orders candidates best first: a node with a live link
// before one waiting for its link after a restart (which would make the
// request wait), then healthy ("health" absent or "up") before unhealthy,
// then lower load, then node id ascending. The order is total, so
// resolution is deterministic.
func compareCandidates(a, b candidate) int {
	if a.waiting != b.waiting {
		if b.waiting {
			return -1
		}
		return 1
	}
	if a.healthy != b.healthy {
		if a.healthy {
			return -1
		}
		return 1
	}
	if c := cmp.Compare(a.load, b.load); c != 0 {
		return c
	}
	return cmp.Compare(a.node, b.node)
}

// candidatesLocked returns role's remote nodes that are on its use_from
// allowlist now and fresh at now, best first; a node whose wait for its
// link after a restart is over is left out. Call with mu held.
func (t *Table) candidatesLocked(role string, now time.Time) []candidate {
	return t.appendCandidatesLocked(nil, role, now)
}

// appendCandidatesLocked is candidatesLocked appending to cs: resolve
// gives it room on its stack, most roles have few candidates.
func (t *Table) appendCandidatesLocked(cs []candidate, role string, now time.Time) []candidate {
	per := t.remote[role]
	allowed := t.allow[role]
	if per == nil || len(allowed) == 0 {
		return cs
	}
	for i := range per.entries {
		e := &per.entries[i]
		node := e.cand.node
		if _, ok := allowed[node]; !ok || !t.fresh(*e, now) {
			continue
		}
		waiting, expired := t.waitingLocked(node, now)
		if expired {
			continue
		}
		c := e.cand
		c.waiting = waiting
		cs = append(cs, c)
	}
	slices.SortFunc(cs, compareCandidates)
	return cs
}

func candidateOf(node string, ad Advertisement) candidate {
	h, ok := ad.Metadata[MetaHealth]
	load := 0.0
	if s, ok := ad.Metadata[MetaLoad]; ok {
		load = parseLoad(s)
	}
	return candidate{
		node:    node,
		model:   ad.Metadata[MetaModel],
		runtime: ad.Metadata[MetaRuntime],
		healthy: !ok || h == HealthUp,
		load:    load,
	}
}

func candidateOrder(cs []candidate) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.node
	}
	return out
}

// Resolve returns where role is served now. A local instance wins (sticky:
// its KV cache stays warm): the elected one of its registrations (see
// RegisterLocal). Otherwise, when there is a mesh, the best
// remote candidate (see compareCandidates) that is on role's use_from
// allowlist, fresh by TTL, not past a wait for its link (KeepForRestart)
// and admitted at this very call: admission is
// re-checked every time, so a revoked peer stops resolving at once, before
// its entry is removed.
func (t *Table) Resolve(role string) (Target, bool) { return t.ResolveExcept(role, "") }

// ResolveExcept is Resolve without node among the remote candidates ("" =
// none left out): the next choice after a forward to node failed before any
// answer came back. A local instance still wins.
func (t *Table) ResolveExcept(role, node string) (Target, bool) {
	tg, _, ok := t.resolve(role, node, false)
	return tg, ok
}

// ResolveHeld is Resolve that, when role resolves to a local instance,
// also takes a Hold of the elected registration in the same step: the
// forwarder gives it back (Hold.Done) once its exchange with the instance
// has ended, so the registration's holder stops the instance only after
// the requests sent to it are answered (LocalSlot.Drained). A remote
// target comes with the zero Hold.
func (t *Table) ResolveHeld(role string) (Target, Hold, bool) { return t.resolve(role, "", true) }

func (t *Table) resolve(role, node string, hold bool) (Target, Hold, bool) {
	t.mu.RLock()
	s := t.electedLocked(role)
	var h Hold
	var room [4]candidate // cs's, unless there are more
	var cs []candidate
	if s != nil && hold {
		h = s.holdLocked()
	}
	if s == nil && t.admit != nil {
		cs = t.appendCandidatesLocked(room[:0], role, t.compareNow())
		if node != "" {
			cs = slices.DeleteFunc(cs, func(c candidate) bool { return c.node == node })
		}
	}
	var l localEntry
	if s != nil {
		l = s.entry
	}
	t.mu.RUnlock()
	if s != nil {
		return Target{Kind: TargetLocal, Base: l.base, Model: l.model, Runtime: l.runtime}, h, true
	}
	tg, ok := t.pickAdmitted(cs)
	return tg, Hold{}, ok
}

// pickAdmitted returns the first admitted candidate. Call without mu: the
// Admission belongs to the mesh and may take its own locks.
func (t *Table) pickAdmitted(cs []candidate) (Target, bool) {
	if t.admit == nil {
		return Target{}, false
	}
	for _, c := range cs {
		if t.admit.IsAdmitted(c.node) {
			return Target{Kind: TargetRemote, NodeID: c.node, Model: c.model, Runtime: c.runtime, WaitingForLink: c.waiting}, true
		}
	}
	return Target{}, false
}

// BaseURLForRole returns the OpenAI base URL ("…/v1") for in-process
// consumers: the instance itself when role is served locally, this node's
// loopback proxy when it is served remotely (the proxy speaks the mesh).
// False when nothing serves role, or it is remote and no proxy port is
// registered for it.
func (t *Table) BaseURLForRole(role string) (string, bool) {
	tg, ok := t.Resolve(role)
	if !ok {
		return "", false
	}
	if tg.Kind == TargetLocal {
		return tg.Base + "/v1", true
	}
	port, ok := t.ProxyPort(role)
	if !ok {
		return "", false
	}
	return "http://127.0.0.1:" + strconv.Itoa(int(port)) + "/v1", true
}
