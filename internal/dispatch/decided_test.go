package dispatch

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/operator"
	"github.com/nodeld/nodeld/internal/pkg"
)

// decidedID is a decision the test "made": PlaceDecided carries it as is.
var decidedID = strings.Repeat("d", 64)

// twoHosts is a caller a with its dispatcher and two far hosts, b and c:
// a controller's first and second candidate.
type twoHosts struct {
	a, b, c *meshNode
	d       *Dispatcher
	farB    *farHost
	farC    *farHost
}

func newTwoHosts(t *testing.T) *twoHosts {
	t.Helper()
	h := &twoHosts{a: startMesh(t, "a"), b: startMesh(t, "b"), c: startMesh(t, "c")}
	h.d = newDispatcher(t, h.a.Ident, h.a.Mesh, nil)
	h.d.Register()
	h.farB = newFarHost(t, h.b, h.a.Ident.PublicKey())
	h.farC = newFarHost(t, h.c, h.a.Ident.PublicKey())
	h.a.Apply(h.b.Peer(), h.c.Peer())
	meshtest.AdmitLater(t, h.b, h.a)
	meshtest.AdmitLater(t, h.c, h.a)
	return h
}

// verifyOwn verifies dir with its own signers as anchors against rev.
func verifyOwn(t *testing.T, d *Dispatcher, dir string, rev *pkg.Revocations) VerifiedPackage {
	t.Helper()
	anchors, err := ownSigners(dir)
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.VerifyPackage(callCtx(t), dir, anchors, rev)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func openRevocations(t *testing.T) *pkg.Revocations {
	t.Helper()
	rev, err := pkg.OpenRevocations(filepath.Join(t.TempDir(), pkg.RevocationsFile), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// The same decision falls through from a first candidate to the next at
// once: the offer is keyed by decision and target, the first target's is
// withdrawn when its call ends, and the next is served while the first
// is refused.
func TestPlaceDecidedFallsThroughAtOnce(t *testing.T) {
	h := newTwoHosts(t)
	data := []byte("#!/bin/sh\necho hi\n")
	dir := makePackage(t, map[string][]byte{"bin/echo": data})
	p := verifyOwn(t, h.d, dir, openRevocations(t))
	fetch := req("bin/echo")

	var (
		mu       sync.Mutex
		problems []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		problems = append(problems, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	// b fetches (it is offered while its call runs), then refuses.
	h.farB.set(func(ctx context.Context, r ctl.Request) (any, *ctl.Refusal) {
		if r.DecisionID != decidedID {
			fail("b got decision %q", r.DecisionID)
		}
		if got, err := fetchOverMesh(ctx, h.b, h.a.ID(), fetch); err != nil || got.refusal != nil || string(got.data) != string(data) {
			fail("b's fetch during its call: %v %+v", err, got.refusal)
		}
		return nil, ctl.NewRefusal(ctl.CodeAdmission, "not enough memory")
	})
	// c is served the same decision, and b no longer is.
	h.farC.set(func(ctx context.Context, r ctl.Request) (any, *ctl.Refusal) {
		if got, err := fetchOverMesh(ctx, h.c, h.a.ID(), fetch); err != nil || got.refusal != nil || string(got.data) != string(data) {
			fail("c's fetch: %v %+v", err, got.refusal)
		}
		if got, err := fetchOverMesh(ctx, h.b, h.a.ID(), fetch); err != nil || got.refusal == nil || got.refusal.Code != ctl.ArtifactNotOffered {
			fail("b's fetch during c's call: %v %+v, want not_offered", err, got.refusal)
		}
		return ctl.PlaceResult{InstanceID: "echo-1", Package: "echo", Variant: "default",
			Status: ctl.InstanceState{State: ctl.StateRunning}, Node: h.c.ID()}, nil
	})

	_, err := h.d.PlaceDecided(callCtx(t), h.b.ID(), p, "default", ctl.InstanceConfig{}, true, decidedID)
	if ce, ok := errors.AsType[*ctl.CallError](err); !ok || ce.Class != ctl.ClassRefused {
		t.Fatalf("first candidate: err = %v, want refused", err)
	}
	// Withdrawn when b's call ended: b cannot fetch and load later.
	if got, err := fetchOverMesh(callCtx(t), h.b, h.a.ID(), fetch); err != nil || got.refusal == nil || got.refusal.Code != ctl.ArtifactNotOffered {
		t.Fatalf("b's fetch after its call: %v %+v, want not_offered", err, got.refusal)
	}
	ans, err := h.d.PlaceDecided(callCtx(t), h.c.ID(), p, "default", ctl.InstanceConfig{}, true, decidedID)
	if err != nil {
		t.Fatalf("next candidate: %v", err)
	}
	if ans.Request.DecisionID != decidedID || ans.Response.Responder != h.c.ID() {
		t.Fatalf("answer for decision %q from %s", ans.Request.DecisionID, ans.Response.Responder)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Fatalf("hosts saw:\n%s", strings.Join(problems, "\n"))
	}
	if n := h.d.offers.len(); n != 0 {
		t.Fatalf("%d offers left after the calls", n)
	}
	// The caller's decision is not chained again; each outcome is, with it.
	var outcomes []string
	for _, e := range chainEntries(t, h.d) {
		switch e["kind"] {
		case KindDecision:
			t.Errorf("PlaceDecided chained a decision of its own: %v", e["payload"])
		case KindOutcome:
			p := e["payload"].(map[string]any)
			outcomes = append(outcomes, fmt.Sprint(p["decision_id"] == decidedID, " ", p["node"], " ", p["outcome"]))
		}
	}
	want := []string{fmt.Sprint(true, " ", h.b.ID(), " refused"), fmt.Sprint(true, " ", h.c.ID(), " ok")}
	if diff := cmp.Diff(want, outcomes); diff != "" {
		t.Fatalf("chained outcomes (-want +got):\n%s", diff)
	}
}

func req(path string) ctl.FetchRequest {
	return ctl.FetchRequest{V: 1, DecisionID: decidedID, Path: path}
}

// countHashes makes d count its full verifications.
func countHashes(d *Dispatcher) *atomic.Int32 {
	var n atomic.Int32
	d.hashPackage = func(ctx context.Context, dir string, anchors pkg.Anchors, rev *pkg.Revocations) (*pkg.Verified, error) {
		n.Add(1)
		return pkg.VerifyDirContext(ctx, dir, anchors, rev)
	}
	return &n
}

// A package is hashed once per manifest hash: verifying it again, and
// placing it again and again, hashes nothing; a listed file touched since,
// or the same manifest in another directory, is hashed again.
func TestVerifyPackageHashesOnce(t *testing.T) {
	ident := meshtest.NewIdentity(t)
	var places atomic.Int32
	local := newLocalHost(t, ident, func(ctx context.Context, r ctl.Request) (any, *ctl.Refusal) {
		places.Add(1)
		return ctl.PlaceResult{InstanceID: "echo-1", Package: "echo", Variant: "default",
			Status: ctl.InstanceState{State: ctl.StateLoaded}, Node: ident.ID()}, nil
	})
	d := newDispatcher(t, ident, nil, local)
	hashes := countHashes(d)
	dir := makePackage(t, map[string][]byte{"bin/echo": []byte("x"), "model.bin": randomBytes(4096)})
	rev := openRevocations(t)

	p := verifyOwn(t, d, dir, rev)
	if n := hashes.Load(); n != 1 {
		t.Fatalf("%d hashes of a new package, want 1", n)
	}
	again := verifyOwn(t, d, dir, rev)
	if again.ManifestHash() != p.ManifestHash() || again.Dir() != dir {
		t.Fatalf("second verification: %s in %s", again.ManifestHash(), again.Dir())
	}
	for range 3 {
		if _, err := d.PlaceDecided(callCtx(t), config.SelfRef, again, "default", ctl.InstanceConfig{}, false, decidedID); err != nil {
			t.Fatal(err)
		}
	}
	if n, placed := hashes.Load(), places.Load(); n != 1 || placed != 3 {
		t.Fatalf("%d hashes for 3 places (%d placed), want 1", n, placed)
	}

	// A listed file touched since it was hashed is hashed again.
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "model.bin"), later, later); err != nil {
		t.Fatal(err)
	}
	verifyOwn(t, d, dir, rev)
	if n := hashes.Load(); n != 2 {
		t.Fatalf("%d hashes after a file changed, want 2", n)
	}
	verifyOwn(t, d, dir, rev)
	if n := hashes.Load(); n != 2 {
		t.Fatalf("%d hashes, want the changed file hashed once", n)
	}
	// A file changed since is refused, not served from the memory of it.
	if err := os.WriteFile(filepath.Join(dir, "model.bin"), randomBytes(4097)[1:], 0o644); err != nil {
		t.Fatal(err)
	}
	anchors, _ := ownSigners(dir)
	if _, err := d.VerifyPackage(callCtx(t), dir, anchors, rev); !errors.Is(err, ErrBadPackage) || pkg.ErrorCode(err) != pkg.CodeFileHash {
		t.Fatalf("tampered file: err = %v, want %s", err, pkg.CodeFileHash)
	}

	// The same manifest elsewhere was not hashed there.
	copyDir := makePackage(t, map[string][]byte{"bin/echo": []byte("x")})
	verifyOwn(t, d, copyDir, rev)
	n := hashes.Load()
	copyTo := t.TempDir()
	for _, name := range []string{pkg.ManifestFile, pkg.SignatureFile, "bin/echo"} {
		b, err := os.ReadFile(filepath.Join(copyDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(copyTo, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(copyTo, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	verifyOwn(t, d, copyTo, rev)
	if got := hashes.Load(); got != n+1 {
		t.Fatalf("%d hashes, want the copy in another directory hashed (%d)", got, n+1)
	}
}

// Signatures are checked on every verification, so a package hashed
// under one set of anchors is not trusted under another.
func TestVerifyPackageChecksAnchorsEveryTime(t *testing.T) {
	d := newDispatcher(t, meshtest.NewIdentity(t), nil, nil)
	hashes := countHashes(d)
	dir := makePackage(t, map[string][]byte{"bin/echo": []byte("x")})
	verifyOwn(t, d, dir, nil)
	other, _ := ownSigners(makePackage(t, map[string][]byte{"bin/echo": []byte("y")}))
	_, err := d.VerifyPackage(callCtx(t), dir, other, nil)
	if !errors.Is(err, ErrBadPackage) || pkg.ErrorCode(err) != pkg.CodeUntrustedSigner {
		t.Fatalf("err = %v, want %s", err, pkg.CodeUntrustedSigner)
	}
	if _, err := d.VerifyPackage(callCtx(t), "pkg", other, nil); !errors.Is(err, ErrBadPackage) {
		t.Fatalf("relative dir: err = %v, want ErrBadPackage", err)
	}
	if n := hashes.Load(); n != 1 {
		t.Fatalf("%d hashes, want 1", n)
	}
}

// A package, signer or artifact revoked after the package was verified is
// refused before anything is sent: no offer, no call, no chain entry; and
// verifying it again is refused too, hashed or not.
func TestPlaceDecidedRefusesRevoked(t *testing.T) {
	c := newCluster(t)
	c.far.set(func(ctx context.Context, r ctl.Request) (any, *ctl.Refusal) {
		t.Error("a revoked package reached the host")
		return nil, ctl.NewRefusal(ctl.CodeGovernance, "revoked")
	})
	dir := makePackage(t, map[string][]byte{"bin/echo": []byte("x"), "model.bin": []byte("weights")})
	anchors, err := ownSigners(dir)
	if err != nil {
		t.Fatal(err)
	}
	probe := verifyOwn(t, c.d, dir, nil)
	v := probe.Verified()
	var fileHash string
	for _, f := range v.Manifest.Files {
		if f.Path == "model.bin" {
			fileHash = f.SHA256
		}
	}
	tests := []struct {
		name string
		give pkg.Subject
	}{
		{"package", pkg.Subject{Kind: pkg.SubjectPackage, Value: v.Manifest.ID}},
		{"signer", pkg.Subject{Kind: pkg.SubjectSigner, Value: hex.EncodeToString(anchors[0])}},
		{"manifest", pkg.Subject{Kind: pkg.SubjectArtifact, Value: v.ManifestHash}},
		{"file", pkg.Subject{Kind: pkg.SubjectArtifact, Value: fileHash}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rev := openRevocations(t)
			p := verifyOwn(t, c.d, dir, rev)
			entries := len(chainEntries(t, c.d))
			tt.give.Reason = "test"
			if _, err := rev.Revoke(tt.give); err != nil {
				t.Fatal(err)
			}
			_, err := c.d.PlaceDecided(callCtx(t), "b", p, "default", ctl.InstanceConfig{}, true, decidedID)
			if !errors.Is(err, ErrBadPackage) || pkg.ErrorCode(err) != pkg.CodeRevoked {
				t.Fatalf("err = %v, want %s", err, pkg.CodeRevoked)
			}
			if resp := classify(nil, err); resp.Class != operator.ClassError || resp.Code != pkg.CodeRevoked {
				t.Fatalf("operator response %+v", resp)
			}
			if n := c.d.offers.len(); n != 0 {
				t.Fatalf("%d offers made for a revoked package", n)
			}
			if got := len(chainEntries(t, c.d)); got != entries {
				t.Fatalf("%d chain entries after a refusal, want %d", got, entries)
			}
			if _, err := c.d.VerifyPackage(callCtx(t), dir, anchors, rev); pkg.ErrorCode(err) != pkg.CodeRevoked {
				t.Fatalf("verify again: err = %v, want %s", err, pkg.CodeRevoked)
			}
		})
	}
}

// PlaceDecided checks its inputs before anything is sent, and carries a
// config only when there is one.
func TestPlaceDecidedArguments(t *testing.T) {
	c := newCluster(t)
	var (
		mu      sync.Mutex
		configs []string
	)
	c.far.set(func(ctx context.Context, r ctl.Request) (any, *ctl.Refusal) {
		p, err := ctl.DecodePlaceParams(r.Body)
		if err != nil {
			return nil, err.(*ctl.Refusal)
		}
		mu.Lock()
		configs = append(configs, string(p.Config))
		mu.Unlock()
		return ctl.PlaceResult{InstanceID: "echo-1", Package: p.Package, Variant: p.Variant,
			Status: ctl.InstanceState{State: ctl.StateLoaded}, Node: c.b.ID()}, nil
	})
	p := verifyOwn(t, c.d, makePackage(t, map[string][]byte{"bin/echo": []byte("x")}), nil)
	tests := []struct {
		name     string
		pkg      VerifiedPackage
		variant  string
		cfg      ctl.InstanceConfig
		decision string
		wantErr  error
	}{
		{"zero package", VerifiedPackage{}, "default", ctl.InstanceConfig{}, decidedID, ErrBadPackage},
		{"unknown variant", p, "gpu", ctl.InstanceConfig{}, decidedID, ErrBadPackage},
		{"bad port", p, "default", ctl.InstanceConfig{Port: 70000}, decidedID, ctl.ErrInvalidCall},
		{"no decision", p, "default", ctl.InstanceConfig{}, "", ctl.ErrInvalidCall},
		{"upper-case decision", p, "default", ctl.InstanceConfig{}, strings.ToUpper(decidedID), ctl.ErrInvalidCall},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.d.PlaceDecided(callCtx(t), "b", tt.pkg, tt.variant, tt.cfg, true, tt.decision)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
		})
	}
	if _, err := c.d.PlaceDecided(callCtx(t), "nobody", p, "default", ctl.InstanceConfig{}, true, decidedID); !errors.Is(err, ErrUnknownNode) {
		t.Fatalf("unknown node: err = %v", err)
	}
	for _, cfg := range []ctl.InstanceConfig{{}, {Port: 8080}} {
		if _, err := c.d.PlaceDecided(callCtx(t), "b", p, "big", cfg, false, decidedID); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]string{"", `{"port":8080}`}, configs); diff != "" {
		t.Fatalf("configs the host got (-want +got):\n%s", diff)
	}
	var cfg ctl.InstanceConfig
	if err := json.Unmarshal([]byte(configs[1]), &cfg); err != nil || cfg.Port != 8080 {
		t.Fatalf("config %s: %+v %v", configs[1], cfg, err)
	}
}

// The memory of hashed packages is bounded and drops the least recently
// used first.
func TestVerifiedCacheBound(t *testing.T) {
	c := newVerifiedCache()
	st := []fileStat{{size: 1}}
	for i := range MaxVerifiedPackages {
		c.put(fmt.Sprint("h", i), "/p", st)
	}
	if !c.hit("h0", "/p", st) { // h0 is now the most recently used
		t.Fatal("h0 forgotten inside the bound")
	}
	c.put("new", "/p", st)
	if n := c.len(); n != MaxVerifiedPackages {
		t.Fatalf("%d entries, want %d", n, MaxVerifiedPackages)
	}
	if c.hit("h1", "/p", st) {
		t.Fatal("the least recently used entry was kept beyond the bound")
	}
	for _, h := range []string{"h0", "h2", "new"} {
		if !c.hit(h, "/p", st) {
			t.Fatalf("%s dropped", h)
		}
	}
	if c.hit("h0", "/q", st) || c.hit("h0", "/p", []fileStat{{size: 2}}) {
		t.Fatal("hit for another directory or other file metadata")
	}
}
