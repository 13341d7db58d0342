package mesh

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodeld/nodeld/internal/table"
)

func TestBackoffDelay(t *testing.T) {
	tests := []struct {
		name    string
		attempt int
		r       float64
		want    time.Duration
	}{
		{"first, no jitter", 0, 0, 250 * time.Millisecond},
		{"first, most jitter", 0, 0.999999, 499999750 * time.Nanosecond},
		{"second", 1, 0.5, 750 * time.Millisecond},
		{"capped", 10, 0, 15 * time.Second},
		{"capped far out", 1000, 0.5, 22500 * time.Millisecond},
		{"bad rand", 0, 7, 250 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := backoffDelay(tt.attempt, tt.r); got != tt.want {
				t.Errorf("backoffDelay(%d, %v) = %v, want %v", tt.attempt, tt.r, got, tt.want)
			}
		})
	}
}

func TestPreferNew(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name               string
		curDialer, newDial string
		age                time.Duration
		want               bool
	}{
		{"simultaneous, new dialed by low", "n-b", "n-a", time.Second, true},
		{"simultaneous, current dialed by low", "n-a", "n-b", time.Second, false},
		{"same dialer, newer wins", "n-b", "n-b", time.Second, true},
		{"old link, peer redialed", "n-a", "n-b", DuplicateSettleWindow + time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := preferNew(tt.curDialer, t0, tt.newDial, t0.Add(tt.age), "n-a")
			if got != tt.want {
				t.Errorf("preferNew = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	self := newIdentity(t)
	other := newIdentity(t)
	tests := []struct {
		name string
		give Config
		want []string // substrings of the error, all reported at once
	}{
		{"ok", Config{Listen: "127.0.0.1:7400", Peers: []PeerConfig{{Name: "b", Addr: "10.0.0.2:7400", Key: other.PublicKeyHex(), Tier: TierPinned}, {Addr: "h:7400"}}}, nil},
		{"bad listen", Config{Listen: "nope"}, []string{"mesh.listen"}},
		{"everything wrong", Config{Listen: "127.0.0.1:7400", Keepalive: -1, Peers: []PeerConfig{
			{Name: "b", Addr: "x", Key: "zz", Tier: "gold"},
			{Name: "b", Addr: "10.0.0.2:1", Key: self.PublicKeyHex()},
			{Addr: "10.0.0.2:1", Key: other.PublicKeyHex()},
			{Addr: "10.0.0.3:1", Key: other.PublicKeyHex()},
		}}, []string{"keepalive", "peers[0].addr", "peers[0].key", "peers[0].tier", "peers[1].name", "own key", "peers[2].addr", "peers[3].key repeats"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.give.Validate(self.PublicKey())
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate = %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate = nil")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
		})
	}
}

func TestKnownPeersRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, KnownPeersFile)
	got, err := loadKnownPeers(path)
	if err != nil || len(got) != 0 {
		t.Fatalf("missing file = %v, %v", got, err)
	}
	k := newIdentity(t)
	want := map[string]knownPeer{"10.0.0.2:7400": {Addr: "10.0.0.2:7400", Key: k.PublicKeyHex(), ID: k.ID(), PinnedAt: time.Unix(5, 0).UTC()}}
	if err := writeKnownPeers(path, want); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("stat = %v, %v", fi, err)
	}
	got, err = loadKnownPeers(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temp files left: %v", entries)
	}
	for _, bad := range []string{`{"version":2,"peers":[]}`, `{"version":1,"peers":[{"addr":"a","key":"zz"}]}`, `{"version":1,"x":1}`,
		// Trailing data, even a closing bracket, is damage (json.Decoder's
		// More would not see a stray '}' or ']').
		`{"version":1,"peers":[]}}`, `{"version":1,"peers":[]}]`, `{"version":1,"peers":[]} {}`,
		// Two pins for one address leave its key ambiguous.
		`{"version":1,"peers":[{"addr":"a:1","key":"` + strings.Repeat("ab", 32) + `"},{"addr":"a:1","key":"` + strings.Repeat("cd", 32) + `"}]}`,
	} {
		if _, err := decodeKnownPeers([]byte(bad)); err == nil {
			t.Errorf("decodeKnownPeers(%s) = nil error", bad)
		}
	}
}

