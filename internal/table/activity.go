package table

import "time"

// Activity is what a local registration has served, counted where the
// requests reach the instance (the proxy's local path and the mesh serve
// path, both through a Hold), peers' requests included: the holds not yet
// done, and when the last one was done. The host reports it per instance
// so that a controller unloads an idle on-demand instance, and never one
// with a request in flight.
type Activity struct {
	// InFlight counts the requests resolved to the registration and not
	// yet answered (its Holds not yet done).
	InFlight int64
	// LastDone is when the last of them was answered; zero when none was.
	LastDone time.Time
}

// Activity returns what s has served so far; the zero Activity for a nil
// s. It takes no lock: two atomic loads, InFlight first, so that a
// request done between them is seen in flight or done at its time, never
// gone without moving LastDone (an error on the busy side).
func (s *LocalSlot) Activity() Activity {
	if s == nil {
		return Activity{}
	}
	a := Activity{InFlight: s.holds.Load()}
	if ns := s.lastDone.Load(); ns != 0 {
		a.LastDone = time.Unix(0, ns)
	}
	return a
}

// noteDone records that a hold of s is done, before the hold is given
// back (Hold.Done), so a reader that sees it no longer in flight sees its
// time too. One clock read and one atomic store on the request path; the
// wall clock, as the host's status reports it.
func (s *LocalSlot) noteDone() { s.lastDone.Store(time.Now().UnixNano()) }
