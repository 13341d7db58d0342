package host

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap/zaptest"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/pkg"
)

var testHash = strings.Repeat("ab", 32)

func fixedNow() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }

func testInstance(id, pkgID string) *instance {
	return &instance{id: id, pkgID: pkgID, version: "1.0.0", manifestHash: testHash, now: fixedNow}
}

// TestRegistryBegin checks the refusals of a place's begin: a decision
// already in flight, an instance already listed or reserved by another
// decision, and a node at MaxInstances.
func TestRegistryBegin(t *testing.T) {
	m := &pkg.Manifest{ID: "echo", Version: "1.0.0"}
	tests := []struct {
		name     string
		prepare  func(r *registry)
		decision string
		id       string
		want     ctl.Code // "" means begun
	}{
		{name: "fresh", decision: "d1", id: "i1"},
		{name: "decision in flight", prepare: func(r *registry) { _ = r.begin("d1", "i0", "p", m) },
			decision: "d1", id: "i1", want: ctl.CodeInvalidRequest},
		{name: "instance listed", prepare: func(r *registry) { r.add(testInstance("i1", "echo")) },
			decision: "d1", id: "i1", want: ctl.CodeRuntime},
		{name: "instance reserved", prepare: func(r *registry) { _ = r.begin("d0", "i1", "p", m) },
			decision: "d1", id: "i1", want: ctl.CodeRuntime},
		{name: "node full", prepare: func(r *registry) {
			for i := range MaxInstances / 2 {
				r.add(testInstance(fmt.Sprint("listed-", i), "echo"))
				_ = r.begin(fmt.Sprint("d-", i), fmt.Sprint("placing-", i), "p", m)
			}
		}, decision: "d1", id: "i1", want: ctl.CodeAdmission},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRegistry(fixedNow)
			if tt.prepare != nil {
				tt.prepare(r)
			}
			var got ctl.Code
			if ref := r.begin(tt.decision, tt.id, "p", m); ref != nil {
				got = ref.Code
			}
			if got != tt.want {
				t.Fatalf("begin refused %q, want %q", got, tt.want)
			}
			if got != "" {
				return
			}
			fl, _, _ := r.listing(false)
			want := []InFlightStatus{{DecisionID: "d1", Package: "echo", Version: "1.0.0", InstanceID: "i1", Since: fixedNow()}}
			if diff := cmp.Diff(want, fl); diff != "" {
				t.Errorf("in flight (-want +got):\n%s", diff)
			}
			r.end(tt.decision, tt.id)
			if _, inFlight := r.counts(); inFlight != 0 {
				t.Errorf("%d in flight after end", inFlight)
			}
		})
	}
}

// TestRegistryDeparted checks that the departed list keeps the newest
// MaxDeparted, that removing an instance no longer listed records
// nothing, and that listing an id again takes it off the list.
func TestRegistryDeparted(t *testing.T) {
	r := newRegistry(fixedNow)
	for i := range MaxDeparted + 1 {
		in := testInstance(fmt.Sprint("i", i), "echo")
		r.add(in)
		r.remove(in, ctl.DepartedUnloaded)
		r.remove(in, ctl.DepartedRevoked) // no longer listed: ignored
	}
	_, insts, departed := r.listing(true)
	if len(insts) != 0 {
		t.Fatalf("%d instances still listed", len(insts))
	}
	if len(departed) != MaxDeparted || departed[0].InstanceID != "i1" {
		t.Fatalf("departed has %d entries from %v, want %d from i1", len(departed), departed[0], MaxDeparted)
	}
	r.add(testInstance("i1", "echo"))
	_, _, departed = r.listing(true)
	for _, d := range departed {
		if d.InstanceID == "i1" || d.Reason != ctl.DepartedUnloaded {
			t.Fatalf("departed after i1 was listed again: %v", d)
		}
	}
}

// TestStoreKeepsDirInUse checks the store and the registry together: a
// package directory that a listed instance or a place in flight uses is
// kept, and removed once nothing uses it.
func TestStoreKeepsDirInUse(t *testing.T) {
	r := newRegistry(fixedNow)
	s := &store{dataDir: t.TempDir(), inUse: r.packageInUse, log: zaptest.NewLogger(t), removing: map[string]chan struct{}{}}
	in := testInstance("i1", "echo")
	name := in.pkgDir()
	dir := filepath.Join(PackagesDir(s.dataDir), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	exists := func() bool {
		_, err := os.Stat(dir)
		return err == nil
	}

	r.add(in)
	if err := r.begin("d2", "i2", name, &pkg.Manifest{ID: "echo", Version: "1.0.0"}); err != nil {
		t.Fatal(err)
	}
	r.remove(in, ctl.DepartedUnloaded)
	s.release(name)
	if !exists() {
		t.Fatal("removed while a place in flight uses it")
	}
	r.end("d2", "i2")
	s.release(name)
	if exists() {
		t.Fatal("kept once nothing uses it")
	}
}
