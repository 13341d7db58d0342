package table

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/grammar"
)

func TestRegisterLocalRefuses(t *testing.T) {
	tests := []struct {
		name    string
		role    string
		base    string
		wantErr error
	}{
		{"private ip", "chat", "http://10.0.0.1:80", ErrNotLoopback},
		{"name that starts with localhost", "chat", "http://localhost.evil.example:80", ErrNotLoopback},
		{"https", "chat", "https://127.0.0.1:8080", ErrNotLoopback},
		{"userinfo", "chat", "http://user@127.0.0.1:8080", ErrNotLoopback},
		{"path", "chat", "http://127.0.0.1:8080/v1", ErrNotLoopback},
		{"query", "chat", "http://127.0.0.1:8080?a=b", ErrNotLoopback},
		{"no port", "chat", "http://127.0.0.1", ErrNotLoopback},
		{"port zero", "chat", "http://127.0.0.1:0", ErrNotLoopback},
		{"bad role", "ch at", "http://127.0.0.1:8080", ErrBadRole},
		{"role with slash", "chat/x", "http://127.0.0.1:8080", ErrBadRole},
		{"empty role", "", "http://127.0.0.1:8080", ErrBadRole},
		{"over-long role", strings.Repeat("r", grammar.MaxNameLen+1), "http://127.0.0.1:8080", ErrBadRole},
		{"upper-case role", "Chat", "http://127.0.0.1:8080", ErrBadRole},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv()
			_, err := e.t.RegisterLocal(OriginPlaced, tt.role, tt.base, "m", "openai", "llama.cpp")
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("RegisterLocal(%q, %q) = %v, want %v", tt.role, tt.base, err, tt.wantErr)
			}
			if _, ok := e.t.Resolve(tt.role); ok {
				t.Fatal("refused registration resolves")
			}
			if g := e.t.Generation(); g != 0 {
				t.Fatalf("generation = %d after refusal, want 0", g)
			}
		})
	}
}

func TestRegisterLocalAccepts(t *testing.T) {
	tests := []struct {
		base, wantBase string
	}{
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"http://127.0.0.1:8080/", "http://127.0.0.1:8080"},
		{"http://127.9.8.7:1", "http://127.9.8.7:1"},
		{"http://[::1]:8080", "http://[::1]:8080"},
		// The proxy forwards to IP literals only: localhost and
		// IPv4-mapped loopback are stored as the address they stand for.
		{"http://localhost:11434", "http://127.0.0.1:11434"},
		{"http://[::ffff:127.0.0.1]:8080", "http://127.0.0.1:8080"},
	}
	for _, tt := range tests {
		t.Run(tt.base, func(t *testing.T) {
			e := newEnv()
			if _, err := e.t.RegisterLocal(OriginPlaced, "chat", tt.base, "qwen", "openai", "llama.cpp"); err != nil {
				t.Fatal(err)
			}
			got, ok := e.t.Resolve("chat")
			want := Target{Kind: TargetLocal, Base: tt.wantBase, Model: "qwen", Runtime: "llama.cpp"}
			if !ok {
				t.Fatal("registered role does not resolve")
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("Resolve (-want +got):\n%s", diff)
			}
			if b, _ := e.t.LocalBaseForRole("chat"); b != tt.wantBase+"/v1" {
				t.Fatalf("LocalBaseForRole = %q", b)
			}
		})
	}
}

func TestRegisterLocalErrorIsBounded(t *testing.T) {
	_, err := newEnv().t.RegisterLocal(OriginAdopted, "chat", "http://"+strings.Repeat("a", 10000), "m", "openai", "llama.cpp")
	if !errors.Is(err, ErrNotLoopback) || !errors.Is(err, grammar.ErrNotLoopback) || len(err.Error()) > 3*grammar.MaxLoopbackURLLen {
		t.Fatalf("RegisterLocal = %v, want a bounded ErrNotLoopback", err)
	}
}

