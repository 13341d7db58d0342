package ctl

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/nodeld/nodeld/internal/grammar"
)

// Lifecycle states a workload host reports for an instance
// (InstanceStatus.Lifecycle, InstanceState.State; reference 4.3). The
// host sets them; a controller reads them, so both take them from here.
const (
	// StateLoaded: the package is fetched and verified and the instance
	// listed, but no run was started (load, or a place without start).
	StateLoaded = "loaded"
	// StateRunning: its supervisor reports it up and healthy.
	StateRunning = "running"
	// StateUnhealthy: running but failing its health checks.
	StateUnhealthy = "unhealthy"
	// StateRestarting: its supervisor is restarting it within the
	// restart budget.
	StateRestarting = "restarting"
	// StateStopped: stopped by a verb, by a start that failed, or by the
	// host's shutdown; it may be started again.
	StateStopped = "stopped"
	// StateFailed: the restart budget ran out, the server listened
	// beyond loopback, a start failed, or a failed start could not be
	// rolled back (InstanceState.Reason says which). It stays listed
	// until started again or unloaded.
	StateFailed = "failed"
)

// Reasons of an instance's state (InstanceState.Reason): why it is not
// running when it should be. A controller may branch on them; they are
// never renamed.
const (
	// ReasonRestartBudget (failed): its supervisor spent the restart
	// budget; the host restarts it no more until a start.
	ReasonRestartBudget = "restart_budget"
	// ReasonNotLoopback (failed): its server listened beyond loopback and
	// was stopped; every later start of it is refused.
	ReasonNotLoopback = "not_loopback"
	// ReasonStartFailed (failed): a start verb's start failed; (unhealthy,
	// restarting) a restart's start failed.
	ReasonStartFailed = "start_failed"
	// ReasonRollback (failed): a place's start failed and the unload that
	// should have rolled it back failed too.
	ReasonRollback = "rollback"
	// ReasonHealth (unhealthy, restarting): its health checks fail.
	ReasonHealth = "health"
	// ReasonExited (unhealthy, restarting): its process exited.
	ReasonExited = "exited"
)

// Reasons of a Departed instance: why the host took it down on purpose.
const (
	// DepartedUnloaded: a controller's unload.
	DepartedUnloaded = "unloaded"
	// DepartedRevoked: the host's revocation teardown (a subject of its
	// package was revoked).
	DepartedRevoked = "revoked"
)

// InstanceConfig is the instance configuration a place may carry (the
// PlaceParams.Config object). It is part of the instance's identity
// (InstanceID), so the controller that sends it and the host that decodes
// it use this one type.
type InstanceConfig struct {
	// Port is the loopback port of the instance's server; 0 picks a free
	// one for each run.
	Port int `json:"port,omitempty"`
	// Workload names the declared workload the instance belongs to (a
	// grammar Name), so two workloads of one package on one node get
	// distinct instance ids; empty for an operator's placement. The
	// host runs the instance the same either way.
	Workload string `json:"workload,omitempty"`
}

// Validate reports a config no host accepts: a port outside 0..65535, a
// workload that is not a grammar Name.
func (c InstanceConfig) Validate() error {
	if c.Port < 0 || c.Port > 65535 {
		return fmt.Errorf("instance config: port %d outside 0..65535", c.Port)
	}
	if c.Workload != "" && !grammar.ValidName(c.Workload) {
		return fmt.Errorf("instance config: workload %q is not a name", c.Workload)
	}
	return nil
}

// InstanceID returns the deterministic instance id of a package placed
// with cfg on node: <package>-<8 hex of SHA-256 over package, version,
// variant, manifest hash and config>-<node>. The same workload and config
// on the same node always get the same id, so a controller knows the id a
// host will report before it sends the place.
//
// The encoding is a wire contract: each of package, version, variant,
// manifest hash and the JSON of cfg, each followed by one 0x1f byte.
// Changing it renames every instance placed by an older node.
func InstanceID(pkgID, version, variant, manifestHash string, cfg InstanceConfig, node string) string {
	c, _ := json.Marshal(cfg)
	h := sha256.New()
	for _, s := range []string{pkgID, version, variant, manifestHash, string(c)} {
		h.Write([]byte(s))
		h.Write([]byte{0x1f})
	}
	return pkgID + "-" + hex.EncodeToString(h.Sum(nil))[:8] + "-" + node
}
