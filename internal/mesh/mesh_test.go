package mesh

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nodeld/nodeld/internal/chain"
)

func TestAdvertsResolveRemote(t *testing.T) {
	a, b := pair(t)
	a.serveChat("chat", b.id())
	// coder is exposed but not served to b: it must not be advertised.
	a.serveChat("coder", "n-someoneelse")
	b.tbl.AllowRemoteNode("chat", a.id(), true)
	b.tbl.AllowRemoteNode("coder", a.id(), true)
	waitFor(t, "chat resolving remote on b", func() bool { return b.resolvesRemote("chat", a.id()) })
	if _, ok := b.tbl.Resolve("coder"); ok {
		t.Error("coder resolves on b although a does not serve it to b")
	}
	st := b.state(a.listen)
	if st.State != StateConnected || st.ID != a.id() || st.PinnedFrom != PinnedFromConfig || st.Name != "a" {
		t.Errorf("b's status of a = %+v", st)
	}
	info, ok := b.m.Peer(a.id())
	if !ok || info.Name != "a" || info.Tier != TierPaired || !info.Key.Equal(a.ident.PublicKey()) {
		t.Errorf("Peer(a) = %+v, %v", info, ok)
	}
	if got := testutil.ToFloat64(b.m.met.streams.WithLabelValues("advert", resultOK)); got < 1 {
		t.Errorf("advert streams received by b = %v", got)
	}
}

