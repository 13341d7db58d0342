package plane

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"testing"

	"github.com/nodeld/nodeld/internal/pkg"
)

// TestStateAtScaleRestores: 1,000 placements made on a 100-node cluster,
// each keeping its 100 ranked candidates as Place stores them, are
// written to controller.json within MaxStateBytes and restored by a
// restart. (Indented, this file was 9.7 MB: over the limit, so the
// controller it was written by refused to start again.)
func TestStateAtScaleRestores(t *testing.T) {
	r, _ := newRig(t, 8)
	nodes := make([]string, 100)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("n-%016x", uint64(i)*0x9e3779b97f4a7c15)
	}
	r.c.mu.Lock()
	for i := range 1000 {
		sum := sha256.Sum256(fmt.Appendf(nil, "decision %d", i))
		o := &Order{Name: fmt.Sprintf("svc-%d", i), PackageDir: "/pkg/echo", Start: true}
		pl := &Placement{DecisionID: hex.EncodeToString(sum[:]), Kind: pkg.KindService, Workload: o.Name, Package: "echo",
			Version: "1.0.0", ManifestHash: hex.EncodeToString(sum[:]), Life: LifePlaced, HostState: "running", WasRunning: true,
			PlacedAt: t0, Order: o, Node: nodes[i%100], Variant: "cpu", InstanceID: fmt.Sprintf("echo-%08x-%s", i, nodes[i%100])}
		for k := range nodes {
			pl.Candidates = append(pl.Candidates, Candidate{Node: nodes[(i+k)%100], Variant: "cpu"})
		}
		r.c.placements[pl.DecisionID] = pl
	}
	r.c.mu.Unlock()
	if err := r.c.persist(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(r.state)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("controller.json: %d bytes for 1,000 placements of 100 candidates", fi.Size())
	r.restart()
	if n := len(r.c.Placements()); n != 1000 {
		t.Fatalf("%d placements restored, want 1000", n)
	}
}

// rewritten reports whether the state file was replaced since pin: pin
// keeps a hard link to the file (so its inode cannot be reused), and
// atomicfile replaces the file by a rename.
func pin(t *testing.T, path string) string {
	t.Helper()
	link := path + ".pin"
	os.Remove(link)
	if err := os.Link(path, link); err != nil {
		t.Fatal(err)
	}
	return link
}

func rewritten(t *testing.T, path, link string) bool {
	t.Helper()
	a, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.Stat(link)
	if err != nil {
		t.Fatal(err)
	}
	return !os.SameFile(a, b)
}

// TestUnchangedStateNotRewritten: a tick that changes nothing does not
// rewrite controller.json (a multi-megabyte write and fsync every tick
// at scale); a change does.
func TestUnchangedStateNotRewritten(t *testing.T) {
	r, _ := newRig(t, 8, 8)
	r.tick()
	r.place(echo)
	r.step()
	link := pin(t, r.state)
	r.step()
	r.step()
	if rewritten(t, r.state, link) {
		t.Fatal("a tick that changed nothing rewrote the state file")
	}
	r.place(Order{PackageDir: "/pkg/echo", Start: true, Name: "echo-2"})
	if !rewritten(t, r.state, link) {
		t.Fatal("a place did not rewrite the state file")
	}
	r.restart()
	if n := len(r.c.Placements()); n != 2 {
		t.Fatalf("%d placements restored, want 2", n)
	}
}
