package mesh_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/chain/chaintest"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/table"
)

// The flood tests run real meshes over QUIC on loopback, real tables and a
// real chain file with the daemon's Recorder (chaintest), and move the
// recorder's clock across windows instead of waiting for them.

// bound is the Recorder's documented bound of entries per window with
// the default options.
const bound = chain.DefaultRecordMaxKeys*(chain.DefaultRecordsPerKey+1) + 1

// refusingTable is a receiving node's real table, wired as the daemon
// wires it: it admits what its mesh admits and hands refused
// advertisements to rec.
func refusingTable(rec *chaintest.Recorded) meshtest.NewTable[mesh.AdvertTable] {
	return func(id string, admit *meshtest.Admission) mesh.AdvertTable {
		return table.New(id, table.Options{Admission: admit,
			RecordRefusal: func(sender, kind, reason string, payload any) error {
				_, err := rec.Record(chain.RecordKey{Sender: sender, Kind: kind, Reason: reason}, table.AuditSource, payload)
				return err
			}})
	}
}

// floodTable is a sending node's table that advertises ads to every peer
// and sends a round whenever wake is poked.
type floodTable struct {
	ads  []table.Advertisement
	wake chan struct{}
}

func (f *floodTable) Advertisements(time.Time) []table.Advertisement { return f.ads }
func (f *floodTable) MeshPeerAllowed(string, string) bool            { return true }
func (f *floodTable) Subscribe() (<-chan struct{}, func())           { return f.wake, func() {} }
func (f *floodTable) IngestAdvertisement(string, table.Advertisement) bool {
	return false
}
func (f *floodTable) RetainRemote(string, []string)        {}
func (f *floodTable) RemoveNode(string)                    {}
func (f *floodTable) KeepForRestart(string, time.Duration) {}
func (f *floodTable) Linked(string)                        {}
func (f *floodTable) RemoveLinking(string) bool            { return false }

func (f *floodTable) poke() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// TestAdvertFloodForAnotherNode: an admitted peer sending advertisements
// for a node id that is not its own (MaxAdvertsPerFrame per frame, about
// 6,000 in all, as in the report) leaves two entries per window for its
// key, whose summary counts the rest, and an honest append during the
// flood lands.
func TestAdvertFloodForAnotherNode(t *testing.T) {
	rec := chaintest.New(t, chain.RecorderOptions{})
	recv := meshtest.NewNode(t, "receiver", meshtest.Options{}, refusingTable(rec))
	ft := &floodTable{wake: make(chan struct{}, 1)}
	for i := range mesh.MaxAdvertsPerFrame {
		ft.ads = append(ft.ads, table.Advertisement{Name: fmt.Sprintf("%srole%d", table.ServicePrefix, i),
			NodeID: "n-victim", Methods: []string{"chat.completions"}, Version: "1"})
	}
	sender := meshtest.NewNode(t, "sender", meshtest.Options{}, func(string, *meshtest.Admission) mesh.AdvertTable { return ft })
	recv.Start()
	sender.Start()
	meshtest.Pin(t, recv, sender)

	kind := table.KindAdvertRefused
	flood := func(events int) {
		t.Helper()
		for rec.Events(kind) < events {
			before := rec.Events(kind)
			ft.poke()
			meshtest.WaitFor(t, "a round of refusals", func() bool { return rec.Events(kind) >= before+mesh.MaxAdvertsPerFrame })
		}
	}
	flood(3000)
	if _, err := rec.Chain.Append("nodeld", "node.honest", map[string]string{"during": "flood"}); err != nil {
		t.Fatalf("honest append during the flood: %v", err)
	}
	flood(6000)
	if got := rec.Tally(t, kind); got.Chained != 1 || got.Summaries != 0 {
		t.Fatalf("during the first window the chain holds %d refusals and %d summaries, want 1 and 0", got.Chained, got.Summaries)
	}

	// The flood goes on in the next window: one more entry, and the
	// first window's summary.
	rec.Advance(time.Minute)
	first := rec.Events(kind)
	flood(first + 4*mesh.MaxAdvertsPerFrame)
	rec.Advance(time.Minute)
	rec.Flush(t)

	entries := rec.Entries(t)
	got := chaintest.Count(t, entries, kind)
	if got.Chained != 2 || got.Summaries != 2 || got.Events() != uint64(rec.Events(kind)) {
		t.Errorf("after two windows: %d chained, %d summaries counting %d; want 2, 2 and %d events in all",
			got.Chained, got.Summaries, got.Suppressed, rec.Events(kind))
	}
	want := chain.RecordKey{Sender: sender.ID(), Kind: kind, Reason: table.ReasonOtherNode}
	if len(got.ByKey) != 1 || got.ByKey[want] != got.Suppressed {
		t.Errorf("summaries by key %v, want all under %+v", got.ByKey, want)
	}
	for w := range 2 {
		from := chaintest.Start.Add(time.Duration(w) * time.Minute)
		in := chaintest.Count(t, chaintest.Between(t, entries, from, from.Add(time.Minute)), kind)
		if in.Entries() > bound {
			t.Errorf("window %d: %d entries, bound %d", w, in.Entries(), bound)
		}
	}
	if !chaintest.Has(entries, "node.honest", "flood") {
		t.Error("the honest entry appended during the flood is not in the chain")
	}
}