func TestHandlerDispatch(t *testing.T) {
	a, b := newNode(t, "a"), newNode(t, "b")
	type call struct {
		peer PeerInfo
		body string
	}
	calls := make(chan call, 1)
	a.start()
	a.m.Handle(KindCtl, func(ctx context.Context, peer PeerInfo, s *Stream) {
		defer s.CloseWrite()
		_, p, err := ReadFrame(s, 1024)
		if err != nil {
			s.Reset(StreamCodeMalformed)
			return
		}
		calls <- call{peer, string(p)}
		_ = WriteFrame(s, 2, append([]byte("echo:"), p...))
	})
	b.start()
	a.apply(b.peer(true))
	waitFor(t, "b refusing a", func() bool { return a.state(b.listen).LastError != "" })
	b.apply(a.peer(true))
	waitFor(t, "link", func() bool { return linked(a, b) })

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	s, err := b.m.OpenStream(ctx, a.id(), KindCtl)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteFrame(s, 1, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	typ, got, err := ReadFrame(s, 1024)
	if err != nil || typ != 2 || string(got) != "echo:hello" {
		t.Fatalf("reply = %d %q %v", typ, got, err)
	}
	_ = s.CloseWrite()
	c := <-calls
	if c.peer.ID != b.id() || c.peer.Name != "b" || !c.peer.Key.Equal(b.ident.PublicKey()) || c.body != "hello" {
		t.Errorf("handler saw %+v", c)
	}
	if _, err := b.m.OpenStream(ctx, "n-0000000000000000", KindCtl); !errors.Is(err, ErrNoLink) {
		t.Errorf("OpenStream to an unknown node = %v, want ErrNoLink", err)
	}
	if _, err := b.m.OpenStream(ctx, a.id(), KindAdvert); err == nil {
		t.Error("OpenStream of KindAdvert succeeded")
	}
}

func TestUnadmittedKeyRefused(t *testing.T) {
	a, c := newNode(t, "a"), newNode(t, "c")
	a.start()
	var mu sync.Mutex
	handled := 0
	a.m.Handle(KindCtl, func(ctx context.Context, peer PeerInfo, s *Stream) {
		mu.Lock()
		handled++
		mu.Unlock()
		s.Reset(StreamCodeCancelled)
	})
	c.start()
	c.apply(a.peer(true)) // c trusts a; a does not know c
	waitFor(t, "a refusing c", func() bool {
		return testutil.ToFloat64(a.m.met.handshakes.WithLabelValues(handshakeRefused)) >= 1 &&
			len(a.audit.ofKind(KindPeerRefused)) >= 1
	})
	ev := a.audit.ofKind(KindPeerRefused)[0].(RefusedEvent)
	if ev.Key != c.ident.PublicKeyHex() || ev.Addr != c.listen || ev.Direction != "inbound" || ev.Reason != RefusalNotAdmitted {
		t.Errorf("refusal record = %+v", ev)
	}
	// Keyed by the remote IP without its port (a caller picks a new one
	// for every attempt) and the fixed reason, never by the key it shows.
	want := chain.RecordKey{Class: chain.ClassSource, Sender: "127.0.0.1", Kind: KindPeerRefused, Reason: RefusalNotAdmitted}
	if got := a.audit.recordKeys()[0]; got != want {
		t.Errorf("refusal key = %+v, want %+v", got, want)
	}
	if a.m.IsAdmitted(c.id()) {
		t.Error("c admitted")
	}
	waitFor(t, "c seeing the refusal", func() bool { return c.state(a.listen).LastError != "" })
	if st := c.state(a.listen); st.State == StateConnected {
		t.Errorf("c's status of a = %+v", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := c.m.OpenStream(ctx, a.id(), KindCtl); !errors.Is(err, ErrNoLink) {
		t.Errorf("OpenStream over a refused link = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if handled != 0 {
		t.Errorf("%d streams reached a handler", handled)
	}
}

func TestTOFUPinSurvivesRestartAndRefusesNewKey(t *testing.T) {
	a, b := newNode(t, "a"), newNode(t, "b")
	a.start()
	b.start()
	a.apply(b.peer(false)) // trust on first use
	changedBefore := a.peersChanged.Load()
	b.apply(a.peer(true))
	waitFor(t, "a pinning b", func() bool { return a.m.IsAdmitted(b.id()) && a.link(b.id()) != nil })
	waitFor(t, "OnPeersChanged after the pin", func() bool { return a.peersChanged.Load() > changedBefore })
	if st := a.state(b.listen); st.PinnedFrom != PinnedFromTOFU || st.ID != b.id() {
		t.Errorf("a's status of b = %+v", st)
	}
	if len(a.audit.ofKind(KindPeerPinned)) != 1 {
		t.Errorf("pin records = %v", a.audit.ofKind(KindPeerPinned))
	}
	path := filepath.Join(a.dir, KnownPeersFile)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("known peers mode %v", fi.Mode().Perm())
	}
	data, _ := os.ReadFile(path)
	if !strings.Contains(string(data), b.ident.PublicKeyHex()) {
		t.Errorf("known peers lack b's key: %s", data)
	}

	a.stop()
	b.stop()
	bAddr := b.listen

	// a restarted: the pin holds before any contact.
	a.start(PeerConfig{Name: "b", Addr: bAddr})
	if !a.m.IsAdmitted(b.id()) {
		t.Fatal("pin lost across restart")
	}
	if id, ok := a.m.ResolveRef("b"); !ok || id != b.id() {
		t.Errorf("ResolveRef(b) = %q, %v", id, ok)
	}

	// A new key at b's address is refused and reported.
	b2 := newNode(t, "b2")
	b2.listen = bAddr
	b2.start()
	b2.apply(a.peer(true))
	waitFor(t, "a reporting b2's key", func() bool {
		st := a.state(bAddr)
		return st.RefusedKey == b2.ident.PublicKeyHex() && st.State == StateRefused
	})
	if a.m.IsAdmitted(b2.id()) || !a.m.IsAdmitted(b.id()) {
		t.Error("admission changed by a refused key")
	}
	if a.link(b.id()) != nil {
		t.Error("a linked to the new key")
	}
}

func TestSimultaneousDialSettlesOnOneLink(t *testing.T) {
	a, b := newNode(t, "a"), newNode(t, "b")
	for _, n := range []*testNode{a, b} {
		n.start()
		n.m.Handle(KindCtl, func(ctx context.Context, peer PeerInfo, s *Stream) {
			_, _ = io.Copy(s, s)
			_ = s.CloseWrite()
		})
	}
	go0 := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { <-go0; a.apply(b.peer(true)) })
	wg.Go(func() { <-go0; b.apply(a.peer(true)) })
	close(go0)
	wg.Wait()
	waitFor(t, "both sides agreeing on one link", func() bool { return linked(a, b) })
	for _, dir := range []struct{ from, to *testNode }{{a, b}, {b, a}} {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		s, err := dir.from.m.OpenStream(ctx, dir.to.id(), KindCtl)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		_, _ = s.Write([]byte("ping"))
		_ = s.CloseWrite()
		got, err := io.ReadAll(s)
		cancel()
		if err != nil || string(got) != "ping" {
			t.Errorf("%s -> %s echo = %q, %v", dir.from.name, dir.to.name, got, err)
		}
	}
}

func TestLinkLossRemovesNodeAndReconnects(t *testing.T) {
	a, b := pair(t)
	a.serveChat("chat", b.id())
	b.tbl.AllowRemoteNode("chat", a.id(), true)
	waitFor(t, "chat remote on b", func() bool { return b.resolvesRemote("chat", a.id()) })

	a.stop()
	waitFor(t, "b dropping a's adverts", func() bool {
		_, ok := b.tbl.Resolve("chat")
		return !ok
	})
	if st := b.state(a.listen); st.State == StateConnected {
		t.Errorf("b's status of a after loss = %+v", st)
	}

	a.start(b.peer(true))
	waitFor(t, "chat remote on b again", func() bool { return b.resolvesRemote("chat", a.id()) })
	if st := b.state(a.listen); st.State != StateConnected {
		t.Errorf("b's status of a after reconnect = %+v", st)
	}
}

func TestApplyConfigRemovesPeerAtOnce(t *testing.T) {
	a, b := pair(t)
	a.serveChat("chat", b.id())
	b.tbl.AllowRemoteNode("chat", a.id(), true)
	waitFor(t, "chat remote on b", func() bool { return b.resolvesRemote("chat", a.id()) })

	b.apply()
	if b.m.IsAdmitted(a.id()) {
		t.Error("a still admitted")
	}
	if _, ok := b.tbl.Resolve("chat"); ok {
		t.Error("chat still resolves on b")
	}
	if _, ok := b.m.ResolveRef("a"); ok {
		t.Error("ResolveRef(a) after removal")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := b.m.OpenStream(ctx, a.id(), KindCtl); !errors.Is(err, ErrNoLink) {
		t.Errorf("OpenStream = %v, want ErrNoLink", err)
	}
	if len(b.m.Status()) != 0 {
		t.Errorf("status lists %v", b.m.Status())
	}
	waitFor(t, "a losing the link", func() bool { return a.link(b.id()) == nil })
	if err := b.m.ApplyConfig(Config{Listen: "127.0.0.1:1"}); !errors.Is(err, ErrListenChanged) {
		t.Errorf("listen change = %v", err)
	}
}

// TestPrepareChangesNothing: a refused config (this node's own key as a
// peer, a new listen address) and a prepared one not yet committed leave
// the peers, their links and the config as they were.
func TestPrepareChangesNothing(t *testing.T) {
	a, b := pair(t)
	waitFor(t, "a linked to b", func() bool { return a.link(b.id()) != nil })
	self := a.peer(true)
	self.Addr = "127.0.0.1:9"
	if _, err := a.m.Prepare(Config{Listen: a.m.cfg.Listen, Peers: []PeerConfig{b.peer(true), self}}); err == nil {
		t.Error("Prepare accepted this node's own key as a peer")
	}
	if _, err := a.m.Prepare(Config{Listen: "127.0.0.1:1", Peers: []PeerConfig{b.peer(true)}}); !errors.Is(err, ErrListenChanged) {
		t.Errorf("Prepare of a new listen address = %v, want ErrListenChanged", err)
	}
	commit, err := a.m.Prepare(Config{Listen: a.m.cfg.Listen, Keepalive: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if st := a.state(b.listen); st.State != StateConnected || len(a.m.Status()) != 1 {
		t.Errorf("status before commit = %+v, want b alone, connected", a.m.Status())
	}
	if !a.m.IsAdmitted(b.id()) || a.link(b.id()) == nil {
		t.Fatal("b lost before commit")
	}
	commit.Commit()
	if a.m.IsAdmitted(b.id()) || len(a.m.Status()) != 0 {
		t.Errorf("b still configured after the commit: %+v", a.m.Status())
	}
}

func TestBadStreamsResetOnlyThatStream(t *testing.T) {
	a, b := pair(t)
	a.m.Handle(KindCtl, func(ctx context.Context, peer PeerInfo, s *Stream) {
		_, _ = io.Copy(s, s)
		_ = s.CloseWrite()
	})
	hugeHeader := make([]byte, 1+FrameHeaderSize)
	hugeHeader[0] = byte(KindAdvert)
	hugeHeader[1] = byte(FrameAdverts)
	binary.BigEndian.PutUint32(hugeHeader[2:], 0xFFFFFFFF)
	advert := func(payload string) []byte {
		var sb strings.Builder
		sb.WriteByte(byte(KindAdvert))
		_ = WriteFrame(&sb, FrameAdverts, []byte(payload))
		return []byte(sb.String())
	}
	tooMany := "[" + strings.TrimSuffix(strings.Repeat("{},", MaxAdvertsPerFrame+1), ",") + "]"
	tests := []struct {
		name   string
		give   []byte
		code   StreamCode
		kind   string
		result string
	}{
		{"unknown kind", []byte{0x7f, 1, 2, 3}, StreamCodeUnknownKind, "unknown", resultUnknownKind},
		{"no handler", []byte{byte(KindArtifact)}, StreamCodeNoHandler, "artifact", resultNoHandler},
		{"oversized frame", hugeHeader, StreamCodeTooLarge, "advert", resultTooLarge},
		{"bad json", advert(`{"name":`), StreamCodeMalformed, "advert", resultMalformed},
		{"not a list", advert(`{}`), StreamCodeMalformed, "advert", resultMalformed},
		{"unknown field", advert(`[{"bogus":1}]`), StreamCodeMalformed, "advert", resultMalformed},
		{"too many adverts", advert(tooMany), StreamCodeTooLarge, "advert", resultTooLarge},
		{"truncated frame", advert(`[]`)[:4], StreamCodeMalformed, "advert", resultMalformed},
	}
	conn := b.link(a.id()).conn
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			counter := a.m.met.streams.WithLabelValues(tt.kind, tt.result)
			before := testutil.ToFloat64(counter)
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			qs, err := conn.OpenStreamSync(ctx)
			if err != nil {
				t.Fatal(err)
			}
			s := newStream(qs)
			_, _ = s.Write(tt.give)
			_ = s.CloseWrite()
			_ = s.SetReadDeadline(time.Now().Add(waitTimeout))
			_, err = io.ReadAll(s)
			if code, ok := ResetCode(err); !ok || code != tt.code {
				t.Fatalf("read = %v, want the peer's reset %#x", err, tt.code)
			}
			waitFor(t, "counted", func() bool { return testutil.ToFloat64(counter) == before+1 })
		})
	}
	// The link and the node still serve.
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	s, err := b.m.OpenStream(ctx, a.id(), KindCtl)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = s.Write([]byte("still"))
	_ = s.CloseWrite()
	if got, err := io.ReadAll(s); err != nil || string(got) != "still" {
		t.Errorf("echo after bad streams = %q, %v", got, err)
	}
	if b.link(a.id()) == nil || b.link(a.id()).conn != conn {
		t.Error("link replaced or lost")
	}
}

func TestMetricsPresent(t *testing.T) {
	a, b := pair(t)
	mfs, err := a.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	for _, name := range []string{"nodeld_mesh_peers", "nodeld_mesh_handshakes_total", "nodeld_mesh_streams_total",
		"nodeld_mesh_bytes_total", "nodeld_mesh_refusals_suppressed_total"} {
		if !have[name] {
			t.Errorf("metric %s missing", name)
		}
	}
	if got := testutil.ToFloat64(a.m.met.peers.WithLabelValues(StateConnected)); got != 1 {
		t.Errorf("connected peers = %v", got)
	}
	rx, tx := a.m.met.bytes.totals()
	if rx == 0 || tx == 0 {
		t.Errorf("bytes not counted: rx %d tx %d", rx, tx)
	}
	// Ended connections keep counting: stop b, and a's totals never drop.
	b.stop()
	waitFor(t, "a losing b", func() bool { return a.link(b.id()) == nil })
	rx2, tx2 := a.m.met.bytes.totals()
	if rx2 < rx || tx2 < tx {
		t.Errorf("byte totals went down after the link ended: rx %d -> %d, tx %d -> %d", rx, rx2, tx, tx2)
	}
	if n := len(a.m.met.bytes.live); n != 0 {
		t.Errorf("%d connections still tracked after the link ended", n)
	}
}
