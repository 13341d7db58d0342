package host

import "github.com/nodeld/nodeld/internal/ctl"

// activity is what an inference instance has served, for its status
// (nil for other instances): the requests in flight to its registration
// and when the last request to any of its registrations was answered. The
// table counts them where the requests reach the instance, the proxy's
// local path and the mesh serve path alike (table.LocalSlot.Activity), so
// peers' requests count. A controller unloads an idle on-demand instance
// by it, and never one with a request in flight.
func (in *instance) activity() *ctl.InstanceActivity {
	if !in.inference {
		return nil
	}
	in.slotMu.Lock()
	defer in.slotMu.Unlock()
	a := in.slot.Activity()
	last := in.lastRequest
	if a.LastDone.After(last) {
		last = a.LastDone
	}
	return &ctl.InstanceActivity{InFlight: a.InFlight, LastRequest: last}
}

// keepActivityLocked keeps the time of the last request answered by the
// registration about to be released, so the instance's activity outlives
// its registrations (a restart registers anew). Call with slotMu held.
func (in *instance) keepActivityLocked() {
	if d := in.slot.Activity().LastDone; d.After(in.lastRequest) {
		in.lastRequest = d
	}
}
