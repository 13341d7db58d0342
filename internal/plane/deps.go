package plane

import (
	"context"
	"crypto/ed25519"
	"time"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/facts"
	"github.com/nodeld/nodeld/internal/pkg"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Package is a verified package, ready to place. dispatch.VerifiedPackage
// implements it; the adapter in cmd/nodeld hands it back to
// dispatch.PlaceDecided.
type Package interface {
	Verified() *pkg.Verified
}

// Description is what one describe round trip tells the controller: the
// node's signed facts and, when the node lets it read them, its instances.
type Description struct {
	// Facts are the node's signed facts as received.
	Facts facts.Signed
	// Status lists the node's instances (with departed ones), nil when
	// the node did not say.
	Status *ctl.StatusList
	// Host is what the node's workload-host advertisement says of its
	// host; nil when the describe carried none (HostNote says why). A
	// node whose host is absent or disabled is not placed on (a gate
	// verdict the explanation shows), though its describe counts as
	// contact and its instances are still watched and torn down.
	Host     *ctl.HostMetadata
	HostNote string
}

// Dispatcher is the caller side of workload.ctl, as the controller uses
// it. Errors of attempted calls are *ctl.CallError with their class
// (refused, unreachable, indeterminate); any other error means nothing was
// sent. internal/dispatch implements it through an adapter in cmd/nodeld.
type Dispatcher interface {
	// Describe returns node's signed facts and instances.
	Describe(ctx context.Context, node string) (Description, error)
	// VerifyPackage verifies the package in dir against the controller's
	// anchors and revocations.
	VerifyPackage(ctx context.Context, dir string) (Package, error)
	// PlaceDecided sends place (start) or load under decisionID, a
	// decision the controller chained.
	PlaceDecided(ctx context.Context, node string, p Package, variant string, cfg ctl.InstanceConfig, start bool, decisionID string) (ctl.PlaceResult, error)
	// Status lists node's instances, in-flight decisions and departed
	// instances.
	Status(ctx context.Context, node string) (ctl.StatusList, error)
	// Start starts a loaded or stopped instance again (under its host's
	// supervision); Stop and Unload take an instance down. The
	// dispatcher chains its own decision for each.
	Start(ctx context.Context, node, instanceID string) error
	Stop(ctx context.Context, node, instanceID string) error
	Unload(ctx context.Context, node, instanceID string) error
}

// Revocations is the revocation list the controller consults before it
// starts an instance it placed again (Start); *pkg.Revocations implements
// it. (Places are refused through Dispatcher.VerifyPackage, which checks
// the same list.)
type Revocations interface {
	// Check returns a *pkg.VerifyError with pkg.CodeRevoked and the
	// subject when the manifest's id, manifestHash (if not empty) or one
	// of signers is revoked, else nil.
	Check(m *pkg.Manifest, manifestHash string, signers ...ed25519.PublicKey) error
}

// Appender appends to the audit chain; *chain.Chain implements it. The
// entry's Hash is the decision id.
type Appender interface {
	Append(source, kind string, payload any) (chain.Entry, error)
}

// Deps are the controller's dependencies.
type Deps struct {
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Chain receives every decision; a decision that cannot be chained is
	// not taken. Required.
	Chain Appender
	// Dispatcher sends the calls. Required.
	Dispatcher Dispatcher
	// StatePath is the controller.json state file, where the state is
	// kept when State is nil. One of them is required.
	StatePath string
	// State keeps the state instead of the state file (a replicated
	// store: internal/ctlraft); nil keeps it in StatePath.
	State StateStore
	// Logger is for Run's tick errors; nil logs nothing.
	Logger *zap.Logger
	// Registerer receives the nodeld_plane_* metrics; nil registers none.
	Registerer prometheus.Registerer
	// Store resolves the package ids of declared workloads; nil means no
	// store (declared workloads are then unplaceable, with that reason).
	Store Store
	// Revocations is the controller's revocation list, which Start
	// consults; nil means none (a start then goes to the host, which
	// checks its own list).
	Revocations Revocations
	// Placed keeps the package of each operator placement (the bytes
	// placed, by manifest hash), so its failover places exactly them
	// whatever becomes of the operator's directory; nil keeps none (a
	// failover then verifies the order's directory again, and places it
	// only with the manifest hash placed). *pkg.PlacedStore implements
	// it.
	Placed PlacedStore
	// Leadership, with a replicated State, says whether this controller
	// leads: only the leader ticks, places, dispatches and answers
	// demands (leader.go). nil: it always leads.
	Leadership Leadership
	// ManualTicks (tests) leaves Run's loop unstarted: the test calls Tick
	// itself, on its clock, and a Tick applies what was handed over first.
	ManualTicks bool
}

// PlacedStore keeps placed packages (kept.go).
type PlacedStore interface {
	// Keep copies the verified package v (from v.Dir) into the store, if
	// it is not there yet, and returns its directory there.
	Keep(ctx context.Context, v *pkg.Verified) (string, error)
	// Prune removes the kept packages whose manifest hash used does not
	// report in use.
	Prune(used func(hash string) bool) (int, error)
}
