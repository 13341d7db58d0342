package table

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestAdvertisement(t *testing.T) {
	now := time.Unix(1700000000, 0)
	loads := map[string][2]int{"chat": {1, 4}, "coder": {1, 3}}
	tb := New(self, Options{Load: func(role string) (int, int) { l := loads[role]; return l[0], l[1] }})
	if _, err := tb.RegisterLocal(OriginPlaced, "chat", "http://127.0.0.1:8080", "qwen", "openai", "llama.cpp"); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.RegisterLocal(OriginPlaced, "coder", "http://127.0.0.1:8081", "", "ollama", "ollama"); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.RegisterLocal(OriginPlaced, "embed", "http://127.0.0.1:8082", "e5", "openai", "x"); err != nil {
		t.Fatal(err)
	}
	if _, ok := tb.Advertisement("chat", now); ok {
		t.Fatal("advertised an unexposed role")
	}
	tb.ExposeToMesh("coder", true)
	tb.ExposeToMesh("chat", true)
	tb.ExposeToMesh("ghost", true) // exposed but not local: not advertised
	if _, ok := tb.Advertisement("ghost", now); ok {
		t.Fatal("advertised a role with no local instance")
	}
	methods := []string{"chat.completions", "completions", "embeddings", "models"}
	want := []Advertisement{
		{
			Name: "infer.chat", NodeID: self, Methods: methods, Version: "1", LastUpdated: now.Unix(),
			Metadata: map[string]string{
				"role": "chat", "node_id": self, "api": "openai", "runtime": "llama.cpp",
				"model": "qwen", "load": "0.25", "health": "up",
			},
		},
		{
			Name: "infer.coder", NodeID: self, Methods: methods, Version: "1", LastUpdated: now.Unix(),
			Metadata: map[string]string{
				"role": "coder", "node_id": self, "api": "ollama", "runtime": "ollama",
				"load": "0.333", "health": "up",
			},
		},
	}
	if diff := cmp.Diff(want, tb.Advertisements(now)); diff != "" {
		t.Fatalf("Advertisements (-want +got):\n%s", diff)
	}
	got, ok := tb.Advertisement("chat", now)
	if !ok {
		t.Fatal("no chat advertisement")
	}
	if diff := cmp.Diff(want[0], got); diff != "" {
		t.Fatalf("Advertisement (-want +got):\n%s", diff)
	}
	if _, ok := got.Metadata["port"]; ok {
		t.Fatal("the instance port is advertised")
	}
}

func TestAdvertisedLoad(t *testing.T) {
	tests := []struct {
		inflight, capacity int
		want               string
	}{
		{0, 4, "0"},
		{2, 4, "0.5"},
		{4, 4, "1"},
		{6, 4, "1.5"},
		{1, 0, "0"},
		{-1, 4, "0"},
	}
	for _, tt := range tests {
		tb := New(self, Options{Load: func(string) (int, int) { return tt.inflight, tt.capacity }})
		if got := tb.loadString("chat"); got != tt.want {
			t.Errorf("load %d/%d = %q, want %q", tt.inflight, tt.capacity, got, tt.want)
		}
	}
	if got := New(self, Options{}).loadString("chat"); got != "0" {
		t.Errorf("load without Options.Load = %q, want 0", got)
	}
}

func TestAdvertisementRoundTripsThroughAPeer(t *testing.T) {
	// What one table advertises another table (that allowlists it) takes
	// and resolves, with the model it carries.
	a := New("n-a", Options{})
	if _, err := a.RegisterLocal(OriginPlaced, "chat", "http://127.0.0.1:8080", "qwen", "openai", "llama.cpp"); err != nil {
		t.Fatal(err)
	}
	a.ExposeToMesh("chat", true)
	b := New("n-b", Options{Admission: newAdmission("n-a")})
	b.AllowRemoteNode("chat", "n-a", true)
	for _, ad := range a.Advertisements(time.Now()) {
		if !b.IngestAdvertisement("n-a", ad) {
			t.Fatalf("b refused %+v", ad)
		}
	}
	got, _ := b.Resolve("chat")
	if diff := cmp.Diff(Target{Kind: TargetRemote, NodeID: "n-a", Model: "qwen", Runtime: "llama.cpp"}, got); diff != "" {
		t.Fatalf("Resolve (-want +got):\n%s", diff)
	}
}
