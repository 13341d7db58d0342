package dispatch

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/pkg"
)

// cluster is a caller node a with its dispatcher and a far host b.
type cluster struct {
	a, b *meshNode
	d    *Dispatcher
	far  *farHost
}

func newCluster(t testing.TB) *cluster {
	t.Helper()
	a := startMesh(t, "a")
	b := startMesh(t, "b")
	c := &cluster{a: a, b: b}
	c.d = newDispatcher(t, a.Ident, a.Mesh, nil)
	c.d.Register()
	c.far = newFarHost(t, b, a.Ident.PublicKey())
	meshtest.Pin(t, a, b)
	return c
}

func callCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

func TestCallDescribe(t *testing.T) {
	c := newCluster(t)
	c.far.set(func(ctx context.Context, req ctl.Request) (any, *ctl.Refusal) {
		if req.Method != ctl.MethodDescribe || req.DecisionID != "" {
			return nil, ctl.NewRefusal(ctl.CodeInvalidRequest, "want a describe without decision")
		}
		return ctl.DescribeResult{Facts: json.RawMessage(`null`), Advertisement: json.RawMessage(`{"x":1}`), ChainHead: "h"}, nil
	})
	for _, ref := range []string{"b", c.b.Ident.ID()} {
		ans, err := c.d.Call(callCtx(t), ref, ctl.MethodDescribe, nil)
		if err != nil {
			t.Fatalf("describe %s: %v", ref, err)
		}
		if ans.Response.Responder != c.b.Ident.ID() || !ans.ResponderKey.Equal(c.b.Ident.PublicKey()) {
			t.Fatalf("responder %s, want %s", ans.Response.Responder, c.b.Ident.ID())
		}
		var got ctl.DescribeResult
		if err := ctl.DecodeResult(ans.Response.Result, &got); err != nil {
			t.Fatal(err)
		}
		if got.ChainHead != "h" {
			t.Fatalf("result %+v", got)
		}
	}
}

// chainEntries reads the dispatcher's chain file.
func chainEntries(t *testing.T, d *Dispatcher) []map[string]any {
	t.Helper()
	path := d.chain.(interface{ Path() string }).Path()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var e map[string]any
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

func TestCallRefusedCarriesChainedDecision(t *testing.T) {
	c := newCluster(t)
	var mu sync.Mutex
	var gotDecision string
	c.far.set(func(ctx context.Context, req ctl.Request) (any, *ctl.Refusal) {
		mu.Lock()
		gotDecision = req.DecisionID
		mu.Unlock()
		return nil, ctl.NewRefusal(ctl.CodeUnknownInstance, "no such instance")
	})
	_, err := c.d.Call(callCtx(t), "b", ctl.MethodStart, ctl.InstanceParams{InstanceID: "i-1"})
	ce, ok := errors.AsType[*ctl.CallError](err)
	if !ok || ce.Class != ctl.ClassRefused || ce.Refusal.Code != ctl.CodeUnknownInstance {
		t.Fatalf("err = %v, want refused unknown_instance", err)
	}
	mu.Lock()
	decision := gotDecision
	mu.Unlock()
	if !ctl.ValidDecisionID(decision) {
		t.Fatalf("decision id %q", decision)
	}
	var kinds []string
	var decisionHash string
	var outcome map[string]any
	for _, e := range chainEntries(t, c.d) {
		kinds = append(kinds, e["kind"].(string))
		switch e["kind"] {
		case KindDecision:
			decisionHash = e["hash"].(string)
			if p := e["payload"].(map[string]any); p["instance_id"] != "i-1" || p["node"] != c.b.Ident.ID() {
				t.Errorf("decision payload %v", p)
			}
		case KindOutcome:
			outcome = e["payload"].(map[string]any)
		}
	}
	if diff := cmp.Diff([]string{"chain.genesis", KindDecision, KindOutcome}, kinds); diff != "" {
		t.Fatalf("chain kinds (-want +got):\n%s", diff)
	}
	if decisionHash != decision {
		t.Fatalf("decision id %s is not the chained entry's hash %s", decision, decisionHash)
	}
	want := map[string]any{"decision_id": decision, "method": "workload.start", "node": c.b.Ident.ID(), "outcome": "refused", "code": "unknown_instance"}
	if diff := cmp.Diff(want, outcome); diff != "" {
		t.Fatalf("outcome (-want +got):\n%s", diff)
	}
}

func TestCallUnreachable(t *testing.T) {
	a := startMesh(t, "a")
	ghost := meshtest.NewIdentity(t)
	// A configured peer with a pinned key that never answers: no link.
	a.Apply(mesh.PeerConfig{Name: "ghost", Addr: "127.0.0.1:9", Key: ghost.PublicKeyHex(), Tier: mesh.TierPaired})
	d := newDispatcher(t, a.Ident, a.Mesh, nil)
	tests := []struct {
		name    string
		node    string
		method  ctl.Method
		wantErr error
	}{
		{"no link, read-only", "ghost", ctl.MethodDescribe, mesh.ErrNoLink},
		{"no link, mutating", ghost.ID(), ctl.MethodStop, mesh.ErrNoLink},
		{"unknown node", "nobody", ctl.MethodStatus, ErrUnknownNode},
		{"self without a host", config.SelfRef, ctl.MethodDescribe, ErrNoLocalHost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var params any
			if tt.method != ctl.MethodDescribe {
				params = ctl.InstanceParams{InstanceID: "i-1"}
			}
			_, err := d.Call(callCtx(t), tt.node, tt.method, params)
			ce, ok := errors.AsType[*ctl.CallError](err)
			if !ok || ce.Class != ctl.ClassUnreachable || !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want unreachable wrapping %v", err, tt.wantErr)
			}
		})
	}
}

