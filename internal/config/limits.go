package config

import (
	"time"

	"github.com/nodeld/nodeld/internal/grammar"
)

// Bounds enforced while decoding and validating. Decoding checks
// MaxConfigBytes before parsing, so every count in a config (roles, peers,
// instances) is bounded by the input size.
const (
	// MaxConfigBytes bounds the size of a config file.
	MaxConfigBytes = 1 << 20

	// MaxProblems bounds the problems Parse, Validate and Check report;
	// the rest are counted in one last problem.
	MaxProblems = 100

	// MaxSocketPathLen bounds the operator socket path (sun_path is 104
	// bytes on the BSDs and macOS, 108 on Linux; the smaller one wins).
	MaxSocketPathLen = 103

	// MaxBodyLimit caps max_body_bytes, mesh_max_body_bytes and
	// max_response_bytes: a bound larger than this is a typo.
	MaxBodyLimit = 1 << 30

	// MaxConcurrency caps every concurrency and in-flight setting.
	MaxConcurrency = 1 << 16

	// MaxPidsMax caps host.isolation.pids_max.
	MaxPidsMax = 1 << 22
	// MaxReadPaths caps host.isolation.read_paths.
	MaxReadPaths = 64
	// maxIsolationPath bounds one of host.isolation.read_paths.
	maxIsolationPath = 4096

	// MaxVoters caps the controllers of one replicated set (this node and
	// controller.voters): seven survive three failures.
	MaxVoters = 7
	// MaxReplicas caps controller.workloads[].replicas.
	MaxReplicas = 64
	// MaxReschedulesLimit caps controller.max_reschedules.
	MaxReschedulesLimit = 1000
	// MaxRescheduleWindow caps controller.reschedule_window (a week).
	MaxRescheduleWindow = 168 * time.Hour
	// MaxSwapGrace caps controller.swap_grace.
	MaxSwapGrace = time.Minute
	// MaxRetryBackoff caps controller.retry_backoff: the doubling backoff
	// is capped there too.
	MaxRetryBackoff = 5 * time.Minute
	// MaxPlaceTimeout caps controller.place_timeout: a place call's
	// request lifetime is bounded by the workload.ctl protocol.
	MaxPlaceTimeout = 280 * time.Second
	// MaxDescribeTimeout caps controller.describe_timeout.
	MaxDescribeTimeout = time.Minute
)

// Defaults that Default() applies.
const (
	// DefaultDataDir is node.data_dir when a file does not set it.
	DefaultDataDir = "/var/lib/nodeld"
	// DefaultAdminListen is admin.listen when a file does not set it.
	DefaultAdminListen = "127.0.0.1:9464"
	// DefaultMaxBodyBytes is inference.limits.max_body_bytes.
	DefaultMaxBodyBytes = 8 << 20
	// DefaultMeshMaxBodyBytes is inference.limits.mesh_max_body_bytes.
	DefaultMeshMaxBodyBytes = 2 << 20
	// DefaultMaxResponseBytes is inference.limits.max_response_bytes.
	DefaultMaxResponseBytes = 64 << 20
	// DefaultConcurrency is inference.limits.concurrency.
	DefaultConcurrency = 64
	// DefaultMaxConnections is inference.limits.max_connections.
	DefaultMaxConnections = 512
	// DefaultMaxInflightPerPeer is mesh.max_inflight_per_peer.
	DefaultMaxInflightPerPeer = 8
	// DefaultMaxInflightTotal is mesh.max_inflight_total.
	DefaultMaxInflightTotal = 64
	// DefaultTier is the tier of a peer whose tier is omitted: the lowest,
	// so that forgetting the key never grants trust.
	DefaultTier = TierDiscovered
	// DefaultMaxReschedules is controller.max_reschedules.
	DefaultMaxReschedules = 5
	// DefaultMinTier is a controller.policy.kinds entry's min_tier when
	// it is omitted.
	DefaultMinTier = TierPaired
	// SelfRef names this node itself where the controller's keys name
	// nodes (controller.workloads[].node, prefer, avoid, deny_nodes).
	SelfRef = "self"
	// SocketName is the operator socket's file name inside node.data_dir
	// when admin.socket is empty.
	SocketName = "nodeld.sock"
)

// Trust tiers, lowest first.
const (
	TierDiscovered = grammar.TierDiscovered
	TierPaired     = grammar.TierPaired
	TierPinned     = grammar.TierPinned
)
