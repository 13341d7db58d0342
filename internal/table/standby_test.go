package table

import (
	"fmt"
	"testing"
	"time"
)

func standbyAd(node, role string) Advertisement {
	return StandbyAdvertisement(node, Standby{Role: role, State: StateCold, Model: "m", MaxWait: 30 * time.Second}, time.Unix(1, 0))
}

// A controller's standby advertisement is kept per role, only as its
// admitted sender's own and well formed, counted for the TTL from local
// receipt, and shown in the snapshot; it resolves nothing and wakes no one.
func TestStandbyIngest(t *testing.T) {
	e := newEnv("n-b", "n-c")
	wake, cancel := e.t.Subscribe()
	defer cancel()
	gen := e.t.Generation()

	if !e.t.IngestAdvertisement("n-b", standbyAd("n-b", "chat")) {
		t.Fatal("standby of an admitted sender refused")
	}
	got := e.t.Standbys("chat")
	if len(got) != 1 || got[0].Controller != "n-b" || got[0].State != StateCold || got[0].MaxWait != 30*time.Second || got[0].Model != "m" {
		t.Fatalf("Standbys = %+v", got)
	}
	if e.t.Generation() != gen || woke(wake) {
		t.Fatal("a standby bumped the generation or woke subscribers")
	}
	if _, ok := e.t.Resolve("chat"); ok {
		t.Fatal("a standby resolved")
	}

	other := standbyAd("n-c", "chat")
	bad := standbyAd("n-c", "chat")
	bad.Metadata[MetaMaxWaitMS] = "0"
	badState := standbyAd("n-c", "chat")
	badState.Metadata[MetaState] = "warm"
	otherCtl := standbyAd("n-c", "chat")
	otherCtl.Metadata[MetaNodeID] = "n-b"
	for name, c := range map[string]struct {
		sender string
		ad     Advertisement
		why    string
	}{
		"other node":       {"n-b", other, ReasonOtherNode},
		"not admitted":     {"n-x", standbyAd("n-x", "chat"), ReasonNotAdmitted},
		"zero wait":        {"n-c", bad, ReasonMalformed},
		"unknown state":    {"n-c", badState, ReasonMalformed},
		"other controller": {"n-c", otherCtl, ReasonMalformed},
	} {
		e.audit.takeKeys()
		if e.t.IngestAdvertisement(c.sender, c.ad) {
			t.Errorf("%s: taken", name)
		}
		if k := e.audit.takeKeys(); len(k) != 1 || k[0].Reason != c.why {
			t.Errorf("%s: refusal keys %v, want %q", name, k, c.why)
		}
	}
	if got := e.t.Standbys("chat"); len(got) != 1 {
		t.Fatalf("refused standbys kept: %+v", got)
	}

	snap := e.t.Snapshot()
	var found bool
	for _, rs := range snap.Roles {
		if rs.Role == "chat" {
			found = len(rs.OnDemand) == 1 && rs.OnDemand[0].Controller == "n-b" && rs.OnDemand[0].State == StateCold &&
				rs.OnDemand[0].Fresh && rs.OnDemand[0].Admitted && rs.Resolved == nil
		}
	}
	if !found {
		t.Fatalf("snapshot does not show chat's standby: %+v", snap.Roles)
	}

	// Not admitted any more: not offered.
	e.adm.set("n-b", false)
	if got := e.t.Standbys("chat"); len(got) != 0 {
		t.Fatalf("standby of a peer no longer admitted offered: %+v", got)
	}
	e.adm.set("n-b", true)

	// The TTL counts from receipt.
	e.clock.advance(DefaultAdvertTTL)
	if len(e.t.Standbys("chat")) != 1 {
		t.Fatal("standby gone at the TTL")
	}
	e.clock.advance(time.Millisecond)
	if got := e.t.Standbys("chat"); len(got) != 0 {
		t.Fatalf("standby kept past the TTL: %+v", got)
	}
}

// The standbys held are bounded; expired ones make room.
func TestStandbyBound(t *testing.T) {
	e := newEnv("n-b")
	for i := range MaxStandbys {
		if !e.t.IngestAdvertisement("n-b", standbyAd("n-b", fmt.Sprintf("r%d", i))) {
			t.Fatalf("standby %d refused", i)
		}
	}
	e.audit.takeKeys()
	if e.t.IngestAdvertisement("n-b", standbyAd("n-b", "one-more")) {
		t.Fatal("standby over the bound taken")
	}
	if k := e.audit.takeKeys(); len(k) != 1 || k[0].Reason != ReasonTooMany {
		t.Fatalf("refusal keys %v", k)
	}
	// A repeat of a held one is still taken.
	if !e.t.IngestAdvertisement("n-b", standbyAd("n-b", "r0")) {
		t.Fatal("repeat refused at the bound")
	}
	e.clock.advance(DefaultAdvertTTL + time.Second)
	if !e.t.IngestAdvertisement("n-b", standbyAd("n-b", "one-more")) {
		t.Fatal("expired standbys did not make room")
	}
}

// This node's own controller's standbys are set in memory, come first,
// need no admission or TTL, and a change wakes the advert loop.
func TestOwnStandbys(t *testing.T) {
	e := newEnv("n-b")
	wake, cancel := e.t.Subscribe()
	defer cancel()
	e.t.IngestAdvertisement("n-b", standbyAd("n-b", "chat"))
	own := []Standby{{Role: "chat", State: StateStarting, MaxWait: time.Minute}}
	e.t.SetOwnStandbys(own)
	if !woke(wake) {
		t.Fatal("own standbys changed without a wake-up")
	}
	e.t.SetOwnStandbys(own)
	if woke(wake) {
		t.Fatal("the same own standbys woke subscribers")
	}
	e.clock.advance(DefaultAdvertTTL * 2)
	got := e.t.Standbys("chat")
	if len(got) != 1 || got[0].Controller != self || got[0].State != StateStarting {
		t.Fatalf("Standbys = %+v", got)
	}
	e.t.SetOwnStandbys(nil)
	if got := e.t.Standbys("chat"); len(got) != 0 {
		t.Fatalf("own standbys not replaced: %+v", got)
	}
}

// A round that no longer names a standby withdraws it, as it does a route.
func TestStandbyWithdrawnByRound(t *testing.T) {
	e := newEnv("n-b")
	e.t.ApplyPeerEvent(PeerEvent{Kind: PeerRound, Node: "n-b", Adverts: []Advertisement{standbyAd("n-b", "chat"), standbyAd("n-b", "embed")}})
	if len(e.t.Standbys("chat")) != 1 || len(e.t.Standbys("embed")) != 1 {
		t.Fatal("round's standbys not kept")
	}
	e.t.ApplyPeerEvent(PeerEvent{Kind: PeerRound, Node: "n-b", Adverts: []Advertisement{standbyAd("n-b", "embed")}})
	if len(e.t.Standbys("chat")) != 0 || len(e.t.Standbys("embed")) != 1 {
		t.Fatalf("chat %+v embed %+v", e.t.Standbys("chat"), e.t.Standbys("embed"))
	}
}
