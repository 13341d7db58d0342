package table

import (
	"testing"
	"time"
)

// ApplyPeerEvent is where the mesh's reports become routes: a round
// replaces a peer's routes and, on its current link, ends its wait; a late
// round is ignored; a loss keeps the routes waiting only when the peer
// restarted or stopped and the mesh waits for it; the end of a wait and a
// removal drop them.
func TestApplyPeerEvent(t *testing.T) {
	round := func(link RoundLink, roles ...string) PeerEvent {
		ev := PeerEvent{Kind: PeerRound, Node: "n-a", Round: link}
		for _, r := range roles {
			ev.Adverts = append(ev.Adverts, ad(r, "n-a"))
		}
		return ev
	}
	lost := func(loss LinkLoss, wait time.Duration) PeerEvent {
		return PeerEvent{Kind: PeerLinkLost, Node: "n-a", Loss: loss, Wait: wait}
	}
	// resolves is what "chat" and "embed" resolve to after the events:
	// "" none, "live" n-a with a live link, "waiting" n-a waiting for it.
	for _, tc := range []struct {
		name        string
		events      []PeerEvent
		chat, embed string
	}{
		{"a round adds its roles", []PeerEvent{round(RoundCurrent, "chat", "embed")}, "live", "live"},
		{"a round drops what it no longer names", []PeerEvent{round(RoundCurrent, "chat", "embed"), round(RoundCurrent, "chat")}, "live", ""},
		{"a late round is ignored", []PeerEvent{round(RoundCurrent, "chat"), lost(LossDropped, 0), round(RoundLate, "chat")}, "", ""},
		{"a link up changes nothing", []PeerEvent{round(RoundCurrent, "chat"), {Kind: PeerLinkUp, Node: "n-a"}}, "live", ""},
		{"a dropped link removes at once", []PeerEvent{round(RoundCurrent, "chat"), lost(LossDropped, time.Minute)}, "", ""},
		{"a restart keeps the routes waiting", []PeerEvent{round(RoundCurrent, "chat"), lost(LossRestarted, time.Minute)}, "waiting", ""},
		{"a stop keeps the routes waiting", []PeerEvent{round(RoundCurrent, "chat"), lost(LossStopping, time.Minute)}, "waiting", ""},
		{"no wait left removes", []PeerEvent{round(RoundCurrent, "chat"), lost(LossRestarted, 0)}, "", ""},
		{"an old link's round keeps waiting", []PeerEvent{round(RoundCurrent, "chat"), lost(LossRestarted, time.Minute), round(RoundOther, "chat", "embed")}, "waiting", "waiting"},
		{"the new link's round ends the wait", []PeerEvent{round(RoundCurrent, "chat"), lost(LossRestarted, time.Minute), {Kind: PeerLinkUp, Node: "n-a"}, round(RoundCurrent, "chat")}, "live", ""},
		{"the wait over removes", []PeerEvent{round(RoundCurrent, "chat"), lost(LossStopping, time.Minute), {Kind: PeerWaitOver, Node: "n-a", Stopped: true}}, "", ""},
		{"the wait over after the round removes nothing", []PeerEvent{round(RoundCurrent, "chat"), lost(LossRestarted, time.Minute), round(RoundCurrent, "chat"), {Kind: PeerWaitOver, Node: "n-a"}}, "live", ""},
		{"a removed peer loses its routes", []PeerEvent{round(RoundCurrent, "chat"), {Kind: PeerRemoved, Node: "n-a"}}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv("n-a")
			e.t.AllowRemoteNode("chat", "n-a", true)
			e.t.AllowRemoteNode("embed", "n-a", true)
			for _, ev := range tc.events {
				e.t.ApplyPeerEvent(ev)
			}
			for role, want := range map[string]string{"chat": tc.chat, "embed": tc.embed} {
				got := ""
				if tg, ok := e.t.Resolve(role); ok && tg.NodeID == "n-a" {
					got = "live"
					if tg.WaitingForLink {
						got = "waiting"
					}
				}
				if got != want {
					t.Errorf("%s resolves %q, want %q", role, got, want)
				}
			}
		})
	}
}
