package table

// TargetKind says where a resolved role is served.
type TargetKind int

const (
	// TargetLocal is an instance on this host, reached over loopback HTTP.
	TargetLocal TargetKind = iota + 1
	// TargetRemote is a peer node, reached over the mesh.
	TargetRemote
)

// String returns "local" or "remote".
func (k TargetKind) String() string {
	switch k {
	case TargetLocal:
		return "local"
	case TargetRemote:
		return "remote"
	default:
		return "unknown"
	}
}

// Target is where a request for a role goes right now.
type Target struct {
	// Kind is TargetLocal or TargetRemote.
	Kind TargetKind
	// Base is the loopback base URL of a local instance, without a
	// trailing slash ("http://127.0.0.1:8080"). Empty for remote targets.
	Base string
	// Model is the model the local instance serves, when known.
	Model string
	// NodeID is the serving peer's node id for remote targets.
	NodeID string
}