func TestCallDroppedStream(t *testing.T) {
	c := newCluster(t)
	c.far.setDrop(true)
	tests := []struct {
		method ctl.Method
		want   ctl.Class
	}{
		{ctl.MethodStop, ctl.ClassIndeterminate},
		{ctl.MethodStatus, ctl.ClassUnreachable},
	}
	for _, tt := range tests {
		_, err := c.d.Call(callCtx(t), "b", tt.method, ctl.InstanceParams{InstanceID: "i-1"})
		ce, ok := errors.AsType[*ctl.CallError](err)
		if !ok || ce.Class != tt.want {
			t.Fatalf("%s: err = %v, want %s", tt.method, err, tt.want)
		}
	}
}

// TestPlaceFetchesOverMesh places a package whose host fetches every
// listed file over a real artifact stream, checks each against the
// manifest, resumes one from an offset, and is refused an unlisted path
// and an offset past the end.
func TestPlaceFetchesOverMesh(t *testing.T) {
	c := newCluster(t)
	model := randomBytes(3*ctl.MaxPieceBytes + 1234)
	dir := makePackage(t, map[string][]byte{"bin/echo": []byte("#!/bin/sh\n"), "model.bin": model})
	var (
		mu       sync.Mutex
		problems []string
		fetches  int
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		problems = append(problems, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	c.far.set(func(ctx context.Context, req ctl.Request) (any, *ctl.Refusal) {
		p, err := ctl.DecodePlaceParams(req.Body)
		if err != nil {
			return nil, err.(*ctl.Refusal)
		}
		v, err := pkg.VerifyBytes(p.Manifest, p.ManifestSig, nil, nil)
		if err == nil || pkg.ErrorCode(err) != pkg.CodeUntrustedSigner {
			// The test host trusts no anchor; parse the signed bytes only.
			fail("verify bytes: %v", err)
		}
		_ = v
		m, err := pkg.ParseManifest(p.Manifest)
		if err != nil {
			return nil, ctl.NewRefusal(ctl.CodeVerify, err.Error())
		}
		for _, f := range m.Files {
			got, err := fetchOverMesh(ctx, c.b, c.a.Ident.ID(), ctl.FetchRequest{V: 1, DecisionID: req.DecisionID, Path: f.Path})
			if err != nil || got.refusal != nil {
				fail("fetch %s: %v %v", f.Path, err, got.refusal)
				continue
			}
			sum := sha256.Sum256(got.data)
			if hex.EncodeToString(sum[:]) != f.SHA256 || got.header.Size != f.Size {
				fail("fetch %s: content differs from the manifest", f.Path)
			}
			mu.Lock()
			fetches++
			mu.Unlock()
		}
		// Resume the model from an offset inside a piece.
		off := int64(ctl.MaxPieceBytes + 77)
		got, err := fetchOverMesh(ctx, c.b, c.a.Ident.ID(), ctl.FetchRequest{V: 1, DecisionID: req.DecisionID, Path: "model.bin", Offset: off})
		if err != nil || got.header.Offset != off || !bytes.Equal(got.data, model[off:]) {
			fail("resume: %v %+v", err, got.header)
		}
		// An offset at the end is a complete, empty answer.
		got, err = fetchOverMesh(ctx, c.b, c.a.Ident.ID(), ctl.FetchRequest{V: 1, DecisionID: req.DecisionID, Path: "model.bin", Offset: int64(len(model))})
		if err != nil || got.refusal != nil || len(got.data) != 0 {
			fail("fetch at the end: %v %v", err, got.refusal)
		}
		for _, tt := range []struct {
			path   string
			offset int64
			code   string
		}{
			{"manifest.json", 0, ctl.ArtifactNotListed},
			{"other.bin", 0, ctl.ArtifactNotListed},
			{"model.bin", int64(len(model)) + 1, ctl.ArtifactBadRequest},
		} {
			got, err := fetchOverMesh(ctx, c.b, c.a.Ident.ID(), ctl.FetchRequest{V: 1, DecisionID: req.DecisionID, Path: tt.path, Offset: tt.offset})
			if err != nil || got.refusal == nil || got.refusal.Code != tt.code {
				fail("fetch %s@%d: %v %+v, want %s", tt.path, tt.offset, err, got.refusal, tt.code)
			}
		}
		return ctl.PlaceResult{InstanceID: "echo-1", Package: p.Package, Variant: p.Variant, Status: ctl.InstanceState{State: "running"}, Node: c.b.Ident.ID()}, nil
	})
	ans, err := c.d.Place(callCtx(t), "b", dir, "big", true)
	if err != nil {
		t.Fatalf("place: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Fatalf("host saw:\n%s", strings.Join(problems, "\n"))
	}
	if fetches != 2 {
		t.Fatalf("%d files fetched, want 2", fetches)
	}
	var res ctl.PlaceResult
	if err := ctl.DecodeResult(ans.Response.Result, &res); err != nil || res.InstanceID != "echo-1" || res.Variant != "big" {
		t.Fatalf("result %+v %v", res, err)
	}
	if ans.Request.Method != ctl.MethodPlace || !ctl.ValidDecisionID(ans.Request.DecisionID) {
		t.Fatalf("request %s %q", ans.Request.Method, ans.Request.DecisionID)
	}
	// The offer stays for its grace after the call.
	if _, ok := c.d.offers.lookup(ans.Request.DecisionID, c.b.Ident.ID()); !ok {
		t.Fatal("offer dropped before its grace")
	}
}

func TestPlaceRefusesBadPackages(t *testing.T) {
	c := newCluster(t)
	c.far.set(func(ctx context.Context, req ctl.Request) (any, *ctl.Refusal) {
		t.Error("a bad package reached the host")
		return nil, ctl.NewRefusal(ctl.CodeRuntime, "no")
	})
	good := makePackage(t, map[string][]byte{"bin/echo": []byte("x")})
	tampered := makePackage(t, map[string][]byte{"bin/echo": []byte("x")})
	if err := os.WriteFile(filepath.Join(tampered, "bin/echo"), []byte("y"), 0o755); err != nil {
		t.Fatal(err)
	}
	unsigned := makePackage(t, map[string][]byte{"bin/echo": []byte("x")})
	if err := os.Remove(filepath.Join(unsigned, pkg.SignatureFile)); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, dir, variant string }{
		{"tampered", tampered, "default"},
		{"unsigned", unsigned, "default"},
		{"relative dir", "pkg", "default"},
		{"unknown variant", good, "gpu"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.d.Place(callCtx(t), "b", tt.dir, tt.variant, true)
			if !errors.Is(err, ErrBadPackage) {
				t.Fatalf("err = %v, want ErrBadPackage", err)
			}
		})
	}
}

func TestNewTreatsNilMeshAsNone(t *testing.T) {
	ident := meshtest.NewIdentity(t)
	var m *mesh.Mesh
	d, err := New(Deps{Identity: ident, Mesh: m, Chain: openChain(t, ident)})
	if err != nil {
		t.Fatal(err)
	}
	d.Register() // must not panic
	if _, err := d.Call(callCtx(t), "gpu-2", ctl.MethodDescribe, nil); !errors.Is(err, ErrUnknownNode) {
		t.Fatalf("err = %v, want ErrUnknownNode", err)
	}
}

// A metric name already taken is New's error, never a panic: every
// component registers its metrics the same way.
func TestNewReportsMetricConflict(t *testing.T) {
	ident := meshtest.NewIdentity(t)
	reg := prometheus.NewRegistry()
	if _, err := New(Deps{Identity: ident, Chain: &noticeChain{}, Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Deps{Identity: ident, Chain: &noticeChain{}, Registerer: reg}); err == nil {
		t.Fatal("a second New on the same registry succeeded, want a registration error")
	}
}
