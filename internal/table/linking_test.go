package table

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// A node waiting for its link after a restart ranks after every live
// candidate, however good its advertisement, and is chosen only when
// nothing live serves the role.
func TestKeepForRestartRanksLast(t *testing.T) {
	e := newEnv("n-a", "n-b", "n-c")
	for _, n := range []string{"n-a", "n-b", "n-c"} {
		e.t.AllowRemoteNode("chat", n, true)
	}
	e.t.IngestAdvertisement("n-a", ad("chat", "n-a", MetaLoad, "0"))
	e.t.IngestAdvertisement("n-b", ad("chat", "n-b", MetaLoad, "0.9", MetaHealth, "down"))
	e.t.IngestAdvertisement("n-c", ad("chat", "n-c", MetaLoad, "0.5"))

	gen := e.t.Generation()
	e.t.KeepForRestart("n-a", 5*time.Second)
	if e.t.Generation() == gen {
		t.Error("KeepForRestart of a node with routes did not bump the generation")
	}
	// n-a is the best by load but waits for its link: even the unhealthy
	// n-b with a live link ranks before it.
	got, _ := e.t.Resolve("chat")
	if got.NodeID != "n-c" || got.WaitingForLink {
		t.Fatalf("Resolve = %+v, want n-c (live)", got)
	}
	got, _ = e.t.ResolveExcept("chat", "n-c")
	if got.NodeID != "n-b" || got.WaitingForLink {
		t.Fatalf("ResolveExcept(n-c) = %+v, want n-b (live, unhealthy)", got)
	}
	e.t.RemoveNode("n-b")
	e.t.RemoveNode("n-c")
	got, ok := e.t.Resolve("chat")
	if want := (Target{Kind: TargetRemote, NodeID: "n-a", WaitingForLink: true}); !ok || got != want {
		t.Fatalf("Resolve with only the waiting node = %+v %v, want %+v", got, ok, want)
	}
	// A local instance beats it too.
	slot, err := e.t.RegisterLocal(OriginPlaced, "chat", "http://127.0.0.1:8080", "m", "openai", "x")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := e.t.Resolve("chat"); got.Kind != TargetLocal {
		t.Fatalf("Resolve with a local instance = %+v", got)
	}
	slot.Release()

	// The new link is up: the routes are live again.
	gen = e.t.Generation()
	e.t.Linked("n-a")
	if e.t.Generation() == gen {
		t.Error("Linked did not bump the generation")
	}
	if got, _ := e.t.Resolve("chat"); got.NodeID != "n-a" || got.WaitingForLink {
		t.Fatalf("Resolve after Linked = %+v, want n-a live", got)
	}
	// A late expiry after Linked removes nothing.
	if e.t.RemoveLinking("n-a") {
		t.Fatal("RemoveLinking after Linked removed the new link's routes")
	}
	if _, ok := e.t.Resolve("chat"); !ok {
		t.Fatal("routes gone after a late RemoveLinking")
	}
}

// The wait ends by itself: past it the routes no longer resolve (even if
// nobody removed them), and RemoveLinking then drops them.
func TestKeepForRestartExpires(t *testing.T) {
	e := newEnv("n-a")
	e.t.AllowRemoteNode("chat", "n-a", true)
	e.t.IngestAdvertisement("n-a", ad("chat", "n-a"))
	e.t.KeepForRestart("n-a", 5*time.Second)

	e.clock.advance(5 * time.Second)
	if got, ok := e.t.Resolve("chat"); !ok || !got.WaitingForLink {
		t.Fatalf("Resolve at the end of the wait = %+v %v, want n-a waiting", got, ok)
	}
	remote := e.t.Snapshot().Roles[0].Remote
	if diff := cmp.Diff([]RemoteSnapshot{{Node: "n-a", Fresh: true, AgeSeconds: 5, Allowed: true, Admitted: true,
		WaitingForLink: true}}, remote); diff != "" {
		t.Errorf("Snapshot while waiting (-want +got):\n%s", diff)
	}

	e.clock.advance(time.Millisecond)
	if got, ok := e.t.Resolve("chat"); ok {
		t.Fatalf("Resolve past the wait = %+v, want nothing", got)
	}
	snap := e.t.Snapshot()
	if snap.Roles[0].Resolved != nil || !snap.Roles[0].Remote[0].LinkWaitOver {
		t.Errorf("Snapshot past the wait = %+v, want the route shown as over and nothing resolved", snap.Roles[0])
	}
	// An advertisement round read late from the old link stays under the
	// wait: it does not revive the route.
	e.t.IngestAdvertisement("n-a", ad("chat", "n-a", MetaLoad, "0.1"))
	if got, ok := e.t.Resolve("chat"); ok {
		t.Fatalf("Resolve after a late round = %+v, want nothing", got)
	}

	gen := e.t.Generation()
	if !e.t.RemoveLinking("n-a") {
		t.Fatal("RemoveLinking removed nothing")
	}
	if e.t.Generation() == gen {
		t.Error("RemoveLinking did not bump the generation")
	}
	if roles := e.t.Snapshot().Roles; len(roles[0].Remote) != 0 {
		t.Fatalf("routes left after RemoveLinking: %+v", roles[0].Remote)
	}
	// The node is no longer waiting: a new advertisement resolves live.
	e.t.IngestAdvertisement("n-a", ad("chat", "n-a"))
	if got, ok := e.t.Resolve("chat"); !ok || got.WaitingForLink {
		t.Fatalf("Resolve after a new advertisement = %+v %v, want live", got, ok)
	}
}

// RemoveNode ends a wait at once, and a non-positive wait is RemoveNode.
func TestKeepForRestartRemoveNode(t *testing.T) {
	e := newEnv("n-a")
	e.t.AllowRemoteNode("chat", "n-a", true)
	e.t.IngestAdvertisement("n-a", ad("chat", "n-a"))
	e.t.KeepForRestart("n-a", time.Minute)
	e.t.RemoveNode("n-a")
	if _, ok := e.t.Resolve("chat"); ok {
		t.Fatal("resolves after RemoveNode")
	}
	e.t.IngestAdvertisement("n-a", ad("chat", "n-a"))
	if got, _ := e.t.Resolve("chat"); got.WaitingForLink {
		t.Fatal("RemoveNode left the node waiting for its link")
	}
	e.t.KeepForRestart("n-a", 0)
	if _, ok := e.t.Resolve("chat"); ok {
		t.Fatal("KeepForRestart(0) kept the routes")
	}
}
