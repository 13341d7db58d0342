package config

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// onDemandYAML declares one workload with the given on_demand body (and
// extra workload keys), on a node named home with one peer.
func onDemandYAML(extra, body string) string {
	return "node:\n  name: home\nmesh:\n  listen: 127.0.0.1:7400\n  peers:\n    - {name: gpu-2, addr: 127.0.0.1:7401}\n" +
		"controller:\n  enabled: true\n  workloads:\n    - name: chat\n      package: qwen\n" + extra +
		"      on_demand:\n" + body
}

// TestOnDemandDefaults: an on-demand workload that sets only enabled
// gets the documented defaults; a workload without on_demand is not on
// demand.
func TestOnDemandDefaults(t *testing.T) {
	c, err := Check([]byte(onDemandYAML("", "        enabled: true\n") + "    - {name: embed, package: bge}\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := c.Controller.Workloads[0].OnDemand
	want := OnDemand{
		Enabled:      true,
		IdleAfter:    Duration{D: 5 * time.Minute},
		MinResidency: Duration{D: 30 * time.Second},
		MaxWait:      Duration{D: 2 * time.Minute},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(Duration{})); diff != "" {
		t.Errorf("on_demand defaults (-want +got):\n%s", diff)
	}
	if c.Controller.Workloads[0].Replicas != 1 {
		t.Errorf("replicas = %d, want 1", c.Controller.Workloads[0].Replicas)
	}
	if od := c.Controller.Workloads[1].OnDemand; od.Enabled {
		t.Errorf("a workload without on_demand is on demand: %+v", od)
	}

	c, err = Check([]byte(onDemandYAML("      replicas: 2\n", "        enabled: true\n        idle_after: 1m\n        min_residency: 1m\n        max_wait: 15m\n        demand_from: [gpu-2, self, home]\n        evict_cost: 7\n")))
	if err != nil {
		t.Fatal(err)
	}
	od := c.Controller.Workloads[0].OnDemand
	if od.IdleAfter.D != time.Minute || od.MinResidency.D != time.Minute || od.MaxWait.D != 15*time.Minute || od.EvictCost != 7 ||
		!cmp.Equal(od.DemandFrom, []string{"gpu-2", "self", "home"}) {
		t.Errorf("on_demand as written = %+v", od)
	}
}

// TestOnDemandErrors: config check refuses every bad on_demand setting
// with its path and line, and the nonsense combinations with words that
// say why.
func TestOnDemandErrors(t *testing.T) {
	tests := []struct {
		name  string
		extra string
		body  string
		want  []string
	}{
		{"zero idle_after", "", "        enabled: true\n        idle_after: 0s\n        min_residency: 0s\n",
			[]string{"line 14: controller.workloads[0].on_demand.idle_after: must be a positive duration", "line 15: controller.workloads[0].on_demand.min_residency: must be a positive duration"}},
		{"null idle_after", "", "        enabled: true\n        idle_after:\n",
			[]string{"line 14: controller.workloads[0].on_demand.idle_after: must be a positive duration"}},
		{"bad duration", "", "        enabled: true\n        max_wait: soon\n",
			[]string{`line 14: controller.workloads[0].on_demand.max_wait: invalid duration "soon"`}},
		{"negative max_wait", "", "        enabled: true\n        max_wait: -1s\n",
			[]string{"line 14: controller.workloads[0].on_demand.max_wait: must be a positive duration"}},
		{"idle_after above bound", "", "        enabled: true\n        idle_after: 169h\n",
			[]string{"line 14: controller.workloads[0].on_demand.idle_after: 169h0m0s is above the limit of 168h0m0s"}},
		{"max_wait above bound", "", "        enabled: true\n        max_wait: 16m\n",
			[]string{"line 14: controller.workloads[0].on_demand.max_wait: 16m0s is above the limit of 15m0s"}},
		{"min_residency over idle_after", "", "        enabled: true\n        idle_after: 1m\n        min_residency: 2m\n",
			[]string{"line 15: controller.workloads[0].on_demand.min_residency: 2m0s is longer than on_demand.idle_after (1m0s)"}},
		{"default min_residency over short idle_after", "", "        enabled: true\n        idle_after: 10s\n",
			[]string{"line 12: controller.workloads[0].on_demand.min_residency: the default 30s is longer than on_demand.idle_after (10s): set min_residency"}},
		{"negative evict_cost", "", "        enabled: true\n        evict_cost: -1\n",
			[]string{"line 14: controller.workloads[0].on_demand.evict_cost: -1 is out of range: use 0"}},
		{"huge evict_cost", "", "        enabled: true\n        evict_cost: 1000001\n",
			[]string{"line 14: controller.workloads[0].on_demand.evict_cost: 1000001 is out of range"}},
		{"replicas 0", "      replicas: 0\n", "        enabled: true\n",
			[]string{"line 12: controller.workloads[0].replicas: 0 is out of range: an on-demand workload runs no instance while idle by itself"}},
		{"keys without enabled", "", "        idle_after: 1m\n        demand_from: [gpu-2]\n",
			[]string{"line 13: controller.workloads[0].on_demand.idle_after: is set but on_demand.enabled is not true",
				"line 14: controller.workloads[0].on_demand.demand_from: is set but on_demand.enabled is not true"}},
		{"keys with enabled false", "", "        enabled: false\n        evict_cost: 3\n",
			[]string{"line 14: controller.workloads[0].on_demand.evict_cost: is set but on_demand.enabled is not true"}},
		{"demand_from not a name", "", "        enabled: true\n        demand_from: [\"Not A Node\", gpu-2, gpu-2]\n",
			[]string{`line 14: controller.workloads[0].on_demand.demand_from[0]: "Not A Node" is neither a node name nor a node id`,
				`line 14: controller.workloads[0].on_demand.demand_from[2]: "gpu-2" is listed twice`}},
		{"not a mapping", "", "        - 1\n",
			[]string{"line 13: controller.workloads[0].on_demand: expected a mapping, got a list"}},
		{"unknown key", "", "        enabled: true\n        keep_alive: 5m\n",
			[]string{"line 14: controller.workloads[0].on_demand.keep_alive: unknown key; known keys here: enabled, idle_after, min_residency, max_wait, demand_from, evict_cost"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Check([]byte(onDemandYAML(tc.extra, tc.body)))
			if err == nil {
				t.Fatal("Check accepted it")
			}
			var got []string
			for _, e := range flatten(err) {
				got = append(got, e.Error())
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d problems, want %d:\n%s", len(got), len(tc.want), strings.Join(got, "\n"))
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("problem %d = %q\nwant it to start %q", i, got[i], w)
				}
			}
		})
	}
}

// TestOnDemandDemandFromResolves: demand_from goes through the one node
// resolver (CheckNodeRefs): node.name, self, a peer's name and a pinned
// peer's id are accepted, an id nobody has is refused.
func TestOnDemandDemandFromResolves(t *testing.T) {
	c, err := Parse([]byte(onDemandYAML("", "        enabled: true\n        demand_from: [home, self, gpu-2, n-2222222222222222, n-3333333333333333]\n")))
	if err != nil {
		t.Fatal(err)
	}
	known := KnownNodes{SelfID: "n-1111111111111111", Pinned: map[string]string{"127.0.0.1:7401": "n-2222222222222222"}}
	var got []string
	for _, e := range CheckNodeRefs(c, known) {
		got = append(got, e.Error())
	}
	if len(got) != 1 || !strings.HasPrefix(got[0], `line 14: controller.workloads[0].on_demand.demand_from[4]: "n-3333333333333333" names no known node`) {
		t.Errorf("CheckNodeRefs = %q, want only demand_from[4] refused", got)
	}
}

// TestSwapGrace: controller.swap_grace defaults to 2s, 0 is allowed (swap
// at once), negative and over a minute are refused with the key's name.
func TestSwapGrace(t *testing.T) {
	c, err := Check([]byte("controller:\n  enabled: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Controller.SwapGrace.D != 2*time.Second {
		t.Errorf("default swap_grace %s, want 2s", c.Controller.SwapGrace.D)
	}
	if _, err := Check([]byte("controller:\n  enabled: true\n  swap_grace: 0s\n")); err != nil {
		t.Errorf("swap_grace 0s refused: %v", err)
	}
	for _, bad := range []string{"-1s", "2m", "soon"} {
		_, err := Check([]byte("controller:\n  enabled: true\n  swap_grace: " + bad + "\n"))
		if err == nil || !strings.Contains(err.Error(), "controller.swap_grace") {
			t.Errorf("swap_grace %s: %v, want an error naming controller.swap_grace", bad, err)
		}
	}
}
