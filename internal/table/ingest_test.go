package table

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// refusedAd is the one record of an advertisement for role and node
// refused from sender, for why.
func refusedAd(role, sender, node, why string) []rec {
	return []rec{{KindAdvertRefused, AdvertRefusedEvent{Role: role, Sender: sender, AdvertisedNode: node, Why: why}}}
}

// wantRefused fails unless audit took exactly want since it was last
// taken, each refusal keyed by the verified sender and its fixed reason
// (so that a recorder counts a peer's repeats together).
func wantRefused(t *testing.T, audit *fakeAuditor, sender string, want []rec) {
	t.Helper()
	if diff := cmp.Diff(want, audit.take()); diff != "" {
		t.Fatalf("audit (-want +got):\n%s", diff)
	}
	var wantKeys []refusalKey
	for _, r := range want {
		wantKeys = append(wantKeys, refusalKey{sender, KindAdvertRefused, r.Payload.(AdvertRefusedEvent).Why})
	}
	if diff := cmp.Diff(wantKeys, audit.takeKeys()); diff != "" {
		t.Fatalf("refusal keys (-want +got):\n%s", diff)
	}
}

func TestIngestRefusals(t *testing.T) {
	tests := []struct {
		name      string
		sender    string
		ad        Advertisement
		wantAudit []rec
	}{
		{
			name:      "for another node",
			sender:    "n-b",
			ad:        ad("chat", "n-c"),
			wantAudit: refusedAd("chat", "n-b", "n-c", ReasonOtherNode),
		},
		{
			name:      "not admitted",
			sender:    "n-x",
			ad:        ad("chat", "n-x"),
			wantAudit: refusedAd("chat", "n-x", "n-x", ReasonNotAdmitted),
		},
		{
			name:      "not allowed for this role",
			sender:    "n-b",
			ad:        ad("embed", "n-b"),
			wantAudit: refusedAd("embed", "n-b", "n-b", ReasonNotAllowed),
		},
		{
			name:      "admitted but not allowlisted",
			sender:    "n-c",
			ad:        ad("chat", "n-c"),
			wantAudit: refusedAd("chat", "n-c", "n-c", ReasonNotAllowed),
		},
		{
			name:   "too many metadata entries",
			sender: "n-b",
			ad: func() Advertisement {
				a := ad("chat", "n-b")
				for i := range MaxAdvertMetadata {
					a.Metadata["k"+strings.Repeat("x", i)] = "v"
				}
				return a
			}(),
			wantAudit: refusedAd("chat", "n-b", "n-b", ReasonTooLarge),
		},
		{
			name:      "over-long metadata value",
			sender:    "n-b",
			ad:        ad("chat", "n-b", MetaModel, strings.Repeat("m", MaxAdvertFieldLen+1)),
			wantAudit: refusedAd("chat", "n-b", "n-b", ReasonTooLarge),
		},
		{
			name:   "too many methods",
			sender: "n-b",
			ad: func() Advertisement {
				a := ad("chat", "n-b")
				a.Methods = make([]string, MaxAdvertMethods+1)
				return a
			}(),
			wantAudit: refusedAd("chat", "n-b", "n-b", ReasonTooLarge),
		},
		{name: "other name (silent)", sender: "n-b", ad: func() Advertisement {
			a := ad("chat", "n-b")
			a.Name = "other-service"
			return a
		}()},
		{name: "role with slash (silent)", sender: "n-b", ad: ad("chat/x", "n-b")},
		{name: "empty role (silent)", sender: "n-b", ad: ad("", "n-b")},
		{name: "self advertisement (silent)", sender: self, ad: ad("chat", self)},
		{name: "self as sender for another node (silent)", sender: self, ad: ad("chat", "n-b")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv("n-b", "n-c", self)
			e.t.AllowRemoteNode("chat", "n-b", true)
			e.t.AllowRemoteNode("chat", "n-c", false)
			e.t.AllowRemoteNode("chat", self, true)
			e.t.AllowRemoteNode("chat/x", "n-b", true)
			e.audit.take()
			gen := e.t.Generation()
			if e.t.IngestAdvertisement(tt.sender, tt.ad) {
				t.Fatal("advertisement taken")
			}
			wantRefused(t, e.audit, tt.sender, tt.wantAudit)
			if g := e.t.Generation(); g != gen {
				t.Fatalf("generation moved %d -> %d", gen, g)
			}
			if s := e.t.Snapshot(); len(s.Roles) > 0 {
				for _, r := range s.Roles {
					if len(r.Remote) != 0 {
						t.Fatalf("refused advertisement stored: %+v", r.Remote)
					}
				}
			}
		})
	}
}