func TestGenerationBumpsExactlyOnChange(t *testing.T) {
	e := newEnv("n-b")
	tb := e.t
	var slot *LocalSlot
	steps := []struct {
		name string
		do   func()
		bump bool
	}{
		{"register new", func() { slot, _ = tb.RegisterLocal(OriginPlaced, "chat", "http://127.0.0.1:1", "a", "openai", "x") }, true},
		{"same base again", func() { _ = slot.Update("http://127.0.0.1:1/", "a", "openai", "x") }, false},
		{"only model changes", func() { _ = slot.Update("http://127.0.0.1:1", "b", "ollama", "y") }, false},
		{"base changes", func() { _ = slot.Update("http://127.0.0.1:2", "b", "ollama", "y") }, true},
		{"refused update", func() { _ = slot.Update("http://10.0.0.1:2", "b", "o", "y") }, false},
		{"refused register", func() { _, _ = tb.RegisterLocal(OriginPlaced, "chat", "http://10.0.0.1:2", "b", "o", "y") }, false},
		{"release", func() { slot.Release() }, true},
		{"release again", func() { slot.Release() }, false},
		{"expose", func() { tb.ExposeToMesh("chat", true) }, true},
		{"expose again", func() { tb.ExposeToMesh("chat", true) }, false},
		{"unexpose", func() { tb.ExposeToMesh("chat", false) }, true},
		{"allow remote", func() { tb.AllowRemoteNode("chat", "n-b", true) }, true},
		{"allow remote again", func() { tb.AllowRemoteNode("chat", "n-b", true) }, false},
		{"serve to peer (no bump)", func() { tb.AllowMeshPeer("chat", "n-b", true) }, false},
		{"proxy port (no bump)", func() { tb.SetProxyPort("chat", 8090) }, false},
		{"ingest new", func() { tb.IngestAdvertisement("n-b", ad("chat", "n-b")) }, true},
		{"ingest repeat", func() { tb.IngestAdvertisement("n-b", ad("chat", "n-b")) }, false},
		{"ingest changed metadata", func() { tb.IngestAdvertisement("n-b", ad("chat", "n-b", MetaModel, "m2")) }, true},
		{"ingest refused", func() { tb.IngestAdvertisement("n-c", ad("chat", "n-c")) }, false},
		{"remove node", func() { tb.RemoveNode("n-b") }, true},
		{"remove node again", func() { tb.RemoveNode("n-b") }, false},
		{"disallow remote", func() { tb.AllowRemoteNode("chat", "n-b", false) }, true},
		{"disallow remote again", func() { tb.AllowRemoteNode("chat", "n-b", false) }, false},
	}
	for _, s := range steps {
		before := tb.Generation()
		s.do()
		got := tb.Generation() - before
		want := uint64(0)
		if s.bump {
			want = 1
		}
		if got != want {
			t.Errorf("%s: generation moved by %d, want %d", s.name, got, want)
		}
	}
}

func TestAllowlistAndExposureAudit(t *testing.T) {
	e := newEnv()
	e.t.AllowRemoteNode("chat", "n-b", true)
	e.t.AllowRemoteNode("chat", "n-b", true) // unchanged: no record
	e.t.AllowMeshPeer("chat", "n-c", true)
	e.t.AllowMeshPeer("chat", "n-c", true)
	e.t.ExposeToMesh("chat", true)
	e.t.ExposeToMesh("chat", true)
	e.t.AllowRemoteNode("chat", "n-b", false)
	e.t.AllowMeshPeer("chat", "n-c", false)
	e.t.ExposeToMesh("chat", false)
	e.t.AllowMeshPeer("chat", "n-c", false)
	want := []rec{
		{KindRemoteAllow, RemoteAllowEvent{Role: "chat", Node: "n-b", Allowed: true, Consumer: self}},
		{KindMeshAllow, MeshAllowEvent{Role: "chat", Peer: "n-c", Allowed: true, Server: self}},
		{KindMeshExpose, ExposeEvent{Role: "chat", NodeID: self, Exposed: true}},
		{KindRemoteAllow, RemoteAllowEvent{Role: "chat", Node: "n-b", Allowed: false, Consumer: self}},
		{KindMeshAllow, MeshAllowEvent{Role: "chat", Peer: "n-c", Allowed: false, Server: self}},
		{KindMeshExpose, ExposeEvent{Role: "chat", NodeID: self, Exposed: false}},
	}
	if diff := cmp.Diff(want, e.audit.take()); diff != "" {
		t.Fatalf("audit (-want +got):\n%s", diff)
	}
	for _, s := range e.audit.sources {
		if s != AuditSource {
			t.Fatalf("audit source %q, want %q", s, AuditSource)
		}
	}
}

