package dispatch

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/operator"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/nodeld/nodeld/internal/seqfile"
)

// Chain source and kinds of the dispatcher's audit records.
const (
	AuditSource = "dispatch"
	// KindDecision is chained before every mutating call; its entry hash
	// is the call's decision id.
	KindDecision = "dispatch.decision"
	// KindOutcome records how a mutating call ended.
	KindOutcome = "dispatch.outcome"
)

// Mesh is the part of the mesh the dispatcher uses. *mesh.Mesh
// implements it.
type Mesh interface {
	OpenStream(ctx context.Context, nodeID string, kind mesh.StreamKind) (*mesh.Stream, error)
	Handle(kind mesh.StreamKind, h mesh.Handler)
	Peer(nodeID string) (mesh.PeerInfo, bool)
	ResolveRef(ref string) (string, bool)
}

var _ Mesh = (*mesh.Mesh)(nil)

// Auditor appends to the audit chain and returns the entry, whose hash is
// a decision id. *chain.Chain implements it. (Record and then Head would
// race with other appenders: the head may already be someone else's.)
type Auditor interface {
	Append(source, kind string, payload any) (chain.Entry, error)
}

var _ Auditor = (*chain.Chain)(nil)

// LocalHost serves workload.ctl calls addressed to this node without the
// mesh. The workload host implements it; s carries one call, exactly as a
// mesh stream would, and the caller is this node itself.
type LocalHost interface {
	ServeLocal(ctx context.Context, s ctl.Stream)
}

// Deps are the dispatcher's collaborators.
type Deps struct {
	// Identity signs every call; required.
	Identity *identity.Identity
	// Mesh carries calls to peers and artifact streams from them; nil
	// means only "self" can be called.
	Mesh Mesh
	// Chain records every decision before its call; required (a control
	// action whose record cannot be written is not taken).
	Chain Auditor
	// Local serves calls to this node; nil refuses "self".
	Local LocalHost
	// Revocations is this node's revocation list, edited by the operator's
	// revoke and unrevoke; nil refuses them.
	Revocations Revoker
	// Notices receives the signed notices of revoke and unrevoke with
	// Notify (the host); nil refuses Notify.
	Notices NoticeSubmitter
	// DataDir holds NoticeSeqFile; required for Notify.
	DataDir string
	// Logger; nil logs nothing.
	Logger *zap.Logger
	// Registerer receives the metrics; nil registers none.
	Registerer prometheus.Registerer
	// Now is the clock of requests and offers; nil means time.Now.
	Now func() time.Time
	// ResolveNode resolves a node reference the one way nodeld does
	// (config.ResolveNodeRef with what the daemon knows: "self", this
	// node's node.name or id, a configured peer's name or id) to a node
	// id; ok is false for what it does not know, which is then looked up
	// as a node id or peer name of the mesh (a peer the config no longer
	// names may still be linked, and the controller may still stop and
	// unload what it placed there). nil: only "self", this node's id and
	// the mesh's peers.
	ResolveNode func(ref string) (nodeID string, ok bool)
}

// Revoker edits a revocation list (*pkg.Revocations).
type Revoker interface {
	Revoke(s pkg.Subject) (changed bool, err error)
	Unrevoke(kind, value string) (changed bool, err error)
}

var _ Revoker = (*pkg.Revocations)(nil)

var (
	// ErrUnknownNode is wrapped (in a ClassUnreachable *ctl.CallError) for
	// a node reference that names no admitted peer.
	ErrUnknownNode = operator.ErrUnknownNode
	// ErrNoLocalHost is wrapped (in a ClassUnreachable *ctl.CallError) for
	// a call to "self" on a node that runs no workload host.
	ErrNoLocalHost = errors.New("this node runs no workload host")
	// ErrBadPackage is wrapped by VerifyPackage, Place and PlaceDecided for
	// a package directory that does not verify locally, is revoked, lacks
	// the variant, or cannot be carried by place; nothing was sent.
	ErrBadPackage = errors.New("package refused before dispatch")
)