func TestIngestWithoutAdmissionIsRefused(t *testing.T) {
	audit := &fakeAuditor{}
	tb := New(self, Options{Audit: audit, RecordRefusal: audit.refusal})
	tb.AllowRemoteNode("chat", "n-b", true)
	audit.take()
	if tb.IngestAdvertisement("n-b", ad("chat", "n-b")) {
		t.Fatal("taken without a mesh")
	}
	want := refusedAd("chat", "n-b", "n-b", ReasonNotAdmitted)
	if diff := cmp.Diff(want, audit.take()); diff != "" {
		t.Fatalf("audit (-want +got):\n%s", diff)
	}
}

// TestRefusalsNeverGoToAudit: a peer decides how often it advertises, so
// its refusals go only to RecordRefusal (rate-limited by the daemon),
// never to the Auditor one entry each.
func TestRefusalsNeverGoToAudit(t *testing.T) {
	audit := &fakeAuditor{}
	tb := New(self, Options{Admission: newAdmission("n-b"), Audit: audit})
	tb.AllowRemoteNode("chat", "n-b", true)
	audit.take()
	for range 100 {
		if tb.IngestAdvertisement("n-b", ad("chat", "n-c")) {
			t.Fatal("advertisement for another node taken")
		}
	}
	if got := audit.take(); len(got) != 0 {
		t.Fatalf("%d refusals written to the Auditor, want none", len(got))
	}
}

// TestRefusalRecordFailure: a refusal that cannot be recorded is counted
// and reported like an audit record.
func TestRefusalRecordFailure(t *testing.T) {
	var kinds []string
	tb := New(self, Options{
		Admission:     newAdmission("n-b"),
		RecordRefusal: func(string, string, string, any) error { return errors.New("disk full") },
		AuditError:    func(kind string, err error) { kinds = append(kinds, kind) },
	})
	if tb.IngestAdvertisement("n-b", ad("chat", "n-c")) {
		t.Fatal("advertisement for another node taken")
	}
	if diff := cmp.Diff([]string{KindAdvertRefused}, kinds); diff != "" {
		t.Fatalf("AuditError kinds (-want +got):\n%s", diff)
	}
}

func TestAllowingOneRoleDoesNotHelpAnother(t *testing.T) {
	e := newEnv("n-b")
	e.t.AllowRemoteNode("embed", "n-b", true)
	if e.t.IngestAdvertisement("n-b", ad("chat", "n-b")) {
		t.Fatal("chat advert taken with only embed allowed")
	}
	if _, ok := e.t.Resolve("chat"); ok {
		t.Fatal("chat resolves")
	}
}

func TestAdvertTTL(t *testing.T) {
	const ttl = 10 * time.Second
	clock := newClock()
	adm := newAdmission("n-b")
	tb := New(self, Options{Admission: adm, Now: clock.now, AdvertTTL: ttl})
	tb.AllowRemoteNode("chat", "n-b", true)

	resolves := func() bool { _, ok := tb.Resolve("chat"); return ok }

	a := ad("chat", "n-b")
	a.LastUpdated = time.Date(2999, 1, 1, 0, 0, 0, 0, time.UTC).Unix() // far future: ignored
	if !tb.IngestAdvertisement("n-b", a) {
		t.Fatal("refused")
	}
	clock.advance(ttl)
	if !resolves() {
		t.Fatal("stale at exactly the TTL; want fresh")
	}
	clock.advance(time.Nanosecond)
	if resolves() {
		t.Fatal("fresh after the TTL despite a far-future peer timestamp")
	}

	// A repeat refreshes the TTL (and, the entry having expired, bumps).
	gen := tb.Generation()
	a.LastUpdated = 0 // a zero peer timestamp does not matter either
	if !tb.IngestAdvertisement("n-b", a) {
		t.Fatal("repeat refused")
	}
	if tb.Generation() != gen+1 {
		t.Fatal("re-taking an expired advertisement did not bump")
	}
	if !resolves() {
		t.Fatal("repeat did not refresh")
	}
	clock.advance(ttl - time.Second)
	gen = tb.Generation()
	if !tb.IngestAdvertisement("n-b", a) {
		t.Fatal("repeat refused")
	}
	if tb.Generation() != gen {
		t.Fatal("a fresh repeat bumped")
	}
	clock.advance(ttl - time.Second)
	if !resolves() {
		t.Fatal("repeat within the TTL did not extend it")
	}
	clock.advance(2 * time.Second)
	if resolves() {
		t.Fatal("still fresh after TTL since the last repeat")
	}
}

