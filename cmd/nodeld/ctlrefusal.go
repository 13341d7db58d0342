package main

import (
	"encoding/json"

	"github.com/nodeld/nodeld/internal/dispatch"
)

// refusedBy names the node that refused a request, "" when no node did.
// A place through the controller names the last candidate that refused
// its place call; one refused before any call (governance, no eligible
// node) was refused by the controller, whatever node it was pinned to.
// Any other request was refused by the node it names.
func refusedBy(req dispatch.OperatorRequest, resp dispatch.OperatorResponse) string {
	if req.Verb != dispatch.VerbPlace || len(resp.Result) == 0 {
		return req.Node
	}
	var r controllerPlaceResult
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
