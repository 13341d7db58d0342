package table

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// hostAd builds node's workload-host advertisement with the given
// instance count and extra metadata pairs.
func hostAd(node string, instances int, kv ...string) Advertisement {
	md := map[string]string{"instances": strconv.Itoa(instances), "in_flight": "0", "enabled": "true"}
	for i := 0; i+1 < len(kv); i += 2 {
		md[kv[i]] = kv[i+1]
	}
	return Advertisement{
		Name: HostAdvertName, NodeID: node, Version: "1", Metadata: md, LastUpdated: 1,
		Methods: []string{"workload.describe", "workload.place"},
	}
}

func woke(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// A peer's workload-host advertisement is kept (not dropped as before),
// replaced by its next one, counted for the TTL from local receipt, and
// forgotten when its link goes.
func TestHostAdvertLifecycle(t *testing.T) {
	e := newEnv("n-b", "n-c")
	wake, cancel := e.t.Subscribe()
	defer cancel()
	gen := e.t.Generation()

	if !e.t.IngestAdvertisement("n-b", hostAd("n-b", 1, "label.rack", "a")) {
		t.Fatal("workload-host advertisement not taken")
	}
	if !e.t.IngestAdvertisement("n-c", hostAd("n-c", 0)) {
		t.Fatal("second peer's advertisement not taken")
	}
	got := e.t.HostAdverts()
	if diff := cmp.Diff(map[string]HostAdvert{
		"n-b": {Advertisement: hostAd("n-b", 1, "label.rack", "a"), Received: e.clock.now()},
		"n-c": {Advertisement: hostAd("n-c", 0), Received: e.clock.now()},
	}, got); diff != "" {
		t.Fatalf("HostAdverts (-want +got):\n%s", diff)
	}
	// No resolution depends on it, and waking the advert loop for it would
	// answer every round with a round.
	if e.t.Generation() != gen || woke(wake) {
		t.Fatal("a workload-host advertisement bumped the generation or woke subscribers")
	}
	// It names no role.
	if s := e.t.Snapshot(); len(s.Roles) != 0 {
		t.Fatalf("roles from a host advertisement: %+v", s.Roles)
	}
	// The copy handed out is the caller's.
	got["n-b"].Advertisement.Metadata["instances"] = "99"
	if e.t.HostAdverts()["n-b"].Advertisement.Metadata["instances"] != "1" {
		t.Fatal("HostAdverts shares its maps with the table")
	}

	// Replaced by a newer one, whose receipt restarts the TTL.
	e.clock.advance(30 * time.Second)
	if !e.t.IngestAdvertisement("n-b", hostAd("n-b", 2)) {
		t.Fatal("newer advertisement not taken")
	}
	renewed := e.clock.now()
	if diff := cmp.Diff(HostAdvert{Advertisement: hostAd("n-b", 2), Received: renewed}, e.t.HostAdverts()["n-b"]); diff != "" {
		t.Fatalf("after replacement (-want +got):\n%s", diff)
	}

	// Expires after the TTL from local receipt (inclusive), never from the
	// peer's own timestamp; it stays visible, stale, in the snapshot.
	e.clock.advance(DefaultAdvertTTL - 30*time.Second)
	if _, ok := e.t.HostAdverts()["n-c"]; !ok {
		t.Fatal("expired at exactly the TTL")
	}
	e.clock.advance(time.Second)
	if _, ok := e.t.HostAdverts()["n-c"]; ok {
		t.Fatal("kept after the TTL")
	}
	if _, ok := e.t.HostAdverts()["n-b"]; !ok {
		t.Fatal("the renewed advertisement expired with the old receipt time")
	}
	want := []HostSnapshot{
		{Node: "n-b", Version: "1", Metadata: hostAd("n-b", 2).Metadata, AgeSeconds: 31, Fresh: true, Admitted: true},
		{Node: "n-c", Version: "1", Metadata: hostAd("n-c", 0).Metadata, AgeSeconds: 61, Fresh: false, Admitted: true},
	}
	if diff := cmp.Diff(want, e.t.Snapshot().Hosts); diff != "" {
		t.Fatalf("snapshot hosts (-want +got):\n%s", diff)
	}

	// A complete round naming no role leaves it; losing the link removes it.
	e.t.RetainRemote("n-b", nil)
	if _, ok := e.t.HostAdverts()["n-b"]; !ok {
		t.Fatal("RetainRemote dropped the workload-host advertisement")
	}
	e.t.RemoveNode("n-b")
	e.t.RemoveNode("n-c")
	if got := e.t.HostAdverts(); len(got) != 0 {
		t.Fatalf("kept after RemoveNode: %v", got)
	}
	if s := e.t.Snapshot(); len(s.Hosts) != 0 {
		t.Fatalf("snapshot keeps removed hosts: %+v", s.Hosts)
	}
}

// A node cannot advertise another node's workload host, and only admitted
// peers are kept; refusals go to the recorder like an infer
// advertisement's.
func TestHostAdvertRefusals(t *testing.T) {
	tests := []struct {
		name      string
		sender    string
		ad        Advertisement
		wantAudit []rec
	}{
		{
			name: "for another node", sender: "n-b", ad: hostAd("n-c", 5),
			wantAudit: []rec{{KindAdvertRefused, AdvertRefusedEvent{
				Name: HostAdvertName, Sender: "n-b", AdvertisedNode: "n-c", Why: ReasonOtherNode}}},
		},
		{
			name: "not admitted", sender: "n-x", ad: hostAd("n-x", 0),
			wantAudit: []rec{{KindAdvertRefused, AdvertRefusedEvent{
				Name: HostAdvertName, Sender: "n-x", AdvertisedNode: "n-x", Why: ReasonNotAdmitted}}},
		},
		{
			name: "too much metadata", sender: "n-b",
			ad: func() Advertisement {
				a := hostAd("n-b", 0)
				for i := range MaxHostAdvertMetadata {
					a.Metadata["label.l"+strconv.Itoa(i)] = "v"
				}
				return a
			}(),
			wantAudit: []rec{{KindAdvertRefused, AdvertRefusedEvent{
				Name: HostAdvertName, Sender: "n-b", AdvertisedNode: "n-b", Why: ReasonTooLarge}}},
		},
		{name: "self (silent)", sender: self, ad: hostAd(self, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv("n-b", "n-c", self)
			// n-c's own advertisement is there, and stays n-c's.
			if !e.t.IngestAdvertisement("n-c", hostAd("n-c", 1)) {
				t.Fatal("n-c's own advertisement not taken")
			}
			if e.t.IngestAdvertisement(tt.sender, tt.ad) {
				t.Fatal("advertisement taken")
			}
			wantRefused(t, e.audit, tt.sender, tt.wantAudit)
			if diff := cmp.Diff(map[string]HostAdvert{"n-c": {Advertisement: hostAd("n-c", 1), Received: e.clock.now()}},
				e.t.HostAdverts()); diff != "" {
				t.Fatalf("HostAdverts (-want +got):\n%s", diff)
			}
		})
	}
}

// A host with every label the facts allow is within the bound; admission
// is checked again when the advertisements are read, so a peer no longer
// admitted drops out at once.
func TestHostAdvertLabelsAndAdmission(t *testing.T) {
	e := newEnv("n-b")
	a := hostAd("n-b", 0)
	for i := range 64 {
		a.Metadata["label.l"+strconv.Itoa(i)] = "v"
	}
	if !e.t.IngestAdvertisement("n-b", a) {
		t.Fatal("a host with 64 labels refused")
	}
	if _, ok := e.t.HostAdverts()["n-b"]; !ok {
		t.Fatal("not kept")
	}
	e.adm.set("n-b", false)
	if _, ok := e.t.HostAdverts()["n-b"]; ok {
		t.Fatal("kept for a peer no longer admitted")
	}
	if s := e.t.Snapshot(); len(s.Hosts) != 1 || s.Hosts[0].Admitted {
		t.Fatalf("snapshot: %+v", s.Hosts)
	}
}

func TestHostAdvertWithoutAdmission(t *testing.T) {
	audit := &fakeAuditor{}
	tb := New(self, Options{Audit: audit, RecordRefusal: audit.refusal})
	if tb.IngestAdvertisement("n-b", hostAd("n-b", 0)) || len(tb.HostAdverts()) != 0 {
		t.Fatal("taken without a mesh")
	}
}
