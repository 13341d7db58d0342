package table

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestSnapshot(t *testing.T) {
	e := newEnv("n-b", "n-c")
	// An adopted server registered first stands by for the placed one.
	if _, err := e.t.RegisterLocal(OriginAdopted, "chat", "http://127.0.0.1:11434", "qwen2", "openai", "ollama"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.t.RegisterLocal(OriginPlaced, "chat", "http://127.0.0.1:8080", "qwen", "openai", "llama.cpp"); err != nil {
		t.Fatal(err)
	}
	e.t.ExposeToMesh("chat", true)
	e.t.AllowMeshPeer("chat", "n-b", true)
	e.t.SetProxyPort("chat", 8090)
	e.t.SetProxyPort("embed", 8091)
	e.t.AllowRemoteNode("embed", "n-b", true)
	e.t.AllowRemoteNode("embed", "n-c", true)
	e.t.AllowRemoteNode("embed", "n-d", true)
	e.t.IngestAdvertisement("n-c", ad("embed", "n-c", MetaLoad, "0.5", MetaModel, "e5", MetaHealth, HealthUp))
	e.clock.advance(DefaultAdvertTTL + time.Second)
	e.t.IngestAdvertisement("n-b", ad("embed", "n-b", MetaLoad, "0"))
	e.clock.advance(2 * time.Second)
	e.t.IngestAdvertisement("n-c", hostAd("n-c", 1))
	e.adm.set("n-c", false)

	want := Snapshot{
		Generation: e.t.Generation(),
		Roles: []RoleSnapshot{
			{
				Role:      "chat",
				Local:     &LocalSnapshot{Origin: OriginPlaced, Base: "http://127.0.0.1:8080", Model: "qwen", API: "openai", Runtime: "llama.cpp"},
				Standby:   []LocalSnapshot{{Origin: OriginAdopted, Base: "http://127.0.0.1:11434", Model: "qwen2", API: "openai", Runtime: "ollama"}},
				Exposed:   true,
				ServeTo:   []string{"n-b"},
				UseFrom:   []string{},
				Remote:    []RemoteSnapshot{},
				Resolved:  &Target{Kind: TargetLocal, Base: "http://127.0.0.1:8080", Model: "qwen", Runtime: "llama.cpp"},
				ProxyPort: 8090,
			},
			{
				Role:    "embed",
				ServeTo: []string{},
				UseFrom: []string{"n-b", "n-c", "n-d"},
				Remote: []RemoteSnapshot{
					{Node: "n-b", Load: "0", AgeSeconds: 2, Fresh: true, Allowed: true, Admitted: true},
					{Node: "n-c", Model: "e5", Load: "0.5", Health: "up", AgeSeconds: 63, Fresh: false, Allowed: true, Admitted: false},
				},
				Resolved:  &Target{Kind: TargetRemote, NodeID: "n-b"},
				ProxyPort: 8091,
			},
		},
		Hosts: []HostSnapshot{{Node: "n-c", Version: "1", Metadata: hostAd("n-c", 1).Metadata, AgeSeconds: 0, Fresh: true, Admitted: false}},
	}
	got := e.t.Snapshot()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Snapshot (-want +got):\n%s", diff)
	}
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"kind":"local"`, `"kind":"remote"`, `"origin":"placed"`, `"standby":[{"origin":"adopted"`, `"serve_to":[]`, `"age_seconds":63`, `"hosts":[{"node":"n-c"`} {
		if !strings.Contains(string(b), s) {
			t.Errorf("status JSON lacks %s: %s", s, b)
		}
	}
}

func TestSnapshotEmpty(t *testing.T) {
	got := New(self, Options{}).Snapshot()
	if diff := cmp.Diff(Snapshot{Roles: []RoleSnapshot{}, Hosts: []HostSnapshot{}}, got); diff != "" {
		t.Fatalf("Snapshot (-want +got):\n%s", diff)
	}
}