// TestHonestRefusalsBackOff: a peer listed in serve_to but missing from
// the receiver's use_from is refused every advertisement (every 20 s with
// the default interval), forever. Played at 20 s per refusal over four
// hours, the receiver's chain settles at two entries an hour, and every
// refusal is accounted for.
func TestHonestRefusalsBackOff(t *testing.T) {
	rec := chaintest.New(t, chain.RecorderOptions{})
	recv := meshtest.NewNode(t, "receiver", meshtest.Options{}, refusingTable(rec))
	sender := meshtest.NewNode(t, "sender", meshtest.Options{}, func(id string, admit *meshtest.Admission) mesh.AdvertTable {
		return table.New(id, table.Options{Admission: admit})
	})
	// Fast rounds: the recorder's clock, not the mesh's, says when.
	sender.Config.AdvertInterval = 2 * time.Millisecond
	st := sender.Table.(*table.Table)
	if _, err := st.RegisterLocal(table.OriginAdopted, "chat", "http://127.0.0.1:9", "m", "openai", "llama.cpp"); err != nil {
		t.Fatal(err)
	}
	st.ExposeToMesh("chat", true)
	st.AllowMeshPeer("chat", recv.ID(), true) // serve_to: receiver; the receiver has no use_from
	recv.Start()
	sender.Start()
	rec.SetStep(20 * time.Second)
	meshtest.Pin(t, recv, sender)

	kind := table.KindAdvertRefused
	const hours = 4
	meshtest.WaitFor(t, "four hours of refusals", func() bool { return rec.Events(kind) >= hours*180 })
	sender.Stop()
	rec.SetStep(0)
	if _, err := rec.Chain.Append("nodeld", "node.honest", map[string]string{"during": "repeat"}); err != nil {
		t.Fatalf("honest append: %v", err)
	}
	rec.Advance(2 * time.Hour) // past the end of the last period
	rec.Flush(t)

	entries := rec.Entries(t)
	got := chaintest.Count(t, entries, kind)
	if got.Events() != uint64(rec.Events(kind)) {
		t.Errorf("%d refusals chained or counted, want %d", got.Events(), rec.Events(kind))
	}
	for h := 2; h < hours; h++ {
		from := chaintest.Start.Add(time.Duration(h) * time.Hour)
		if n := chaintest.Count(t, chaintest.Between(t, entries, from, from.Add(time.Hour)), kind).Entries(); n > 2 {
			t.Errorf("hour %d: %d entries, want at most 2 once backed off", h, n)
		}
	}
	// The ramp (periods of 1, 1, 2, 4, 8, 16, 32 minutes) and then hourly
	// periods: 2 entries each.
	if n := got.Entries(); n > 2*(7+hours) {
		t.Errorf("%d entries for %d refusals over %d hours, want at most %d", n, rec.Events(kind), hours, 2*(7+hours))
	}
	if !chaintest.Has(entries, "node.honest", "repeat") {
		t.Error("the honest entry is not in the chain")
	}
}