func TestNewPinsLoadedFromDisk(t *testing.T) {
	self, peer := newIdentity(t), newIdentity(t)
	dir := t.TempDir()
	if err := writeKnownPeers(filepath.Join(dir, KnownPeersFile), map[string]knownPeer{
		"10.0.0.2:7400": {Addr: "10.0.0.2:7400", Key: peer.PublicKeyHex()},
	}); err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Listen: "127.0.0.1:0", Peers: []PeerConfig{{Name: "p", Addr: "10.0.0.2:7400"}}},
		Deps{Identity: self, DataDir: dir, Table: table.New(self.ID(), table.Options{}), PeerEvents: ignoreEvents})
	if err != nil {
		t.Fatal(err)
	}
	if !m.IsAdmitted(peer.ID()) {
		t.Error("pinned peer not admitted")
	}
	if id, ok := m.ResolveRef("p"); !ok || id != peer.ID() {
		t.Errorf("ResolveRef(p) = %q, %v", id, ok)
	}
	want := []PeerStatus{{Name: "p", ID: peer.ID(), Addr: "10.0.0.2:7400", State: StateConnecting, Key: peer.PublicKeyHex(), PinnedFrom: PinnedFromTOFU}}
	if diff := cmp.Diff(want, m.Status()); diff != "" {
		t.Errorf("Status (-want +got):\n%s", diff)
	}
	if _, err := New(Config{Listen: "127.0.0.1:0", Peers: []PeerConfig{{Addr: "x:1", Key: self.PublicKeyHex()}}},
		Deps{Identity: self, DataDir: dir, Table: table.New(self.ID(), table.Options{}), PeerEvents: ignoreEvents}); err == nil {
		t.Error("New accepted a peer with this node's key")
	}
}

func TestAdvertCodec(t *testing.T) {
	ads := []table.Advertisement{{Name: "infer.chat", NodeID: "n-1", Methods: []string{"models"}, Version: "1", Metadata: map[string]string{"role": "chat"}, LastUpdated: 7}}
	p, err := encodeAdverts(ads)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeAdverts(p)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ads, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	tests := []struct {
		name string
		give string
		want error
	}{
		{"empty list", `[]`, nil},
		{"trailing data", `[] []`, errMalformedAdverts},
		{"trailing junk", `[] x`, errMalformedAdverts},
		{"object", `{}`, errMalformedAdverts},
		{"unknown field", `[{"x":1}]`, errMalformedAdverts},
		{"too many", "[" + strings.TrimSuffix(strings.Repeat("{},", MaxAdvertsPerFrame+1), ",") + "]", errTooManyAdverts},
		{"empty", ``, errMalformedAdverts},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := decodeAdverts([]byte(tt.give)); !errors.Is(err, tt.want) {
				t.Errorf("decodeAdverts(%.20q) = %v, want %v", tt.give, err, tt.want)
			}
		})
	}
	if _, err := encodeAdverts(make([]table.Advertisement, MaxAdvertsPerFrame+1)); !errors.Is(err, errTooManyAdverts) {
		t.Errorf("encode over the bound = %v", err)
	}
}

func TestHandlePanicsOnMisuse(t *testing.T) {
	self := newIdentity(t)
	m, err := New(Config{Listen: "127.0.0.1:0"}, Deps{Identity: self, DataDir: t.TempDir(), Table: table.New(self.ID(), table.Options{}), PeerEvents: ignoreEvents})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []StreamKind{KindAdvert, 0, 99} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Handle(%d) did not panic", k)
				}
			}()
			m.Handle(k, func(ctx context.Context, peer PeerInfo, s *Stream) {})
		}()
	}
}

func TestNewRefusesNoTable(t *testing.T) {
	self := newIdentity(t)
	// Without a table there would be no serving policy to filter
	// advertisements with: the mesh refuses rather than send them all.
	if _, err := New(Config{Listen: "127.0.0.1:0"}, Deps{Identity: self, DataDir: t.TempDir()}); err == nil {
		t.Error("New accepted deps without a table")
	}
}

// TestAdvertsForDefaultDeny: a peer gets the advertisement of a role only
// when the role's serving allowlist names it, by node id or by configured
// name; a role served to nobody goes to nobody. The extra advertisements
// (the workload host's) go to every peer.
func TestAdvertsForDefaultDeny(t *testing.T) {
	self := newIdentity(t)
	tbl := table.New(self.ID(), table.Options{})
	host := table.Advertisement{Name: "workload-host", NodeID: self.ID()}
	m, err := New(Config{Listen: "127.0.0.1:0"}, Deps{Identity: self, DataDir: t.TempDir(), Table: tbl, PeerEvents: tbl.ApplyPeerEvent,
		ExtraAdverts: func() []table.Advertisement { return []table.Advertisement{host} }})
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{"chat", "coder", "embed"} {
		if _, err := tbl.RegisterLocal(table.OriginAdopted, role, "http://127.0.0.1:8080", "m", "openai", "openai"); err != nil {
			t.Fatal(err)
		}
		tbl.ExposeToMesh(role, true)
	}
	tbl.AllowMeshPeer("chat", "n-00000000000000aa", true) // by id
	tbl.AllowMeshPeer("coder", "b", true)                 // by configured name
	// embed is exposed but served to nobody.
	tests := []struct {
		name, peerID, peerName string
		want                   []string
	}{
		{"allowed by id", "n-00000000000000aa", "a", []string{"infer.chat", "workload-host"}},
		{"allowed by name", "n-00000000000000bb", "b", []string{"infer.coder", "workload-host"}},
		{"name not configured", "n-00000000000000bb", "", []string{"workload-host"}},
		{"not on any allowlist", "n-00000000000000cc", "c", []string{"workload-host"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, ad := range m.adverts.advertsFor(tt.peerID, tt.peerName) {
				got = append(got, ad.Name)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("advertsFor(%s, %q) (-want +got):\n%s", tt.peerID, tt.peerName, diff)
			}
		})
	}
}

