package table

// Activity is what a local registration has served, counted where the
// requests reach the instance (the proxy's local path and the mesh serve
// path, both through a Hold), peers' requests included: the holds not yet
// done, and how many were done. The host reports it per instance so that
// a controller unloads an idle on-demand instance, and never one with a
// request in flight; it dates the last request itself when it sees Done
// move, so the request path reads no clock for it.
type Activity struct {
	// InFlight counts the requests resolved to the registration and not
	// yet answered (its Holds not yet done).
	InFlight int64
	// Done counts the requests answered so far.
	Done uint64
}

// Activity returns what s has served so far; the zero Activity for a nil
// s. It takes no lock: two atomic loads, InFlight first, so that a
// request done between them is counted in flight or done, never neither.
func (s *LocalSlot) Activity() Activity {
	if s == nil {
		return Activity{}
	}
	a := Activity{InFlight: s.holds.Load()}
	a.Done = s.done.Load()
	return a
}

// noteDone counts a hold of s done, before the hold is given back
// (Hold.Done): one atomic add on the request path, on the cache line the
// hold count is on already.
func (s *LocalSlot) noteDone() { s.done.Add(1) }
