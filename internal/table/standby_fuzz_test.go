package table

import (
	"encoding/json"
	"testing"
	"time"
)

// FuzzIngestStandbys: standby advertisements come from peers like any
// other. Whatever they say, ingesting them never panics, never moves the
// generation or resolves a role, and a standby the table offers names its
// sender as the controller, a known state and a wait within
// MaxStandbyWait.
func FuzzIngestStandbys(f *testing.F) {
	seed, _ := json.Marshal([]Advertisement{
		StandbyAdvertisement("n-b", Standby{Role: "chat", State: StateCold, Model: "m", MaxWait: time.Minute}, time.Unix(1, 0)),
		StandbyAdvertisement("n-c", Standby{Role: "chat", State: StateIdle, MaxWait: time.Second}, time.Unix(1, 0)),
	})
	f.Add(seed, uint8(0))
	f.Add(seed, uint8(1))
	f.Add([]byte(`[{"name":"demand:chat","node_id":"n-b","metadata":{"role":"chat","node_id":"n-b","state":"cold","max_wait_ms":"99999999999999999999"}}]`), uint8(0))
	f.Add([]byte(`[{"name":"demand:","node_id":"n-b","metadata":null}]`), uint8(0))
	senders := []string{"n-b", "n-c", self, "n-x"}
	f.Fuzz(func(t *testing.T, frame []byte, who uint8) {
		var ads []Advertisement
		if json.Unmarshal(frame, &ads) != nil || len(ads) > 64 {
			return
		}
		sender := senders[int(who)%len(senders)]
		e := newEnv("n-b", "n-c", self)
		gen := e.t.Generation()
		roles := map[string]bool{}
		for _, a := range ads {
			e.t.IngestAdvertisement(sender, a)
			if r, ok := a.Metadata[MetaRole]; ok {
				roles[r] = true
			}
		}
		if g := e.t.Generation(); g != gen {
			t.Fatalf("standbys moved the generation %d -> %d", gen, g)
		}
		for role := range roles {
			if _, ok := e.t.Resolve(role); ok {
				t.Fatalf("%s resolves", role)
			}
			for _, sb := range e.t.Standbys(role) {
				if sb.Controller != sender || sb.Role != role || !validState(sb.State) || sb.MaxWait <= 0 || sb.MaxWait > MaxStandbyWait {
					t.Fatalf("offered %+v from %s", sb, sender)
				}
			}
		}
		_ = e.t.Snapshot()
	})
}
