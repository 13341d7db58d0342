package mesh_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/chain/chaintest"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
)

// dialFrom makes one handshake with id's key from a socket bound to from
// (port 0 picks one) to the mesh at to, and returns once the mesh has
// closed the connection or the handshake failed.
func dialFrom(t *testing.T, id *identity.Identity, from netip.AddrPort, to string) {
	t.Helper()
	cert, err := id.TLSCertificate(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: []string{mesh.ALPN}, Certificates: []tls.Certificate{cert},
		InsecureSkipVerify: true} // the test only needs the handshake refused
	uc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(from))
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: uc}
	defer func() { _ = tr.Close(); _ = uc.Close() }()
	raddr, err := net.ResolveUDPAddr("udp", to)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), meshtest.WaitTimeout)
	defer cancel()
	// The client's side of a TLS 1.3 handshake can complete before the
	// server has checked its certificate; then the server closes the
	// connection.
	if conn, err := tr.Dial(ctx, raddr, tlsConf, nil); err == nil {
		select {
		case <-conn.Context().Done():
		case <-ctx.Done():
			t.Fatal("a refused connection was kept")
		}
	}
}

// TestHandshakeFloodFromManyAddresses: strangers make handshakes from
// 300 loopback addresses, each new, more than the recorder tracks of any
// class. Then an impostor comes from the address of a configured peer
// with another key than the pinned one: its refusal is chained at once,
// with its reason, and logged; the flood is summed up in its class's
// overflow with its reason and count.
func TestHandshakeFloodFromManyAddresses(t *testing.T) {
	rec := chaintest.New(t, chain.RecorderOptions{})
	a := meshtest.NewNode(t, "a", meshtest.Options{Recorder: rec}, refusingTable(rec))
	pinned := netip.MustParseAddrPort(meshtest.FreeUDP(t))
	a.Start(mesh.PeerConfig{Name: "b", Addr: pinned.String(), Key: meshtest.NewIdentity(t).PublicKeyHex(), Tier: mesh.TierPaired})

	const dials = 300
	kind := mesh.KindPeerRefused
	stranger := meshtest.NewIdentity(t)
	for i := range dials {
		from := netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, byte(1 + i/250), byte(1 + i%250)}), 0)
		dialFrom(t, stranger, from, a.Listen)
		meshtest.WaitFor(t, "the refusal recorded", func() bool { return rec.Events(kind) == i+1 })
	}

	dialFrom(t, meshtest.NewIdentity(t), pinned, a.Listen)
	meshtest.WaitFor(t, "the impostor's refusal recorded", func() bool { return rec.Events(kind) == dials+1 })
	entries := rec.Entries(t)
	if !chaintest.Has(entries, kind, mesh.RefusalKeyDiffers) {
		t.Error("the impostor's refusal is not in the chain")
	}

	rec.Advance(time.Minute)
	rec.Flush(t)
	entries = rec.Entries(t)
	got := chaintest.Count(t, entries, kind)
	var overflow []chain.SuppressedEvent
	for _, e := range entries {
		if e.Kind != chain.OverflowKind {
			continue
		}
		var ev chain.SuppressedEvent
		if err := json.Unmarshal(e.Payload, &ev); err != nil {
			t.Fatal(err)
		}
		overflow = append(overflow, ev)
	}
	want := uint64(dials - chain.DefaultRecordMaxSourceKeys)
	if len(overflow) != 1 || overflow[0].Class != chain.ClassSource || overflow[0].Suppressed != want ||
		len(overflow[0].Reasons) != 1 || overflow[0].Reasons[0] != (chain.OverflowReason{Kind: kind, Reason: mesh.RefusalNotAdmitted, Suppressed: want}) {
		t.Errorf("overflow summaries %+v, want one of class source counting %d %q", overflow, want, mesh.RefusalNotAdmitted)
	}
	if got.Chained != chain.DefaultRecordMaxSourceKeys+1 {
		t.Errorf("%d refusals chained, want one per tracked source and the impostor's: %d", got.Chained, chain.DefaultRecordMaxSourceKeys+1)
	}
	if got.Events()+want != dials+1 {
		t.Errorf("%d refusals chained or summed up by key and %d in the overflow, want %d", got.Events(), want, dials+1)
	}
}
