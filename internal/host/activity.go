package host

import "github.com/nodeld/nodeld/internal/ctl"

// activity is what an inference instance has served, for its status
// (nil for other instances): the requests in flight to its registration
// and when the last request to it was answered. The table counts them
// where the requests reach the instance, the proxy's local path and the
// mesh serve path alike (table.LocalSlot.Activity), so peers' requests
// count; it keeps no time, so the request path reads no clock: the host
// dates the last request when it first sees the count of answered
// requests move, at most one status read late (a controller reads it
// every tick), never early. A controller unloads an idle on-demand
// instance by it, and never one with a request in flight.
func (in *instance) activity() *ctl.InstanceActivity {
	if !in.inference {
		return nil
	}
	now := in.now()
	in.slotMu.Lock()
	defer in.slotMu.Unlock()
	a := in.slot.Activity()
	if done := in.doneBefore + a.Done; done != in.doneSeen {
		in.doneSeen, in.lastRequest = done, now
	}
	return &ctl.InstanceActivity{InFlight: a.InFlight, LastRequest: in.lastRequest}
}

// keepActivityLocked adds the requests answered by the registration about
// to be released to the instance's count, so its activity outlives its
// registrations (a restart registers anew). Call with slotMu held.
func (in *instance) keepActivityLocked() {
	in.doneBefore += in.slot.Activity().Done
}
