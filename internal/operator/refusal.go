package operator

import (
	"encoding/json"

	"github.com/nodeld/nodeld/internal/plane"
)

// RefusedBy names the node that refused a request, "" when no node did.
// A place through the controller names the last candidate that refused
// its place call; one refused before any call (governance, no eligible
// node) was refused by the controller, whatever node it was pinned to.
// Any other request was refused by the node it names.
func RefusedBy(req Request, resp Response) string {
	if req.Verb != VerbPlace || len(resp.Result) == 0 {
		return req.Node
	}
	var r PlaceResult
	if json.Unmarshal(resp.Result, &r) != nil || r.Explain == "" {
		return req.Node
	}
	for i := len(r.Attempts) - 1; i >= 0; i-- {
		if r.Attempts[i].Outcome == "refused" {
			return r.Attempts[i].Node
		}
	}
	return ""
}

// HostStateText is a placement's HOST STATE as ctl placements shows it:
// the state its node last reported, or, for an instance the controller
// holds lost (its node silent), "unknown (last <state>)": what the node
// said before it went silent is not what it runs now. An on-demand
// instance's state follows its host's.
func (p PlacementDoc) HostStateText() string {
	switch {
	case p.Life == plane.LifeLost && p.HostState != "":
		return "unknown (last " + p.HostState + ")"
	case p.Life == plane.LifeLost, p.HostState == "":
		return "-"
	case p.OnDemand != "":
		// An on-demand instance: starting, ready or idle.
		return p.HostState + " (on-demand " + p.OnDemand + ")"
	}
	return p.HostState
}