func TestAuditFailureIsReportedNotUndone(t *testing.T) {
	audit := &fakeAuditor{err: errors.New("disk full")}
	var kinds []string
	tb := New(self, Options{Audit: audit, AuditError: func(kind string, err error) { kinds = append(kinds, kind) }})
	tb.ExposeToMesh("chat", true)
	if diff := cmp.Diff([]string{"chat"}, tb.ExposedRoles()); diff != "" {
		t.Fatalf("ExposedRoles (-want +got):\n%s", diff)
	}
	if !tb.RoleExposed("chat") || tb.RoleExposed("embed") {
		t.Fatalf("RoleExposed: chat %v, embed %v; want true, false", tb.RoleExposed("chat"), tb.RoleExposed("embed"))
	}
	if diff := cmp.Diff([]string{KindMeshExpose}, kinds); diff != "" {
		t.Fatalf("AuditError kinds (-want +got):\n%s", diff)
	}
}

func TestNilAuditAndAdmission(t *testing.T) {
	tb := New(self, Options{})
	tb.AllowRemoteNode("chat", "n-b", true)
	tb.ExposeToMesh("chat", true)
	tb.AllowMeshPeer("chat", "n-b", true)
	if tb.IngestAdvertisement("n-b", ad("chat", "n-b")) {
		t.Fatal("advertisement taken without a mesh")
	}
	if _, ok := tb.Resolve("chat"); ok {
		t.Fatal("resolved without local instance or mesh")
	}
	if _, err := tb.RegisterLocal(OriginPlaced, "chat", "http://127.0.0.1:5", "", "openai", "x"); err != nil {
		t.Fatal(err)
	}
	if tg, ok := tb.Resolve("chat"); !ok || tg.Kind != TargetLocal {
		t.Fatalf("Resolve = %+v, %v; want local", tg, ok)
	}
	if tb.NodeID() != self {
		t.Fatalf("NodeID = %q", tb.NodeID())
	}
}

