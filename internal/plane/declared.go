package plane

// Workload is a declared workload (controller.workloads): the controller
// reconciles it every tick, keeping Replicas instances of it on distinct
// nodes (see the package doc). The config layer fills it in;
// Config.Validate checks it.
type Workload struct {
	// Name names the workload; it goes into each instance's config so two
	// workloads of one package on one node get distinct instance ids.
	Name string
	// Package is the package id, looked up in the Store.
	Package string
	// Version pins a version; empty means the newest in the store by
	// semantic version.
	Version string
	// Variant names the variant; empty lets the engine choose.
	Variant string
	// Node pins the workload to one node (the engine's pin).
	Node string
	// Prefer and Avoid are placement hints within the best tier.
	Prefer []string
	Avoid  []string
	// Replicas is the number of instances to keep, each on a distinct
	// node: 1 when 0 (the default), at most MaxReplicas; a workload pinned
	// to a Node has one.
	Replicas int
	// AllowEmulated lets the engine place the workload on an emulated
	// variant when no node runs a native one (Order.AllowEmulated).
	AllowEmulated bool
	// OnDemand, when set, makes the workload on demand (ondemand.go): no
	// instance until a node demands it (Controller.Demand), up to
	// Replicas, unloaded again when idle.
	OnDemand *OnDemand
}

// Store holds the signed packages the controller places by id
// (<data_dir>/store, filled by `nodeld package add`).
type Store interface {
	// Resolve returns the directory and version of package id at version,
	// or of its newest version by semantic version when version is "".
	// An unknown id or version is an error naming what the store holds.
	Resolve(id, version string) (dir, resolved string, err error)
}
