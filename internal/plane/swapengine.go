package plane

import (
	"slices"

	"github.com/nodeld/nodeld/internal/engine"
)

// engineEvictions is the swap's choice: engine.Evict over the nodes where
// the workload would go but for memory (engine.EvictTargets).
//
// The engine knows a node's free memory from its facts, not its size, so
// each node's capacity for the choice is what is free plus the declared
// resources of the instances on it, and what is used is those instances
// plus the pending reservations: the workload fits once the evicted
// instances' declared memory is free again. A node's accelerator memory
// is its largest device's, as one instance runs on one device.
func engineEvictions(in swapInput) (swapChoice, bool) {
	targets, err := engine.EvictTargets(in.Request, in.Nodes, engine.Cluster{}, in.Weights)
	if err != nil || len(targets) == 0 {
		return swapChoice{}, false
	}
	byNode := map[string][]int{}
	for i, r := range in.Residents {
		byNode[r.Node] = append(byNode[r.Node], i)
	}
	req := engine.EvictRequest{
		Kind: in.Request.Kind, Name: in.Request.Name,
		Now: in.Now, DemandSince: in.DemandSince,
		Targets: targets, Policy: engine.DefaultEvictPolicy(),
	}
	req.Policy.Grace = in.Grace
	for _, t := range targets {
		n := in.Nodes[slices.IndexFunc(in.Nodes, func(n engine.Node) bool { return n.ID == t.Node })]
		var accel uint64
		for _, v := range n.Memory.VRAMFree {
			accel = max(accel, v)
		}
		node := engine.EvictNode{ID: n.ID, Unified: n.Memory.Unified,
			Capacity: engine.Resources{HostBytes: n.Memory.HostFree, AccelBytes: accel}}
		for _, p := range n.Pending {
			node.Used.HostBytes += p.HostBytes
			node.Used.AccelBytes += p.AccelBytes
		}
		for _, i := range byNode[n.ID] {
			r := in.Residents[i]
			node.Capacity.HostBytes += r.Declared.HostBytes
			node.Capacity.AccelBytes += r.Declared.AccelBytes
			node.Used.HostBytes += r.Declared.HostBytes
			node.Used.AccelBytes += r.Declared.AccelBytes
			req.Residents = append(req.Residents, engine.Resident{
				ID: r.DecisionID, Kind: r.Kind, Workload: r.Workload, Node: r.Node, Declared: r.Declared,
				OnDemand: r.OnDemand, ReadySince: r.ReadySince, LastRequest: r.LastRequest, InFlight: r.InFlight,
				MinResidency: r.MinResidency, EvictCost: r.EvictCost, LoadTime: r.LoadTime,
			})
		}
		req.Nodes = append(req.Nodes, node)
	}
	ev, err := engine.Evict(req)
	if err != nil {
		return swapChoice{}, false
	}
	if ev.Outcome != engine.EvictChosen {
		// Busy: an instance that would make room is protected until
		// RetryAt (zero when nothing ever would).
		return swapChoice{RetryAt: ev.RetryAt}, false
	}
	// Resident ids are the placements' decision ids.
	return swapChoice{Node: ev.Node, Evict: ev.Evict, Explain: ev.Lines()}, len(ev.Evict) > 0
}
