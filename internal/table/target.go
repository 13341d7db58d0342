package table

import "fmt"

// TargetKind says where a resolved role is served.
type TargetKind int

const (
	// TargetLocal is an instance on this host, reached over loopback HTTP.
	TargetLocal TargetKind = iota + 1
	// TargetRemote is a peer node, reached over the mesh.
	TargetRemote
)

// String returns "local" or "remote" ("unknown" for any other value).
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

// MarshalText encodes the kind as its String form, for status JSON.
func (k TargetKind) MarshalText() ([]byte, error) {
	return []byte(k.String()), nil
}

// UnmarshalText decodes the String form, so status JSON reads back.
func (k *TargetKind) UnmarshalText(b []byte) error {
	switch string(b) {
	case "local":
		*k = TargetLocal
	case "remote":
		*k = TargetRemote
	default:
		return fmt.Errorf("unknown target kind %q", b)
	}
	return nil
}

// Target is where a request for a role goes right now.
type Target struct {
	// Kind is TargetLocal or TargetRemote.
	Kind TargetKind `json:"kind"`
	// Base is the loopback base URL of a local instance, without a
	// trailing slash ("http://127.0.0.1:8080"). Empty for remote targets.
	Base string `json:"base,omitempty"`
	// Model is the model the instance serves, when known: the local
	// registration's, or the remote advertisement's "model" metadata.
	Model string `json:"model,omitempty"`
	// NodeID is the serving peer's node id for remote targets.
	NodeID string `json:"node_id,omitempty"`
	// Runtime names the instance's server software ("llama.cpp",
	// "ollama", ...), when known: the local registration's, or the remote
	// advertisement's "runtime" metadata. The proxy answers as Ollama does
	// where the instance is one, and pins mlx-lm requests to its default
	// model.
	Runtime string `json:"runtime,omitempty"`
	// WaitingForLink is set for a remote target whose node restarted and
	// has not linked again yet (KeepForRestart): it is chosen only when no
	// local instance and no node with a live link serves the role, and a
	// forward to it waits (within the mesh's restart wait) for the link.
	WaitingForLink bool `json:"waiting_for_link,omitempty"`
}
