package demand

import (
	"context"
	"crypto/ed25519"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// RefreshInterval is how often Node.Run tells the table the controller's
// standbys, besides the controller's own Refresh calls.
const RefreshInterval = time.Second

// Controller is what a controller offers the demand call: its on-demand
// workloads and the handler of an allowed demand.
type Controller interface {
	Source
	DemandHandler
}

// Deps are a Node's collaborators.
type Deps struct {
	// Key is this node's key; required.
	Key ed25519.PrivateKey
	// Table is this node's table (its standbys); required.
	Table StandbyTable
	// Mesh sends calls to peers' controllers; nil without a mesh.
	Mesh Opener
	// Controller, when set, makes this node serve demand calls (Server)
	// and answer its own in memory.
	Controller Controller
	// Advertiser, when set, is refreshed every RefreshInterval by Run.
	Advertiser *Advertiser
	// Recorder chains refused calls; nil only counts and logs them.
	Recorder   Recorder
	Logger     *zap.Logger
	Registerer prometheus.Registerer
	// Now is the clock of signed times (a call's issue and expiry, their
	// checks); nil means time.Now. The daemon's is the workload.ctl clock.
	Now func() time.Time
	// WindowNow is the clock of the coalescing windows and the token
	// buckets; nil means time.Now. Tests step it.
	WindowNow func() time.Time
}

// Node is a node's demand side: the Client and Holds every node has, the
// Server of a node that runs a controller.
type Node struct {
	Client *Client
	// Server is nil unless Deps.Controller is set.
	Server *Server
	Holds  *Holds
	adv    *Advertiser
}

// New builds a Node. It starts nothing.
func New(deps Deps) (*Node, error) {
	if len(deps.Key) != ed25519.PrivateKeySize || deps.Table == nil {
		return nil, errors.New("demand: key and table are required")
	}
	met, err := newMetrics(deps.Registerer)
	if err != nil {
		return nil, err
	}
	log, now, window := deps.Logger, deps.Now, deps.WindowNow
	if log == nil {
		log = zap.NewNop()
	}
	if now == nil {
		now = time.Now
	}
	if window == nil {
		window = time.Now
	}
	n := &Node{adv: deps.Advertiser}
	n.Client = &Client{key: deps.Key, self: selfID(deps.Key), mesh: deps.Mesh, met: met, now: now}
	if deps.Controller != nil {
		n.Server, err = newServer(ServerDeps{Key: deps.Key, Source: deps.Controller, Handler: deps.Controller,
			Recorder: deps.Recorder, Logger: log, Now: now, WindowNow: window}, met)
		if err != nil {
			return nil, err
		}
		n.Client.local = n.Server
	}
	n.Holds = &Holds{tbl: deps.Table, call: n.Client, log: log, now: window, roles: make(map[string]*roleCalls)}
	return n, nil
}

// Run runs the Holds' calls and refreshes the Advertiser until ctx ends,
// and returns once every call it started has.
func (n *Node) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { n.Holds.Run(ctx) })
	if n.adv != nil {
		t := time.NewTicker(RefreshInterval)
		defer t.Stop()
		for {
			n.adv.Refresh()
			select {
			case <-ctx.Done():
				wg.Wait()
				return nil
			case <-t.C:
			}
		}
	}
	wg.Wait()
	return nil
}
