package raftmesh

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/mesh"
)

// Stream codes a raft stream is refused with. The mesh's own codes are
// 0x1xx; these are KindRaft's, stable on the wire.
const (
	// CodeNotVoter: the peer that opened the stream is not a voter here.
	CodeNotVoter mesh.StreamCode = 0x201
	// CodeBusy: the accept queue was full (raft is not accepting).
	CodeBusy mesh.StreamCode = 0x202
	// CodeClosed: the layer is closed (raft is shutting down).
	CodeClosed mesh.StreamCode = 0x203
)

var (
	// ErrNotVoter is returned by Dial for an address that is not a voter.
	ErrNotVoter = errors.New("raft: node is not a voter")
	// errClosed is what Accept and Dial return once the layer is closed.
	errClosed = fmt.Errorf("raft stream layer: %w", net.ErrClosed)
)

// Opener opens mesh streams; *mesh.Mesh is one.
type Opener interface {
	OpenStream(ctx context.Context, nodeID string, kind mesh.StreamKind) (*mesh.Stream, error)
}

var _ Opener = (*mesh.Mesh)(nil)

// NoMesh is the Opener of a node without a mesh (no mesh.listen): a
// single controller, a one-voter cluster whose raft never dials. Every
// open fails.
type NoMesh struct{}

// OpenStream fails: there is no mesh.
func (NoMesh) OpenStream(context.Context, string, mesh.StreamKind) (*mesh.Stream, error) {
	return nil, errors.New("raft: this node has no mesh (mesh.listen is empty)")
}

// Config is the layer's configuration.
type Config struct {
	// Voters are the node ids of the raft voters: the only nodes a raft
	// stream is opened to or accepted from. This node may be listed.
	Voters []string
	// AcceptQueue bounds the inbound streams waiting for Accept; zero
	// means DefaultAcceptQueue.
	AcceptQueue int
}

// Validate reports every problem of c at once.
func (c Config) Validate() error {
	var errs []error
	if len(c.Voters) > MaxVoters {
		errs = append(errs, fmt.Errorf("raft voters: %d listed, at most %d", len(c.Voters), MaxVoters))
	}
	for i, v := range c.Voters {
		if v == "" {
			errs = append(errs, fmt.Errorf("raft voter %d: empty node id", i))
		} else if slices.Index(c.Voters, v) != i {
			errs = append(errs, fmt.Errorf("raft voter %q: listed twice", v))
		}
	}
	if c.AcceptQueue < 0 || c.AcceptQueue > MaxAcceptQueue {
		errs = append(errs, fmt.Errorf("raft accept queue %d: want 0..%d", c.AcceptQueue, MaxAcceptQueue))
	}
	return errors.Join(errs...)
}

// Deps are the layer's collaborators.
type Deps struct {
	// Mesh opens the outbound streams.
	Mesh Opener
	// Self is this node's id: the layer's Addr, raft's ServerAddress of
	// this node.
	Self string
	// Logger is the daemon's logger; the layer names it "raft".
	Logger *zap.Logger
	// Registerer receives the layer's metrics; nil registers none.
	Registerer prometheus.Registerer
}

// Layer is a raft.StreamLayer over mesh streams of kind KindRaft. A raft
// ServerAddress is a node id. Register ServeStream for mesh.KindRaft
// before the mesh runs.
type Layer struct {
	self   string
	mesh   Opener
	log    *zap.Logger
	met    *metrics
	accept chan *Conn // inbound streams for Accept; capacity is the queue bound
	// ctx ends at Close: it bounds Dial, and done is its Done.
	ctx    context.Context
	cancel context.CancelFunc
	done   <-chan struct{}

	// mu guards voters, closed and conns.
	mu     sync.Mutex
	voters map[string]bool
	closed bool
	conns  map[*Conn]struct{} // every open Conn, both directions
}

var _ raft.StreamLayer = (*Layer)(nil)