// Dispatcher signs workload.ctl calls and sends them, serves the
// artifacts of the places it made, and feeds the operator socket.
type Dispatcher struct {
	id    *identity.Identity
	mesh  Mesh
	chain Auditor
	local LocalHost
	rev   Revoker
	// notices and dataDir serve revoke and unrevoke with Notify.
	notices NoticeSubmitter
	dataDir string
	// seqMu serialises notice sequence numbers (held across the counter
	// file write and the submit) and guards noticeSeq, opened on first
	// use.
	seqMu     sync.Mutex
	noticeSeq *seqfile.Counter

	log *zap.Logger
	now func() time.Time
	// resolveNode is Deps.ResolveNode; nil resolves nothing.
	resolveNode func(ref string) (string, bool)
	client      *ctl.Client
	met         *metrics
	offers      *offers
	// verified remembers the packages VerifyPackage hashed;
	// hashPackage is that full verification (a seam for tests).
	verified    *verifiedCache
	hashPackage hashFunc
	// slots bounds the artifact streams served at once; peerSlots bounds
	// those of each peer.
	slots     chan struct{}
	peerSlots *peerSlots
}

// New validates deps and returns a Dispatcher. It starts nothing.
func New(deps Deps) (*Dispatcher, error) {
	if deps.Identity == nil {
		return nil, errors.New("dispatch: no identity")
	}
	if deps.Chain == nil {
		return nil, errors.New("dispatch: no chain")
	}
	if m, ok := deps.Mesh.(*mesh.Mesh); ok && m == nil {
		// A nil *mesh.Mesh in the interface (a node without mesh.listen)
		// means no mesh, not a mesh to call methods on.
		deps.Mesh = nil
	}
	d := &Dispatcher{
		id: deps.Identity, mesh: deps.Mesh, chain: deps.Chain, local: deps.Local, rev: deps.Revocations,
		notices: deps.Notices, dataDir: deps.DataDir,
		log: deps.Logger, now: deps.Now, resolveNode: deps.ResolveNode,
		slots:     make(chan struct{}, MaxConcurrentArtifactStreams),
		peerSlots: newPeerSlots(MaxArtifactStreamsPerPeer),
	}
	if d.log == nil {
		d.log = zap.NewNop()
	}
	if d.now == nil {
		d.now = time.Now
	}
	client, err := ctl.NewClient(ctl.ClientConfig{Key: deps.Identity.PrivateKey(), Now: d.now})
	if err != nil {
		return nil, fmt.Errorf("dispatch: %w", err)
	}
	d.client = client
	if d.met, err = newMetrics(deps.Registerer); err != nil {
		return nil, fmt.Errorf("dispatch: %w", err)
	}
	d.offers = newOffers(d.now)
	d.verified = newVerifiedCache()
	d.hashPackage = pkg.VerifyDirContext
	return d, nil
}

// Register installs the artifact server on the mesh. Call it before the
// mesh runs.
func (d *Dispatcher) Register() {
	if d.mesh != nil {
		d.mesh.Handle(mesh.KindArtifact, d.serveArtifact)
	}
}

// target is a resolved call target.
type target struct {
	id   string
	key  ed25519.PublicKey
	self bool
}

// resolve maps "self", this node's name or id, a node id or a
// configured peer name to a target.
func (d *Dispatcher) resolve(node string) (target, error) {
	if d.resolveNode != nil {
		if id, ok := d.resolveNode(node); ok {
			node = id
		}
	}
	if node == config.SelfRef || node == d.id.ID() {
		if d.local == nil {
			return target{}, ErrNoLocalHost
		}
		return target{id: d.id.ID(), key: d.id.PublicKey(), self: true}, nil
	}
	if d.mesh == nil {
		return target{}, fmt.Errorf("%q: %w (no mesh)", node, ErrUnknownNode)
	}
	id, ok := d.mesh.ResolveRef(node)
	if !ok {
		return target{}, fmt.Errorf("%q: %w", node, ErrUnknownNode)
	}
	info, ok := d.mesh.Peer(id)
	if !ok || len(info.Key) != ed25519.PublicKeySize {
		return target{}, fmt.Errorf("%q: %w", node, ErrUnknownNode)
	}
	return target{id: id, key: info.Key}, nil
}

// Call sends one signed call to node ("self", a node id or a configured
// peer name) and returns its verified answer. A mutating call is first
// chained (KindDecision) and carries that entry's hash as its decision id;
// if the record cannot be written nothing is sent. Errors of an attempted
// call are *ctl.CallError with the class of reference section 2.9: an
// unknown node or a "self" without a host is ClassUnreachable. Calls
// without a deadline get ctl.CallTimeout (ctl.PlaceTimeout for place and
// load).
func (d *Dispatcher) Call(ctx context.Context, node string, method ctl.Method, params any) (*ctl.Answer, error) {
	return d.CallDecided(ctx, node, method, params, "")
}

