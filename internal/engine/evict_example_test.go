package engine_test

import (
	"fmt"
	"time"

	"github.com/nodeld/nodeld/internal/engine"
)

// One host with 16 GiB for models holds two on-demand models; a third,
// of 8 GiB, is demanded. The controller asks Evict, as it does when
// Place found no room: the idle one that loads fastest goes; the one
// serving a request stays, whatever it costs to keep it.
func ExampleEvict() {
	const gib = 1 << 30
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	onDemand := func(id, workload string, loaded, idle time.Duration) engine.Resident {
		return engine.Resident{ID: id, Kind: "inference", Workload: workload, Node: "home",
			Declared: engine.Resources{HostBytes: 8 * gib}, OnDemand: true,
			ReadySince: now.Add(-time.Hour), LastRequest: now.Add(-idle),
			MinResidency: 30 * time.Second, LoadTime: loaded}
	}
	coder := onDemand("coder-home", "coder", 40*time.Second, 20*time.Minute)
	chat := onDemand("chat-home", "chat", 12*time.Second, 10*time.Minute)
	busy := chat
	busy.InFlight = 1
	for _, residents := range [][]engine.Resident{{coder, chat}, {coder, busy}} {
		ev, err := engine.Evict(engine.EvictRequest{
			Kind: "inference", Name: "vision", Now: now, DemandSince: now.Add(-time.Second),
			Targets: []engine.EvictTarget{{Node: "home", Variant: "cpu", Demand: engine.Resources{HostBytes: 8 * gib}}},
			Nodes: []engine.EvictNode{{ID: "home", Capacity: engine.Resources{HostBytes: 16 * gib},
				Used: engine.Resources{HostBytes: 16 * gib}}},
			Residents: residents,
			Policy:    engine.DefaultEvictPolicy(),
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Print(ev.Explain())
	}
	// Output:
	// evict for inference/vision: waited 1s
	// decision: EVICT 1 on home via cpu, cost 15s
	// node 1. home via cpu: evict chat-home, cost 15s (exact); to free host 8589934592 accel 0 bytes, evictable instances free host 17179869184 accel 0
	//   evict chat-home (inference/chat) on home: cost 15s (load 12s, idle 10m0s)
	//   spare coder-home (inference/coder) on home: cost 42.5s (load 40s, idle 20m0s), not needed
	// evict for inference/vision: waited 1s
	// decision: EVICT 1 on home via cpu, cost 42.5s
	// node 1. home via cpu: evict coder-home, cost 42.5s (exact); to free host 8589934592 accel 0 bytes, evictable instances free host 8589934592 accel 0
	//   keep chat-home (inference/chat) on home: in_flight: 1 in flight
	//   evict coder-home (inference/coder) on home: cost 42.5s (load 40s, idle 20m0s)
}
