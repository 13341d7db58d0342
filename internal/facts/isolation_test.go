package facts

import (
	"testing"

	"github.com/nodeld/nodeld/internal/sandbox"
)

// TestIsolationRecords: each enforced part is a capability record, each
// part not enforced a note instead.
func TestIsolationRecords(t *testing.T) {
	caps, notes := Isolation(sandbox.Support{Filesystem: "landlock", LandlockABI: 4, Users: sandbox.UsersDynamic, Cgroup: sandbox.CgroupV2, Controllers: []string{"cpu"}})
	if len(caps) != 3 || len(notes) != 0 || caps[0].ID != CapIsolationFS || caps[1].ID != CapIsolationUID || caps[2].ID != CapIsolationCgroup {
		t.Fatalf("all enforced: caps %+v, notes %+v", caps, notes)
	}
	caps, notes = Isolation(sandbox.Support{Filesystem: "off", Users: "daemon", Cgroup: "unavailable"})
	if len(caps) != 0 || len(notes) != 3 {
		t.Fatalf("none enforced: caps %+v, notes %+v", caps, notes)
	}
}
