package table

import (
	"encoding/json"
	"testing"
)

// FuzzIngestAdvertisements: advertisements come from peers (the mesh
// decodes a frame's JSON array, then hands each to the table with the
// sender's verified id). Whatever they say, ingesting them, resolving and
// taking a snapshot never panic; a refused one moves no generation; and a
// node the table resolves a role to is one that sent an advertisement for
// it as itself.
func FuzzIngestAdvertisements(f *testing.F) {
	seed, _ := json.Marshal([]Advertisement{
		ad("chat", "n-b", MetaModel, "m", MetaLoad, "0.5", MetaHealth, "ok"),
		ad("chat", "n-c", MetaLoad, "NaN"),
		ad("embed", "n-b", MetaLoad, "-1"),
		{Name: HostAdvertName, NodeID: "n-b", Metadata: map[string]string{"instances": "1", "in_flight": "0", "enabled": "true"}},
	})
	f.Add(seed, uint8(0))
	f.Add(seed, uint8(1))
	f.Add([]byte(`[{"name":"infer.chat","node_id":"n-self","metadata":{"load":"1e999"}}]`), uint8(2))
	f.Add([]byte(`[{"name":"infer.chat","node_id":"n-b","methods":null,"metadata":null}]`), uint8(0))
	senders := []string{"n-b", "n-c", self, "n-x"}
	f.Fuzz(func(t *testing.T, frame []byte, who uint8) {
		var ads []Advertisement
		if json.Unmarshal(frame, &ads) != nil || len(ads) > 64 {
			return
		}
		sender := senders[int(who)%len(senders)]
		e := newEnv("n-b", "n-c", self)
		e.t.AllowRemoteNode("chat", "n-b", true)
		e.t.AllowRemoteNode("chat", "n-c", true)
		e.t.AllowRemoteNode("embed", "n-b", true)
		took := false
		for _, a := range ads {
			gen := e.t.Generation()
			if e.t.IngestAdvertisement(sender, a) {
				took = true
			} else if g := e.t.Generation(); g != gen {
				t.Fatalf("refused %+v moved the generation %d -> %d", a, gen, g)
			}
		}
		for _, role := range []string{"chat", "embed"} {
			if tg, ok := e.t.Resolve(role); ok && (!took || tg.Kind != TargetRemote || tg.NodeID != sender) {
				t.Fatalf("%s resolves to %+v after ads from %s (taken: %v)", role, tg, sender, took)
			}
		}
		_ = e.t.Snapshot()
		_ = e.t.HostAdverts()
	})
}