func TestLocalForPeer(t *testing.T) {
	type setup struct{ local, exposed, listed, remoteOnly bool }
	tests := []struct {
		name string
		give setup
		want bool
	}{
		{"all three", setup{local: true, exposed: true, listed: true}, true},
		{"not exposed", setup{local: true, listed: true}, false},
		{"not on serve_to", setup{local: true, exposed: true}, false},
		{"no local instance", setup{exposed: true, listed: true}, false},
		{"only a remote instance: never bounced", setup{exposed: true, listed: true, remoteOnly: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv("n-c")
			if tt.give.local {
				if _, err := e.t.RegisterLocal(OriginPlaced, "chat", "http://127.0.0.1:8080/", "qwen", "openai", "llama.cpp"); err != nil {
					t.Fatal(err)
				}
			}
			e.t.ExposeToMesh("chat", tt.give.exposed)
			e.t.AllowMeshPeer("chat", "n-a", tt.give.listed)
			if tt.give.remoteOnly {
				e.t.AllowRemoteNode("chat", "n-c", true)
				if !e.t.IngestAdvertisement("n-c", ad("chat", "n-c")) {
					t.Fatal("remote advertisement refused")
				}
				if tg, ok := e.t.Resolve("chat"); !ok || tg.Kind != TargetRemote {
					t.Fatalf("setup: Resolve = %+v, %v; want remote", tg, ok)
				}
			}
			got, ok := e.t.LocalForPeer("chat", "n-a")
			if ok != tt.want {
				t.Fatalf("LocalForPeer ok = %v, want %v (%+v)", ok, tt.want, got)
			}
			if ok {
				want := MeshLocal{Base: "http://127.0.0.1:8080", Model: "qwen", Runtime: "llama.cpp"}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("LocalForPeer (-want +got):\n%s", diff)
				}
			}
			if _, ok := e.t.LocalForPeer("chat", "n-other"); ok {
				t.Fatal("an unlisted peer reaches the instance")
			}
			if _, ok := e.t.LocalForPeer("coder", "n-a"); ok {
				t.Fatal("another role reaches the instance")
			}
		})
	}
}

func TestServeSideQueries(t *testing.T) {
	e := newEnv()
	e.t.ExposeToMesh("embed", true)
	e.t.ExposeToMesh("chat", true)
	e.t.AllowMeshPeer("chat", "n-a", true)
	if diff := cmp.Diff([]string{"chat", "embed"}, e.t.ExposedRoles()); diff != "" {
		t.Fatalf("ExposedRoles (-want +got):\n%s", diff)
	}
	checks := []struct {
		name      string
		got, want bool
	}{
		{"MeshPeerAllowed listed", e.t.MeshPeerAllowed("chat", "n-a"), true},
		{"MeshPeerAllowed other role", e.t.MeshPeerAllowed("embed", "n-a"), false},
		{"MeshPeerAllowed other peer", e.t.MeshPeerAllowed("chat", "n-b"), false},
		{"PeerListedAny listed", e.t.PeerListedAny("n-a"), true},
		{"PeerListedAny other", e.t.PeerListedAny("n-b"), false},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	e.t.AllowMeshPeer("chat", "n-a", false)
	if e.t.PeerListedAny("n-a") {
		t.Fatal("PeerListedAny after removal")
	}
}

func TestProxyPortAndBaseURL(t *testing.T) {
	e := newEnv("n-b")
	if _, ok := e.t.ProxyPort("chat"); ok {
		t.Fatal("ProxyPort set on an empty table")
	}
	if _, ok := e.t.BaseURLForRole("chat"); ok {
		t.Fatal("BaseURLForRole for an unserved role")
	}
	// Remote without a proxy port: nothing.
	e.t.AllowRemoteNode("chat", "n-b", true)
	e.t.IngestAdvertisement("n-b", ad("chat", "n-b"))
	if u, ok := e.t.BaseURLForRole("chat"); ok {
		t.Fatalf("BaseURLForRole = %q for a remote role without a proxy port", u)
	}
	e.t.SetProxyPort("chat", 8090)
	if p, ok := e.t.ProxyPort("chat"); !ok || p != 8090 {
		t.Fatalf("ProxyPort = %d, %v", p, ok)
	}
	if u, _ := e.t.BaseURLForRole("chat"); u != "http://127.0.0.1:8090/v1" {
		t.Fatalf("BaseURLForRole remote = %q", u)
	}
	if u, ok := e.t.LocalBaseForRole("chat"); ok {
		t.Fatalf("LocalBaseForRole = %q for a remote role", u)
	}
	if _, err := e.t.RegisterLocal(OriginPlaced, "chat", "http://[::1]:7000", "", "openai", "x"); err != nil {
		t.Fatal(err)
	}
	if u, _ := e.t.BaseURLForRole("chat"); u != "http://[::1]:7000/v1" {
		t.Fatalf("BaseURLForRole local = %q", u)
	}
}