func FuzzDecodeAdverts(f *testing.F) {
	f.Add([]byte(`[]`))
	f.Add([]byte(`[{"name":"infer.chat","node_id":"n-1","methods":["models"],"version":"1","metadata":{"role":"chat"},"last_updated":1}]`))
	f.Add([]byte(`[{}, {}] `))
	f.Add([]byte(`[{"metadata":{"a":"b"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ads, err := decodeAdverts(data)
		if err != nil {
			return
		}
		if len(ads) > MaxAdvertsPerFrame {
			t.Fatalf("%d advertisements decoded", len(ads))
		}
		p, err := encodeAdverts(ads)
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeAdverts(p)
		if err != nil || len(again) != len(ads) {
			t.Fatalf("re-decode: %d, %v", len(again), err)
		}
	})
}

func FuzzReadKind(f *testing.F) {
	f.Add([]byte{byte(KindAdvert)})
	f.Add([]byte{byte(KindInfer), 1, 2})
	f.Add([]byte{0x7f})
	f.Add([]byte{})
	f.Add([]byte{byte(KindRaft), 0})
	f.Add([]byte{byte(KindRaft) + 1})
	f.Add([]byte{byte(KindOperator), 0})
	f.Add([]byte{byte(KindOperator) + 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := readKind(bytes.NewReader(data))
		switch {
		case len(data) == 0:
			if err == nil {
				t.Fatal("kind read from nothing")
			}
		case err == nil:
			if k.String() == "unknown" || byte(k) != data[0] {
				t.Fatalf("kind %d accepted from %d", k, data[0])
			}
		case !errors.Is(err, errUnknownKind):
			t.Fatalf("unexpected error %v", err)
		}
	})
}

// TestStreamKindNames pins the wire values of the kinds to their metric
// names: every value from 1 to KindOperator is a kind with a name of its own,
// and the values around them are unknown (refused by readKind).
func TestStreamKindNames(t *testing.T) {
	want := []string{"advert", "infer", "ctl", "artifact", "notice", "demand", "raft", "operator"}
	for i, name := range want {
		k := StreamKind(i + 1)
		if k.String() != name {
			t.Errorf("kind %d = %q, want %q", k, k.String(), name)
		}
		if got, err := readKind(bytes.NewReader([]byte{byte(k)})); err != nil || got != k {
			t.Errorf("readKind(%d) = %d, %v", k, got, err)
		}
	}
	if KindOperator != StreamKind(len(want)) {
		t.Errorf("KindOperator = %d, want %d", KindOperator, len(want))
	}
	for _, k := range []StreamKind{0, KindOperator + 1, 0xff} {
		if k.String() != "unknown" {
			t.Errorf("kind %d = %q, want unknown", k, k.String())
		}
		if _, err := readKind(bytes.NewReader([]byte{byte(k)})); !errors.Is(err, errUnknownKind) {
			t.Errorf("readKind(%d) = %v, want errUnknownKind", k, err)
		}
	}
}

// A configured key supersedes a first-use pin for good: taking the key out
// of the config again must not bring the old pin back (it would admit a
// key the operator replaced).
func TestConfiguredKeyDropsSupersededPin(t *testing.T) {
	self, old, replacement := newIdentity(t), newIdentity(t), newIdentity(t)
	const addr = "10.0.0.2:7400"
	pinsAt := func(dir string) map[string]knownPeer {
		t.Helper()
		pins, err := loadKnownPeers(filepath.Join(dir, KnownPeersFile))
		if err != nil {
			t.Fatal(err)
		}
		return pins
	}
	seed := func(t *testing.T) string {
		t.Helper()
		dir := t.TempDir()
		if err := writeKnownPeers(filepath.Join(dir, KnownPeersFile), map[string]knownPeer{
			addr: {Addr: addr, Key: old.PublicKeyHex(), ID: old.ID()},
		}); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	tofu := Config{Listen: "127.0.0.1:0", Peers: []PeerConfig{{Name: "p", Addr: addr}}}
	keyed := Config{Listen: "127.0.0.1:0", Peers: []PeerConfig{{Name: "p", Addr: addr, Key: replacement.PublicKeyHex()}}}

	t.Run("reload", func(t *testing.T) {
		dir := seed(t)
		m, err := New(tofu, Deps{Identity: self, DataDir: dir, Table: table.New(self.ID(), table.Options{}), PeerEvents: ignoreEvents})
		if err != nil {
			t.Fatal(err)
		}
		if !m.IsAdmitted(old.ID()) {
			t.Fatal("first-use pin not admitted before the key was configured")
		}
		if err := m.ApplyConfig(keyed); err != nil {
			t.Fatal(err)
		}
		if len(pinsAt(dir)) != 0 {
			t.Errorf("known_peers.json still holds the superseded pin: %v", pinsAt(dir))
		}
		if err := m.ApplyConfig(tofu); err != nil {
			t.Fatal(err)
		}
		if m.IsAdmitted(old.ID()) {
			t.Error("the replaced first-use key is admitted again after the configured key was removed")
		}
		st := m.Status()
		if len(st) != 1 || st[0].Key != "" || st[0].PinnedFrom != "" {
			t.Errorf("peer after removing its key = %+v, want unpinned", st)
		}
	})
	t.Run("start", func(t *testing.T) {
		dir := seed(t)
		if _, err := New(keyed, Deps{Identity: self, DataDir: dir, Table: table.New(self.ID(), table.Options{}), PeerEvents: ignoreEvents}); err != nil {
			t.Fatal(err)
		}
		if len(pinsAt(dir)) != 0 {
			t.Errorf("known_peers.json still holds the superseded pin after start: %v", pinsAt(dir))
		}
		m, err := New(tofu, Deps{Identity: self, DataDir: dir, Table: table.New(self.ID(), table.Options{}), PeerEvents: ignoreEvents})
		if err != nil {
			t.Fatal(err)
		}
		if m.IsAdmitted(old.ID()) {
			t.Error("the replaced first-use key is admitted again after a restart without the configured key")
		}
	})
}

// A metric name already taken is New's error, never a panic.
func TestNewReportsMetricConflict(t *testing.T) {
	self := newIdentity(t)
	reg := prometheus.NewRegistry()
	deps := func() Deps {
		return Deps{Identity: self, DataDir: t.TempDir(), Table: table.New(self.ID(), table.Options{}), PeerEvents: ignoreEvents, Registerer: reg}
	}
	if _, err := New(Config{Listen: "127.0.0.1:0"}, deps()); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Listen: "127.0.0.1:0"}, deps()); err == nil {
		t.Fatal("a second mesh registered on the same registry, want an error")
	}
}

// ignoreEvents is the peer events consumer of a mesh that never links.
func ignoreEvents(table.PeerEvent) {}

// A peer's lookups by id and by key follow the configuration: a peer
// added by ApplyConfig is found, one removed is not (default deny), and
// its key is refused once its address is gone.
func TestPeerLookupsFollowConfig(t *testing.T) {
	self, a, b := newIdentity(t), newIdentity(t), newIdentity(t)
	pa := PeerConfig{Name: "a", Addr: "10.0.0.2:7400", Key: a.PublicKeyHex()}
	pb := PeerConfig{Name: "b", Addr: "10.0.0.3:7400", Key: b.PublicKeyHex()}
	m, err := New(Config{Listen: "127.0.0.1:0", Peers: []PeerConfig{pa}},
		Deps{Identity: self, DataDir: t.TempDir(), Table: table.New(self.ID(), table.Options{}), PeerEvents: ignoreEvents})
	if err != nil {
		t.Fatal(err)
	}
	admitted := func() (bool, bool) { return m.IsAdmitted(a.ID()), m.IsAdmitted(b.ID()) }
	if okA, okB := admitted(); !okA || okB {
		t.Fatalf("before: admitted a %v, b %v; want true, false", okA, okB)
	}
	m.mu.Lock()
	byKeyA := m.peerByKeyLocked(a.PublicKey()) != nil
	m.mu.Unlock()
	if !byKeyA {
		t.Fatal("a not found by its key")
	}
	if err := m.ApplyConfig(Config{Listen: "127.0.0.1:0", Peers: []PeerConfig{pb}}); err != nil {
		t.Fatal(err)
	}
	if okA, okB := admitted(); okA || !okB {
		t.Fatalf("after: admitted a %v, b %v; want false, true", okA, okB)
	}
	m.mu.Lock()
	byKeyA, byKeyB := m.peerByKeyLocked(a.PublicKey()) != nil, m.peerByKeyLocked(b.PublicKey()) != nil
	m.mu.Unlock()
	if byKeyA || !byKeyB {
		t.Fatalf("by key after: a %v, b %v; want false, true", byKeyA, byKeyB)
	}
	if id, ok := m.ResolveRef("b"); !ok || id != b.ID() {
		t.Errorf("ResolveRef(b) = %q, %v", id, ok)
	}
}