func TestDefaultTTL(t *testing.T) {
	clock := newClock()
	tb := New(self, Options{Admission: newAdmission("n-b"), Now: clock.now})
	tb.AllowRemoteNode("chat", "n-b", true)
	tb.IngestAdvertisement("n-b", ad("chat", "n-b"))
	clock.advance(DefaultAdvertTTL)
	if _, ok := tb.Resolve("chat"); !ok {
		t.Fatal("stale at the default TTL")
	}
	clock.advance(time.Millisecond)
	if _, ok := tb.Resolve("chat"); ok {
		t.Fatal("fresh after the default TTL")
	}
}

func TestRevokedPeerStopsResolvingAtOnce(t *testing.T) {
	e := newEnv("n-b")
	e.t.AllowRemoteNode("chat", "n-b", true)
	e.t.IngestAdvertisement("n-b", ad("chat", "n-b"))
	if tg, ok := e.t.Resolve("chat"); !ok || tg.NodeID != "n-b" {
		t.Fatalf("Resolve = %+v, %v", tg, ok)
	}
	e.adm.set("n-b", false)
	if tg, ok := e.t.Resolve("chat"); ok {
		t.Fatalf("revoked peer resolves: %+v", tg)
	}
	if _, ok := e.t.BaseURLForRole("chat"); ok {
		t.Fatal("revoked peer has a base URL")
	}
	e.adm.set("n-b", true)
	if _, ok := e.t.Resolve("chat"); !ok {
		t.Fatal("re-admitted peer does not resolve")
	}
}

func TestWithdrawingAllowanceStopsResolution(t *testing.T) {
	e := newEnv("n-b")
	e.t.AllowRemoteNode("chat", "n-b", true)
	e.t.IngestAdvertisement("n-b", ad("chat", "n-b"))
	e.t.AllowRemoteNode("chat", "n-b", false)
	if tg, ok := e.t.Resolve("chat"); ok {
		t.Fatalf("disallowed node resolves: %+v", tg)
	}
}

func TestRemoveNode(t *testing.T) {
	e := newEnv("n-b", "n-c")
	for _, r := range []string{"chat", "embed"} {
		e.t.AllowRemoteNode(r, "n-b", true)
		e.t.AllowRemoteNode(r, "n-c", true)
		e.t.IngestAdvertisement("n-b", ad(r, "n-b", MetaLoad, "0"))
		e.t.IngestAdvertisement("n-c", ad(r, "n-c", MetaLoad, "0.5"))
	}
	e.t.RemoveNode("n-b")
	for _, r := range []string{"chat", "embed"} {
		if tg, _ := e.t.Resolve(r); tg.NodeID != "n-c" {
			t.Fatalf("Resolve(%s) = %+v after removing n-b", r, tg)
		}
	}
	e.t.RemoveNode("n-c")
	if _, ok := e.t.Resolve("chat"); ok {
		t.Fatal("resolves after removing every node")
	}
	for _, r := range e.t.Snapshot().Roles {
		if len(r.Remote) != 0 {
			t.Fatalf("role %s keeps remote entries %+v", r.Role, r.Remote)
		}
	}
}