// CallDecided is Call with a decision id the caller already chained (the
// controller chains its own placement decisions). An empty decisionID
// makes Call's own decision for a mutating method.
func (d *Dispatcher) CallDecided(ctx context.Context, node string, method ctl.Method, params any, decisionID string) (*ctl.Answer, error) {
	return d.callAtTerm(ctx, node, method, params, decisionID, 0)
}

// callAtTerm is CallDecided for a controller holding raft term term (0:
// none): the call carries it, and the decision a mutating call makes
// records it.
func (d *Dispatcher) callAtTerm(ctx context.Context, node string, method ctl.Method, params any, decisionID string, term uint64) (*ctl.Answer, error) {
	tg, err := d.resolve(node)
	if err != nil {
		d.met.calls.WithLabelValues(string(method), ctl.ClassUnreachable.String()).Inc()
		return nil, &ctl.CallError{Class: ctl.ClassUnreachable, Method: method, Err: err}
	}
	if ctl.IsMutating(method) && decisionID == "" {
		rec := decisionRecord(method, params)
		rec.Term = term
		decisionID, err = d.decide(tg, method, rec)
		if err != nil {
			return nil, err
		}
	}
	return d.send(ctx, tg, method, params, decisionID, term)
}

// decisionPayload is the payload of KindDecision.
type decisionPayload struct {
	Method       ctl.Method `json:"method"`
	Node         string     `json:"node"`
	InstanceID   string     `json:"instance_id,omitempty"`
	Package      string     `json:"package,omitempty"`
	Version      string     `json:"version,omitempty"`
	Variant      string     `json:"variant,omitempty"`
	ManifestHash string     `json:"manifest_hash,omitempty"`
	Start        bool       `json:"start,omitempty"`
	// Term is the raft term of the controller that decided (0: none).
	Term uint64 `json:"term,omitempty"`
}

// decisionRecord summarises params for the chain (never configs or
// manifests whole).
func decisionRecord(method ctl.Method, params any) decisionPayload {
	rec := decisionPayload{Method: method}
	switch p := params.(type) {
	case ctl.InstanceParams:
		rec.InstanceID = p.InstanceID
	case *ctl.InstanceParams:
		rec.InstanceID = p.InstanceID
	case ctl.PlaceParams:
		rec.Package, rec.Version, rec.Variant, rec.Start = p.Package, p.Version, p.Variant, p.Start
		rec.ManifestHash = pkg.ManifestHash(p.Manifest)
	case *ctl.PlaceParams:
		return decisionRecord(method, *p)
	}
	return rec
}

// decide chains a decision and returns its hash as the decision id.
func (d *Dispatcher) decide(tg target, method ctl.Method, rec decisionPayload) (string, error) {
	rec.Node = tg.id
	e, err := d.chain.Append(AuditSource, KindDecision, rec)
	if err != nil {
		return "", fmt.Errorf("chain %s decision: %w", method, err)
	}
	if !ctl.ValidDecisionID(e.Hash) {
		return "", fmt.Errorf("chain %s decision: entry hash %q is not a decision id", method, e.Hash)
	}
	return e.Hash, nil
}

// outcomePayload is the payload of KindOutcome.
type outcomePayload struct {
	DecisionID string `json:"decision_id"`
	Method     string `json:"method"`
	Node       string `json:"node"`
	Outcome    string `json:"outcome"`
	Code       string `json:"code,omitempty"`
	// Term is the raft term the call carried (0: none).
	Term uint64 `json:"term,omitempty"`
}

