package host

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/grammar"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/runner"
	"github.com/nodeld/nodeld/internal/sandbox"
	"github.com/nodeld/nodeld/internal/table"
)

const waitTimeout = 20 * time.Second

func newKey(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func pubOf(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

// decisions makes distinct decision ids.
var decisionSeq atomic.Int64

func newDecision() string {
	sum := sha256.Sum256([]byte{byte(decisionSeq.Add(1)), byte(time.Now().UnixNano())})
	return hex.EncodeToString(sum[:])
}

// fakeAudit records chain entries in memory; while down is set, every
// Record fails (a chain that cannot be written).
type fakeAudit struct {
	down atomic.Bool
	mu   sync.Mutex
	recs []auditRec
}

var errAuditDown = errors.New("chain unavailable")

type auditRec struct {
	kind    string
	payload map[string]any
}

func (a *fakeAudit) Record(source, kind string, payload any) error {
	if a.down.Load() {
		return errAuditDown
	}
	b, _ := json.Marshal(payload)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recs = append(a.recs, auditRec{kind, m})
	return nil
}

// passRecorder is a Recorder that chains every event to a, one entry
// each, so tests that count refusals see every one (the flood tests use
// a real chain.Recorder instead).
type passRecorder struct {
	a interface {
		Record(source, kind string, payload any) error
	}
}

func (r passRecorder) Record(key chain.RecordKey, source string, payload any) (bool, error) {
	return true, r.a.Record(source, key.Kind, payload)
}

func (a *fakeAudit) Head() (uint64, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return uint64(len(a.recs)), "deadbeef"
}

func (a *fakeAudit) ofKind(kind string) []map[string]any {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []map[string]any
	for _, r := range a.recs {
		if r.kind == kind {
			out = append(out, r.payload)
		}
	}
	return out
}

// testPackage is a signed package directory held by the caller.
type testPackage struct {
	dir           string
	manifest, sig []byte
	m             *pkg.Manifest
}

// buildEcho builds the echo-llm package from its template, signed by key.
func buildEcho(t testing.TB, key ed25519.PrivateKey) testPackage {
	t.Helper()
	return buildEchoAs(t, key, "")
}

// buildEchoAs builds the echo-llm package under package id id (the
// template's when ""), so a second instance of its role ("chat") can be
// placed next to the first.
func buildEchoAs(t testing.TB, key ed25519.PrivateKey, id string) testPackage {
	t.Helper()
	dir := t.TempDir()
	bin, err := os.ReadFile(echoBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "echo-llm"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	tmpl, err := os.ReadFile("../../examples/packages/echo-llm/manifest.template.json")
	if err != nil {
		t.Fatal(err)
	}
	var m pkg.Manifest
	if err := json.Unmarshal(tmpl, &m); err != nil {
		t.Fatal(err)
	}
	if id != "" {
		m.ID = id
	}
	return signPackage(t, dir, m, key)
}

// buildCrash builds a service package whose process exits at once.
func buildCrash(t testing.TB, key ed25519.PrivateKey) testPackage {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "crash.sh"), []byte("#!/bin/sh\necho crashing >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	m := pkg.Manifest{ID: "crasher", Version: "1.0.0", Kind: pkg.KindService,
		Runtime:  pkg.Runtime{Type: grammar.RuntimeProcess, Command: "crash.sh"},
		Variants: []pkg.Variant{{Name: "default"}}}
	return signPackage(t, dir, m, key)
}

func signPackage(t testing.TB, dir string, m pkg.Manifest, key ed25519.PrivateKey) testPackage {
	t.Helper()
	mb, err := pkg.Build(dir, m)
	if err != nil {
		t.Fatal(err)
	}
	if key != nil {
		if err := pkg.Sign(dir, key); err != nil {
			t.Fatal(err)
		}
	}
	sig, err := os.ReadFile(filepath.Join(dir, pkg.SignatureFile))
	if err != nil && key != nil {
		t.Fatal(err)
	}
	parsed, err := pkg.ParseManifest(mb)
	if err != nil {
		t.Fatal(err)
	}
	return testPackage{dir: dir, manifest: mb, sig: sig, m: parsed}
}

func (p testPackage) params(start bool) ctl.PlaceParams {
	return ctl.PlaceParams{Package: p.m.ID, Version: p.m.Version, Variant: p.m.Variants[0].Name,
		Manifest: p.manifest, ManifestSig: p.sig, Start: start}
}

// artifactServer is the caller side of the artifact protocol, as the
// dispatcher serves it: files of the package offered for a decision,
// only those its manifest lists.
type artifactServer struct {
	pieceSize int
	mu        sync.Mutex
	offers    map[string]testPackage
	// hold, when set, is waited on before a header is sent.
	hold chan struct{}
	// holding is closed when a fetch is waiting on hold.
	holding chan struct{}
	// dropOnce drops the stream after its first piece, once.
	dropOnce atomic.Bool
	// tamper flips a byte of every piece before hashing it.
	tamper  atomic.Bool
	fetches atomic.Int32
	// gen serves generated content for a path: the same block repeated.
	gen *genFile
}

type genFile struct {
	block []byte
	sum   [32]byte
	size  int64
}

func newArtifactServer() *artifactServer {
	return &artifactServer{pieceSize: ctl.MaxPieceBytes, offers: map[string]testPackage{}}
}

func (a *artifactServer) offer(decision string, p testPackage) {
	a.mu.Lock()
	a.offers[decision] = p
	a.mu.Unlock()
}

func refuse(s io.Writer, code, msg string) {
	_ = mesh.WriteFrame(s, ctl.FrameRefusal, encodeJSON(ctl.ArtifactRefusal{Code: code, Message: msg}))
}

func (a *artifactServer) handle(ctx context.Context, _ mesh.PeerInfo, s *mesh.Stream) {
	defer s.CloseWrite()
	a.serve(ctx, s)
}

func (a *artifactServer) serve(ctx context.Context, s io.ReadWriter) {
	a.fetches.Add(1)
	typ, p, err := mesh.ReadFrame(s, ctl.MaxArtifactControlBytes)
	if err != nil || typ != ctl.FrameFetch {
		return
	}
	req, err := ctl.DecodeFetchRequest(p)
	if err != nil {
		refuse(s, ctl.ArtifactBadRequest, err.Error())
		return
	}
	a.mu.Lock()
	pk, ok := a.offers[req.DecisionID]
	hold, holding := a.hold, a.holding
	a.holding = nil
	a.mu.Unlock()
	if a.gen != nil {
		a.serveGen(s, req)
		return
	}
	if !ok {
		refuse(s, ctl.ArtifactNotOffered, "decision not offered")
		return
	}
	f, listed := pk.m.File(req.Path)
	if !listed {
		refuse(s, ctl.ArtifactNotListed, "path not listed")
		return
	}
	if hold != nil {
		if holding != nil {
			close(holding)
		}
		select {
		case <-hold:
		case <-ctx.Done():
			return
		}
	}
	file, err := os.Open(filepath.Join(pk.dir, f.Path))
	if err != nil {
		refuse(s, ctl.ArtifactIO, "open")
		return
	}
	defer file.Close()
	if _, err := file.Seek(req.Offset, io.SeekStart); err != nil {
		refuse(s, ctl.ArtifactIO, "seek")
		return
	}
	if err := mesh.WriteFrame(s, ctl.FrameHeader, encodeJSON(ctl.FetchHeader{Size: f.Size, Offset: req.Offset})); err != nil {
		return
	}
	buf := make([]byte, ctl.PieceHashBytes+a.pieceSize)
	for {
		n, err := io.ReadFull(file, buf[ctl.PieceHashBytes:])
		if n > 0 {
			data := buf[ctl.PieceHashBytes : ctl.PieceHashBytes+n]
			if a.tamper.Load() {
				data[0] ^= 0xff
			}
			sum := sha256.Sum256(data)
			copy(buf, sum[:])
			if mesh.WriteFrame(s, ctl.FramePiece, buf[:ctl.PieceHashBytes+n]) != nil {
				return
			}
			if a.dropOnce.CompareAndSwap(true, false) {
				if ms, ok := s.(*mesh.Stream); ok {
					ms.AbortWrite(mesh.StreamCodeCancelled)
				}
				return
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			refuse(s, ctl.ArtifactIO, "read")
			return
		}
	}
	_ = mesh.WriteFrame(s, ctl.FrameEnd, nil)
}

// serveGen serves the generated file from req.Offset (a multiple of the
// block size).
func (a *artifactServer) serveGen(s io.Writer, req ctl.FetchRequest) {
	g := a.gen
	if mesh.WriteFrame(s, ctl.FrameHeader, encodeJSON(ctl.FetchHeader{Size: g.size, Offset: req.Offset})) != nil {
		return
	}
	frame := append(append([]byte{}, g.sum[:]...), g.block...)
	for off := req.Offset; off < g.size; off += int64(len(g.block)) {
		if mesh.WriteFrame(s, ctl.FramePiece, frame) != nil {
			return
		}
	}
	_ = mesh.WriteFrame(s, ctl.FrameEnd, nil)
}

// cluster is a host node and a caller node over real QUIC.
type cluster struct {
	hostNode, caller *meshNode
	h                *Host
	audit            *fakeAudit
	rev              *pkg.Revocations
	srv              *artifactServer
	client           *ctl.Client
	publisher        ed25519.PrivateKey
	hostDone         chan error
}

type clusterOpts struct {
	policy runner.RestartPolicy
	noRun  bool
	// noFacts runs the host without node facts, so admission does not
	// ask for the package's runtime on PATH (an ollama package on a
	// machine without ollama).
	noFacts bool
	// now is the host's clock; nil means time.Now.
	now func() time.Time
	// healthInterval is the supervisors' health poll period; zero means
	// 50 ms.
	healthInterval time.Duration
	// audit and recorder, when set, replace the fake audit (which then
	// stays empty) and the recorder that chains every event to it.
	audit    Auditor
	recorder Recorder
	// selfController lists the host's own key among its controllers, beside
	// the caller's (a controller set of two).
	selfController bool
	// isolate starts placed instances through a sandbox (with its file
	// system, resource and user parts off: what any machine can run),
	// this test binary as the launcher.
	isolate bool
}

func newCluster(t testing.TB, opts clusterOpts) *cluster {
	t.Helper()
	c := &cluster{hostNode: meshtest.NewNode(t, "host", meshtest.Options{}, plainTable), caller: meshtest.NewNode(t, "caller", meshtest.Options{}, plainTable), audit: &fakeAudit{}, srv: newArtifactServer(), publisher: newKey(t)}
	// One dial only (the caller's), so no duplicate link is settled
	// under a test: the host dials first and is refused, then the caller
	// learns the host and dials while the host backs off.
	c.hostNode.Build(c.caller.Peer())
	c.caller.Build()
	rev, err := pkg.OpenRevocations(filepath.Join(c.hostNode.Dir, pkg.RevocationsFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	c.rev = rev
	seq, err := facts.OpenSeqStore(c.hostNode.Dir)
	if err != nil {
		t.Fatal(err)
	}
	src, err := facts.NewSource(facts.DefaultProbeDeps(), c.hostNode.Ident.PrivateKey(), nil, seq, facts.SourceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if opts.noFacts {
		src = nil
	}
	var audit Auditor = c.audit
	if opts.audit != nil {
		audit = opts.audit
	}
	var rec Recorder = passRecorder{c.audit}
	if opts.recorder != nil {
		rec = opts.recorder
	}
	var iso *sandbox.Isolator
	if opts.isolate {
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		iso, err = sandbox.New(sandbox.Config{Filesystem: sandbox.ModeOff, Resources: sandbox.ModeOff, Users: sandbox.ModeOff,
			DataDir: c.hostNode.Dir, Exe: exe})
		if err != nil {
			t.Fatal(err)
		}
	}
	if opts.healthInterval == 0 {
		opts.healthInterval = 50 * time.Millisecond
	}
	controllers := []ed25519.PublicKey{c.caller.Ident.PublicKey()}
	if opts.selfController {
		controllers = append(controllers, c.hostNode.Ident.PublicKey())
	}
	h, err := New(Config{
		Enabled: true, Controllers: controllers,
		TrustAnchors: pkg.Anchors{pubOf(c.publisher)}, DataDir: c.hostNode.Dir,
		RestartPolicy: opts.policy, HealthInterval: opts.healthInterval,
	}, Deps{Identity: c.hostNode.Ident, Mesh: c.hostNode.Mesh, Table: c.hostNode.Table, Audit: audit, Recorder: rec,
		Revocations: rev, Facts: src, Logger: zaptest.NewLogger(t).Named("host"), Registerer: prometheus.NewRegistry(),
		Now: opts.now, Isolation: iso})
	if err != nil {
		t.Fatal(err)
	}
	c.h = h
	h.Register()
	c.caller.Mesh.Handle(mesh.KindArtifact, c.srv.handle)
	c.hostNode.Run()
	c.caller.Run()
	if !opts.noRun {
		ctx, cancel := context.WithCancel(context.Background())
		c.hostDone = make(chan error, 1)
		go func() { c.hostDone <- h.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-c.hostDone; err != nil {
				t.Errorf("host run: %v", err)
			}
		})
	}
	meshtest.AdmitLater(t, c.caller, c.hostNode)
	cl, err := ctl.NewClient(ctl.ClientConfig{Key: c.caller.Ident.PrivateKey()})
	if err != nil {
		t.Fatal(err)
	}
	c.client = cl
	return c
}

func (c *cluster) opener() ctl.Opener {
	return func(ctx context.Context) (ctl.Stream, error) {
		s, err := c.caller.Mesh.OpenStream(ctx, c.hostNode.Ident.ID(), mesh.KindCtl)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
}

func (c *cluster) target() ctl.Target {
	return ctl.Target{ID: c.hostNode.Ident.ID(), Key: c.hostNode.Ident.PublicKey()}
}

// callWith sends one call with client cl.
func (c *cluster) callWith(t testing.TB, cl *ctl.Client, method ctl.Method, body any, decision string) (*ctl.Answer, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	return cl.Call(ctx, c.opener(), c.target(), method, body, decision)
}

func (c *cluster) call(t testing.TB, method ctl.Method, body any, decision string) (*ctl.Answer, error) {
	t.Helper()
	return c.callWith(t, c.client, method, body, decision)
}

// mustCall calls and decodes the result into v.
func (c *cluster) mustCall(t testing.TB, method ctl.Method, body any, decision string, v any) {
	t.Helper()
	ans, err := c.call(t, method, body, decision)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	if v != nil {
		if err := ctl.DecodeResult(ans.Response.Result, v); err != nil {
			t.Fatalf("%s result: %v", method, err)
		}
	}
}

// place offers p for a new decision and places it.
func (c *cluster) place(t testing.TB, p testPackage, start bool) (ctl.PlaceResult, string, error) {
	t.Helper()
	d := newDecision()
	c.srv.offer(d, p)
	method := ctl.MethodPlace
	if !start {
		method = ctl.MethodLoad
	}
	ans, err := c.call(t, method, p.params(start), d)
	if err != nil {
		return ctl.PlaceResult{}, d, err
	}
	var res ctl.PlaceResult
	if err := ctl.DecodeResult(ans.Response.Result, &res); err != nil {
		t.Fatal(err)
	}
	return res, d, nil
}

// refusalCode returns the refusal code of a call error, or "".
func refusalCode(err error) ctl.Code {
	var ce *ctl.CallError
	if errors.As(err, &ce) && ce.Refusal != nil {
		return ce.Refusal.Code
	}
	return ""
}

func (c *cluster) statusList(t testing.TB, departed bool) ctl.StatusList {
	t.Helper()
	var st ctl.StatusList
	c.mustCall(t, ctl.MethodStatus, ctl.InstanceParams{IncludeDeparted: departed}, "", &st)
	return st
}

func (c *cluster) instance(id string) *instance {
	in, _ := c.h.reg.lookup(id)
	return in
}

func (c *cluster) state(id string) string {
	in := c.instance(id)
	if in == nil {
		return ""
	}
	return in.snapshot().state
}

// meshNode is a mesh node whose table admits no advertisements.
type meshNode = meshtest.Node[*table.Table]

func plainTable(id string, _ *meshtest.Admission) *table.Table {
	return table.New(id, table.Options{})
}