// TestHandshakeFlood: a stranger making hundreds of handshakes with keys
// the node does not admit, each from a new port, leaves one entry and one
// summary for its address; a different refusal (a configured peer whose
// key changed) in the same window is still chained, and so is an honest
// append.
func TestHandshakeFlood(t *testing.T) {
	rec := chaintest.New(t, chain.RecorderOptions{})
	a := meshtest.NewNode(t, "a", meshtest.Options{Recorder: rec}, refusingTable(rec))
	a.Start()

	strangerID := meshtest.NewIdentity(t)
	cert, err := strangerID.TLSCertificate(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: []string{mesh.ALPN}, Certificates: []tls.Certificate{cert},
		InsecureSkipVerify: true} // the test only needs the handshake refused
	const dials = 300
	kind := mesh.KindPeerRefused
	for i := range dials {
		ctx, cancel := context.WithTimeout(context.Background(), meshtest.WaitTimeout)
		// The client's side of a TLS 1.3 handshake can complete before
		// the server has checked its certificate; then the server closes
		// the connection.
		if conn, err := quic.DialAddr(ctx, a.Listen, tlsConf, nil); err == nil {
			select {
			case <-conn.Context().Done():
			case <-ctx.Done():
				t.Fatal("a stranger's connection was kept")
			}
		}
		cancel()
		meshtest.WaitFor(t, "the refusal recorded", func() bool { return rec.Events(kind) == i+1 })
	}
	if _, err := rec.Chain.Append("nodeld", "node.honest", map[string]string{"during": "handshakes"}); err != nil {
		t.Fatalf("honest append during the flood: %v", err)
	}

	// A configured peer comes with another key than the one pinned for
	// its address: refused for another reason, so chained at once. a
	// knows the address before b starts: a dial of b's before that would
	// be refused as the stranger's are (not admitted, from 127.0.0.1) and
	// counted in their summary.
	b := meshtest.NewNode(t, "b", meshtest.Options{}, func(id string, admit *meshtest.Admission) mesh.AdvertTable {
		return table.New(id, table.Options{Admission: admit})
	})
	a.Apply(mesh.PeerConfig{Name: "b", Addr: b.Listen, Key: meshtest.NewIdentity(t).PublicKeyHex(), Tier: mesh.TierPaired})
	b.Start(a.Peer())
	meshtest.WaitFor(t, "the changed key's refusal chained", func() bool {
		return chaintest.Has(rec.Entries(t), kind, mesh.RefusalKeyDiffers)
	})
	b.Stop()
	a.Stop()

	rec.Advance(time.Minute)
	rec.Flush(t)
	entries := rec.Entries(t)
	got := chaintest.Count(t, entries, kind)
	if got.Events() != uint64(rec.Events(kind)) || got.Entries() > bound {
		t.Errorf("%d entries accounting for %d refusals, want %d refusals in at most %d entries", got.Entries(), got.Events(), rec.Events(kind), bound)
	}
	// Keyed by the address without its port: one key, however many ports.
	stranger := chain.RecordKey{Class: chain.ClassSource, Sender: "127.0.0.1", Kind: kind, Reason: mesh.RefusalNotAdmitted}
	if n := got.ByKey[stranger]; n != dials-1 {
		t.Errorf("the stranger's summary counts %d refusals, want %d of %d (one chained)", n, dials-1, dials)
	}
	if !chaintest.Has(entries, "node.honest", "handshakes") {
		t.Error("the honest entry appended during the flood is not in the chain")
	}
}