// send makes the call, carrying term (0: none), on a fresh stream and
// records its outcome.
func (d *Dispatcher) send(ctx context.Context, tg target, method ctl.Method, params any, decisionID string, term uint64) (*ctl.Answer, error) {
	timeout := ctl.CallTimeout
	if method == ctl.MethodPlace || method == ctl.MethodLoad {
		timeout = ctl.PlaceTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	start := time.Now()
	var (
		ans *ctl.Answer
		err error
	)
	if tg.self {
		ans, err = d.callLocal(ctx, tg, method, params, decisionID, term)
	} else {
		ans, err = d.client.CallTerm(ctx, d.opener(tg.id), ctl.Target{ID: tg.id, Key: tg.key}, method, params, decisionID, term)
	}
	outcome, code := "ok", ""
	if ce, ok := errors.AsType[*ctl.CallError](err); ok {
		outcome = ce.Class.String()
		if ce.Refusal != nil {
			code = string(ce.Refusal.Code)
		}
		if errors.Is(err, ctl.ErrStaleTerm) {
			d.met.staleTerms.Inc()
		}
	} else if err != nil {
		outcome = "invalid"
	}
	d.met.calls.WithLabelValues(string(method), outcome).Inc()
	d.met.duration.WithLabelValues(string(method)).Observe(time.Since(start).Seconds())
	if decisionID != "" && outcome != "invalid" {
		if _, cerr := d.chain.Append(AuditSource, KindOutcome, outcomePayload{
			DecisionID: decisionID, Method: string(method), Node: tg.id, Outcome: outcome, Code: code, Term: term,
		}); cerr != nil {
			// The call already happened; the decision entry stands.
			d.log.Error("chain call outcome", zap.String("decision_id", decisionID), zap.Error(cerr))
		}
	}
	if err != nil && outcome != "refused" {
		d.log.Debug("call failed", zap.String("node", tg.id), zap.String("method", string(method)),
			zap.String("outcome", outcome), zap.Error(err))
	}
	return ans, err
}

// opener opens a ctl stream to nodeID over the mesh.
func (d *Dispatcher) opener(nodeID string) ctl.Opener {
	return func(ctx context.Context) (ctl.Stream, error) {
		s, err := d.mesh.OpenStream(ctx, nodeID, mesh.KindCtl)
		if err != nil {
			return nil, err
		}
		if dl, ok := ctx.Deadline(); ok {
			_ = s.SetDeadline(dl)
		}
		// The stream's Close also stops reading, which unblocks a
		// pending Read.
		return s, nil
	}
}

// callLocal runs the call against the local host over an in-memory pipe.
// The host's goroutine ends when the pipe closes, and is waited for.
func (d *Dispatcher) callLocal(ctx context.Context, tg target, method ctl.Method, params any, decisionID string, term uint64) (*ctl.Answer, error) {
	var wg sync.WaitGroup
	defer wg.Wait()
	open := func(ctx context.Context) (ctl.Stream, error) {
		ours, theirs := net.Pipe()
		wg.Go(func() {
			defer theirs.Close()
			d.local.ServeLocal(ctx, theirs)
		})
		return ours, nil
	}
	return d.client.CallTerm(ctx, open, ctl.Target{ID: tg.id, Key: tg.key}, method, params, decisionID, term)
}

// Place is the operator's place: it verifies the package in pkgDir
// locally (VerifyPackage with the keys its own manifest.sig names as
// anchors and no revocation list: the package must be intact and signed
// by someone, whom to trust is the host's decision), makes and chains the
// decision, offers the package's files to the target for the length of
// the call and OfferGrace after, and sends place (or load when !start)
// with the manifest, its signatures and variant. Errors wrapping
// ErrBadPackage mean nothing was sent; call errors are *ctl.CallError.
func (d *Dispatcher) Place(ctx context.Context, node, pkgDir, variant string, start bool) (*ctl.Answer, error) {
	method := placeMethod(start)
	anchors, err := ownSigners(pkgDir)
	if err != nil {
		return nil, err
	}
	p, err := d.VerifyPackage(ctx, pkgDir, anchors, nil)
	if err != nil {
		return nil, err
	}
	params, err := placeParams(p, variant, ctl.InstanceConfig{}, start)
	if err != nil {
		return nil, err
	}
	tg, err := d.resolve(node)
	if err != nil {
		d.met.calls.WithLabelValues(string(method), ctl.ClassUnreachable.String()).Inc()
		return nil, &ctl.CallError{Class: ctl.ClassUnreachable, Method: method, Err: err}
	}
	decisionID, err := d.decide(tg, method, decisionRecord(method, params))
	if err != nil {
		return nil, err
	}
	return d.sendPlace(ctx, tg, p, params, decisionID, OfferGrace, 0)
}

// PlaceDecided places a verified package on node under a decision the
// caller already made and chained (a controller's: decisionID is its
// chain entry's hash; PlaceDecided makes none). It sends place (or load
// when !start) with variant and cfg, serving the package's files to that
// node only, and only while the call runs: when the call ends the offer
// is withdrawn, so the same decision can fall through to the next
// candidate at once, and a candidate given up on cannot fetch it later.
//
// Before anything is sent, the package is checked again against the
// revocation list it was verified against (a package, signer or artifact
// revoked since is refused), and variant and cfg are checked. Errors
// wrapping ErrBadPackage or ctl.ErrInvalidCall mean nothing was sent; call
// errors are *ctl.CallError, their outcome chained (KindOutcome) with
// decisionID.
func (d *Dispatcher) PlaceDecided(ctx context.Context, node string, p VerifiedPackage, variant string, cfg ctl.InstanceConfig, start bool, decisionID string) (*ctl.Answer, error) {
	return d.placeAtTerm(ctx, node, p, variant, cfg, start, decisionID, 0)
}

// placeAtTerm is PlaceDecided for a controller holding raft term term.
func (d *Dispatcher) placeAtTerm(ctx context.Context, node string, p VerifiedPackage, variant string, cfg ctl.InstanceConfig, start bool, decisionID string, term uint64) (*ctl.Answer, error) {
	method := placeMethod(start)
	if !ctl.ValidDecisionID(decisionID) {
		return nil, fmt.Errorf("%s: decision id %q is not 64 lower-case hex: %w", method, decisionID, ctl.ErrInvalidCall)
	}
	if p.v == nil {
		return nil, fmt.Errorf("%s: no verified package: %w", method, ErrBadPackage)
	}
	if p.rev != nil {
		if err := p.rev.CheckVerified(p.v); err != nil {
			return nil, fmt.Errorf("package %s: %w: %w", p.v.Manifest.ID, ErrBadPackage, err)
		}
	}
	params, err := placeParams(p, variant, cfg, start)
	if err != nil {
		return nil, err
	}
	tg, err := d.resolve(node)
	if err != nil {
		d.met.calls.WithLabelValues(string(method), ctl.ClassUnreachable.String()).Inc()
		return nil, &ctl.CallError{Class: ctl.ClassUnreachable, Method: method, Err: err}
	}
	return d.sendPlace(ctx, tg, p, params, decisionID, 0, term)
}

func placeMethod(start bool) ctl.Method {
	if start {
		return ctl.MethodPlace
	}
	return ctl.MethodLoad
}

// placeParams builds the body of place or load. The config travels only
// when it is not the zero value, so a place without one is the same
// request it always was (and names the same instance).
func placeParams(p VerifiedPackage, variant string, cfg ctl.InstanceConfig, start bool) (ctl.PlaceParams, error) {
	m := p.v.Manifest
	if _, ok := m.Variant(variant); !ok {
		return ctl.PlaceParams{}, fmt.Errorf("package %s has no variant %q: %w", m.ID, variant, ErrBadPackage)
	}
	if err := cfg.Validate(); err != nil {
		return ctl.PlaceParams{}, fmt.Errorf("%w: %w", err, ctl.ErrInvalidCall)
	}
	params := ctl.PlaceParams{
		Package: m.ID, Version: m.Version, Variant: variant,
		Manifest: p.v.ManifestBytes, ManifestSig: p.v.SigBytes, Start: start,
	}
	if cfg != (ctl.InstanceConfig{}) {
		b, err := json.Marshal(cfg)
		if err != nil {
			return ctl.PlaceParams{}, fmt.Errorf("encode instance config: %w", err)
		}
		params.Config = b
	}
	return params, nil
}

// sendPlace offers p to tg under decisionID while the call runs (and for
// grace after) and sends it, carrying term.
func (d *Dispatcher) sendPlace(ctx context.Context, tg target, p VerifiedPackage, params ctl.PlaceParams, decisionID string, grace time.Duration, term uint64) (*ctl.Answer, error) {
	method := placeMethod(params.Start)
	release, err := d.offers.add(decisionID, tg.id, p.v, grace)
	if err != nil {
		// Nothing was sent: the target cannot have acted.
		return nil, &ctl.CallError{Class: ctl.ClassUnreachable, Method: method, Err: err}
	}
	d.met.offers.Inc()
	defer func() {
		release()
		d.met.offers.Dec()
	}()
	return d.send(ctx, tg, method, params, decisionID, term)
}
