package table

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestApplyPolicy(t *testing.T) {
	e := newEnv()
	// State before: chat exposed to n-a, used from n-b; embed exposed.
	e.t.ExposeToMesh("chat", true)
	e.t.AllowMeshPeer("chat", "n-a", true)
	e.t.AllowRemoteNode("chat", "n-b", true)
	e.t.ExposeToMesh("embed", true)
	e.t.AllowRemoteNode("embed", "n-z", true)
	e.audit.take()

	policy := map[string]RolePolicy{
		"chat":  {Expose: true, ServeTo: []string{"n-c", "n-a", "n-c"}, UseFrom: []string{"n-d"}},
		"coder": {Expose: false, UseFrom: []string{"n-b"}},
		// embed absent: nothing exposed or allowed
	}
	gen := e.t.Generation()
	e.t.ApplyPolicy(policy)
	want := []rec{
		{KindMeshAllow, MeshAllowEvent{Role: "chat", Peer: "n-c", Allowed: true, Server: self}},
		{KindRemoteAllow, RemoteAllowEvent{Role: "chat", Node: "n-b", Allowed: false, Consumer: self}},
		{KindRemoteAllow, RemoteAllowEvent{Role: "chat", Node: "n-d", Allowed: true, Consumer: self}},
		{KindRemoteAllow, RemoteAllowEvent{Role: "coder", Node: "n-b", Allowed: true, Consumer: self}},
		{KindMeshExpose, ExposeEvent{Role: "embed", NodeID: self, Exposed: false}},
		{KindRemoteAllow, RemoteAllowEvent{Role: "embed", Node: "n-z", Allowed: false, Consumer: self}},
	}
	if diff := cmp.Diff(want, e.audit.take()); diff != "" {
		t.Fatalf("audit (-want +got):\n%s", diff)
	}
	// Several changes, applied atomically: the generation moves once per
	// bumping change (one call, several bumps are fine as long as it moved).
	if e.t.Generation() == gen {
		t.Fatal("generation did not move")
	}

	s := e.t.Snapshot()
	type pol struct {
		Role             string
		Exposed          bool
		ServeTo, UseFrom []string
	}
	var got []pol
	for _, r := range s.Roles {
		got = append(got, pol{r.Role, r.Exposed, r.ServeTo, r.UseFrom})
	}
	wantPol := []pol{
		{"chat", true, []string{"n-a", "n-c"}, []string{"n-d"}},
		{"coder", false, []string{}, []string{"n-b"}},
	}
	if diff := cmp.Diff(wantPol, got); diff != "" {
		t.Fatalf("policy after apply (-want +got):\n%s", diff)
	}

	// Applying the same policy again changes and records nothing.
	gen = e.t.Generation()
	e.t.ApplyPolicy(policy)
	if recs := e.audit.take(); len(recs) != 0 {
		t.Fatalf("unchanged policy audited %+v", recs)
	}
	if e.t.Generation() != gen {
		t.Fatal("unchanged policy bumped")
	}

	// An empty policy withdraws everything.
	e.t.ApplyPolicy(nil)
	if roles := e.t.ExposedRoles(); len(roles) != 0 || e.t.RoleExposed("chat") {
		t.Fatalf("exposed after empty policy: %v", roles)
	}
	if e.t.PeerListedAny("n-a") || e.t.PeerListedAny("n-c") {
		t.Fatal("serve_to survives an empty policy")
	}
	if len(e.audit.take()) != 5 { // expose chat off, 2 serve_to, 2 use_from
		t.Fatal("empty policy did not audit each withdrawal")
	}
}

func TestApplyPolicyWakesSubscribersOnce(t *testing.T) {
	e := newEnv()
	ch, cancel := e.t.Subscribe()
	defer cancel()
	e.t.ApplyPolicy(map[string]RolePolicy{"chat": {Expose: true, ServeTo: []string{"n-a"}}})
	select {
	case <-ch:
	default:
		t.Fatal("no wake-up")
	}
	select {
	case <-ch:
		t.Fatal("second wake-up for one ApplyPolicy")
	default:
	}
}

func TestCheckPolicy(t *testing.T) {
	tests := []struct {
		name string
		give map[string]RolePolicy
		want []string // substrings of the error, in order; none = valid
	}{
		{"empty", nil, nil},
		{"valid", map[string]RolePolicy{"chat": {Expose: true, ServeTo: []string{"n-0123456789abcdef"}}, "embed.v2": {}}, nil},
		{"leading underscore", map[string]RolePolicy{"_chat": {}}, []string{`role "_chat": bad role`}},
		{"two bad roles", map[string]RolePolicy{"-b": {}, "a/b": {}}, []string{`"-b"`, `"a/b"`}},
		{"empty node", map[string]RolePolicy{"chat": {UseFrom: []string{""}}}, []string{"empty node id"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckPolicy(tt.give)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("CheckPolicy = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatal("CheckPolicy = nil, want an error")
			}
			rest := err.Error()
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("CheckPolicy = %q, want %q (in order)", err, w)
				}
				rest = rest[i+len(w):]
			}
		})
	}
}
