package host

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/table"
)

const testDecision = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

func TestTailUTF8(t *testing.T) {
	tests := []struct {
		give     string
		n        int
		want     string
		wantTrim bool
	}{
		{give: "hello", n: 10, want: "hello"},
		{give: "héllo", n: 4, want: "llo", wantTrim: true},
		{give: "aé", n: 1, want: "", wantTrim: true},
	}
	for _, tt := range tests {
		got, cut := tailUTF8([]byte(tt.give), tt.n)
		if got != tt.want || cut != tt.wantTrim {
			t.Errorf("tailUTF8(%q, %d) = %q %v, want %q %v", tt.give, tt.n, got, cut, tt.want, tt.wantTrim)
		}
	}
}

type admitAll struct{}

func (admitAll) IsAdmitted(string) bool { return true }

// The host's advertisement is what a peer's table keeps as its
// workload-host advertisement (the table spells the name itself, as it
// imports no ctl), and its metadata reads back through ctl's parser, as a
// controller reads it.
func TestAdvertisementKeptByPeerTable(t *testing.T) {
	if table.HostAdvertName != ctl.HostAdvertName {
		t.Fatalf("table.HostAdvertName %q, ctl.HostAdvertName %q", table.HostAdvertName, ctl.HostAdvertName)
	}
	ident := meshtest.NewIdentity(t)
	dir := t.TempDir()
	rev, err := pkg.OpenRevocations(filepath.Join(dir, pkg.RevocationsFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	audit := &fakeAudit{}
	h, err := New(Config{Enabled: true, DataDir: dir, Labels: map[string]string{"rack": "a"}},
		Deps{Identity: ident, Audit: audit, Recorder: passRecorder{audit}, Revocations: rev})
	if err != nil {
		t.Fatal(err)
	}
	ad := h.Advertisement(time.Now())
	peer := table.New("n-peer", table.Options{Admission: admitAll{}})
	if !peer.IngestAdvertisement(ident.ID(), ad) {
		t.Fatal("a peer's table refused the host's advertisement")
	}
	kept, ok := peer.HostAdverts()[ident.ID()]
	if !ok {
		t.Fatal("a peer's table did not keep the host's advertisement")
	}
	got, err := ctl.ParseHostMetadata(kept.Advertisement.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ctl.HostMetadata{Enabled: true, Labels: map[string]string{"rack": "a"}}, got); diff != "" {
		t.Fatalf("host metadata (-want +got):\n%s", diff)
	}
}