// New makes a layer; it starts nothing.
func New(cfg Config, deps Deps) (*Layer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Mesh == nil || deps.Self == "" || deps.Logger == nil {
		return nil, errors.New("raft stream layer: Mesh, Self and Logger are required")
	}
	met, err := newMetrics(deps.Registerer)
	if err != nil {
		return nil, fmt.Errorf("raft stream layer metrics: %w", err)
	}
	q := cfg.AcceptQueue
	if q == 0 {
		q = DefaultAcceptQueue
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Layer{self: deps.Self, mesh: deps.Mesh, log: deps.Logger.Named("raft"), met: met,
		accept: make(chan *Conn, q), ctx: ctx, cancel: cancel, done: ctx.Done(), conns: make(map[*Conn]struct{})}
	l.voters = voterSet(cfg.Voters)
	return l, nil
}

func voterSet(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// SetVoters replaces the voter set. Streams open with a node no longer
// listed are closed.
func (l *Layer) SetVoters(ids []string) error {
	if err := (Config{Voters: ids}).Validate(); err != nil {
		return err
	}
	l.mu.Lock()
	l.voters = voterSet(ids)
	var drop []*Conn
	for c := range l.conns {
		if !l.voters[c.remote.id] {
			drop = append(drop, c)
		}
	}
	l.mu.Unlock()
	for _, c := range drop {
		_ = c.Close()
	}
	return nil
}

// IsVoter reports whether id is in the voter set.
func (l *Layer) IsVoter(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.voters[id]
}

// ServeStream is the mesh handler of KindRaft. A stream from a node
// outside the voter set is refused (CodeNotVoter) and counted, never
// queued; one that finds the accept queue full is refused (CodeBusy). An
// accepted stream keeps this mesh goroutine until the stream is closed
// (by raft, the peer, the link or Close), so that the stream's credit
// goes back to the peer only then.
func (l *Layer) ServeStream(ctx context.Context, peer mesh.PeerInfo, s *mesh.Stream) {
	c := newConn(l, s, peer.ID)
	l.mu.Lock()
	switch {
	case l.closed:
		l.mu.Unlock()
		s.Reset(CodeClosed)
		l.met.in(resultClosed)
		return
	case !l.voters[peer.ID]:
		l.mu.Unlock()
		s.Reset(CodeNotVoter)
		l.met.in(resultNotVoter)
		l.log.Debug("raft stream refused: not a voter", zap.String("peer", peer.ID))
		return
	}
	select {
	case l.accept <- c:
		l.conns[c] = struct{}{}
		l.met.open.Inc()
	default:
		l.mu.Unlock()
		s.Reset(CodeBusy)
		l.met.in(resultQueueFull)
		l.log.Warn("raft stream refused: accept queue full", zap.String("peer", peer.ID))
		return
	}
	l.mu.Unlock()
	l.met.in(resultAccepted)
	select {
	case <-c.closed:
	case <-ctx.Done():
		_ = c.Close()
	case <-l.done:
		_ = c.Close()
	}
}

// Accept waits for the next inbound raft stream from a voter.
func (l *Layer) Accept() (net.Conn, error) {
	select {
	case c := <-l.accept:
		return c, nil
	case <-l.done:
		return nil, errClosed
	}
}

// Close stops accepting and dialing and closes every stream the layer
// handed out, queued ones included: every goroutine blocked on one
// (raft's, the mesh's handlers) returns. It is safe to call more than once.
func (l *Layer) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.cancel()
	conns := make([]*Conn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	for {
		select {
		case c := <-l.accept:
			_ = c.Close()
		default:
			return nil
		}
	}
}

// Addr is this node's raft address: its node id.
func (l *Layer) Addr() net.Addr { return Addr(l.self) }

// Dial opens a raft stream to the voter whose node id is address, waiting
// up to timeout for the mesh to open it.
func (l *Layer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	id := string(address)
	l.mu.Lock()
	closed, voter := l.closed, l.voters[id]
	l.mu.Unlock()
	if closed {
		l.met.out(resultClosed)
		return nil, errClosed
	}
	if !voter {
		l.met.out(resultNotVoter)
		return nil, fmt.Errorf("dial raft %q: %w", id, ErrNotVoter)
	}
	ctx, cancel := context.WithTimeout(l.ctx, timeout)
	defer cancel()
	s, err := l.mesh.OpenStream(ctx, id, mesh.KindRaft)
	if err != nil {
		l.met.out(resultFailed)
		return nil, fmt.Errorf("dial raft %q: %w", id, err)
	}
	c := newConn(l, s, id)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		s.Reset(CodeClosed)
		l.met.out(resultClosed)
		return nil, errClosed
	}
	l.conns[c] = struct{}{}
	l.met.open.Inc()
	l.mu.Unlock()
	l.met.out(resultOpened)
	return c, nil
}

// forget drops c from the open streams (Conn.Close).
func (l *Layer) forget(c *Conn) {
	l.mu.Lock()
	if _, ok := l.conns[c]; ok {
		delete(l.conns, c)
		l.met.open.Dec()
	}
	l.mu.Unlock()
}

// Addr is a raft address on the mesh: a node id.
type Addr string

// Network is "mesh".
func (Addr) Network() string { return "mesh" }

func (a Addr) String() string { return string(a) }