func TestIngestCopiesTheAdvertisement(t *testing.T) {
	e := newEnv("n-b")
	e.t.AllowRemoteNode("chat", "n-b", true)
	a := ad("chat", "n-b", MetaModel, "m1")
	e.t.IngestAdvertisement("n-b", a)
	a.Metadata[MetaModel] = "mutated"
	if tg, _ := e.t.Resolve("chat"); tg.Model != "m1" {
		t.Fatalf("stored advertisement aliased the caller's map: model %q", tg.Model)
	}
}

func TestIngestLoadChangeBumpsOnlyWhenOrderChanges(t *testing.T) {
	e := newEnv("n-b", "n-c")
	e.t.AllowRemoteNode("chat", "n-b", true)
	e.t.AllowRemoteNode("chat", "n-c", true)
	e.t.IngestAdvertisement("n-b", ad("chat", "n-b", MetaLoad, "0.1"))
	e.t.IngestAdvertisement("n-c", ad("chat", "n-c", MetaLoad, "0.5"))
	steps := []struct {
		name string
		node string
		load string
		bump bool
		want string
	}{
		{"jitter that keeps the order", "n-b", "0.2", false, "n-b"},
		{"load that reorders", "n-b", "0.9", true, "n-c"},
		{"loser moves, order kept", "n-b", "0.8", false, "n-c"},
		{"back to first", "n-b", "0", true, "n-b"},
	}
	for _, s := range steps {
		gen := e.t.Generation()
		if !e.t.IngestAdvertisement(s.node, ad("chat", s.node, MetaLoad, s.load)) {
			t.Fatalf("%s: refused", s.name)
		}
		if bumped := e.t.Generation() != gen; bumped != s.bump {
			t.Errorf("%s: bumped = %v, want %v", s.name, bumped, s.bump)
		}
		if tg, _ := e.t.Resolve("chat"); tg.NodeID != s.want {
			t.Errorf("%s: resolved %q, want %q", s.name, tg.NodeID, s.want)
		}
	}
}

func TestIngestMethodsChangeBumps(t *testing.T) {
	e := newEnv("n-b")
	e.t.AllowRemoteNode("chat", "n-b", true)
	a := ad("chat", "n-b")
	e.t.IngestAdvertisement("n-b", a)
	gen := e.t.Generation()
	a.Methods = []string{"embeddings"}
	e.t.IngestAdvertisement("n-b", a)
	if e.t.Generation() != gen+1 {
		t.Fatal("methods change did not bump")
	}
	delete(a.Metadata, MetaNodeID)
	e.t.IngestAdvertisement("n-b", a)
	if e.t.Generation() != gen+2 {
		t.Fatal("removed metadata key did not bump")
	}
}

func TestRetainRemoteWithdrawsUnnamedRoles(t *testing.T) {
	e := newEnv("n-b", "n-c")
	for _, r := range []string{"chat", "embed"} {
		e.t.AllowRemoteNode(r, "n-b", true)
		e.t.AllowRemoteNode(r, "n-c", true)
		e.t.IngestAdvertisement("n-b", ad(r, "n-b", MetaLoad, "0"))
		e.t.IngestAdvertisement("n-c", ad(r, "n-c", MetaLoad, "0.5"))
	}
	gen := e.t.Generation()
	e.t.RetainRemote("n-b", []string{"embed"}) // n-b withdrew chat
	if e.t.Generation() == gen {
		t.Fatal("withdrawing a role did not bump the generation")
	}
	if tg, _ := e.t.Resolve("chat"); tg.NodeID != "n-c" {
		t.Fatalf("Resolve(chat) = %+v, want n-c after n-b withdrew it", tg)
	}
	if tg, _ := e.t.Resolve("embed"); tg.NodeID != "n-b" {
		t.Fatalf("Resolve(embed) = %+v, want n-b still", tg)
	}
	gen = e.t.Generation()
	e.t.RetainRemote("n-b", []string{"embed"})
	if e.t.Generation() != gen {
		t.Fatal("retaining what is there bumped the generation")
	}
	e.t.RetainRemote("n-c", nil)
	if _, ok := e.t.Resolve("chat"); ok {
		t.Fatal("chat resolves after every server withdrew it")
	}
}
