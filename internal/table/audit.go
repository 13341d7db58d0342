package table

// Audit event kinds the table records, all with source AuditSource.
const (
	// KindMeshExpose records a change of a role's exposure (ExposeEvent).
	KindMeshExpose = "infer.mesh.expose"
	// KindMeshAllow records a change of a role's serve allowlist
	// (MeshAllowEvent).
	KindMeshAllow = "infer.mesh.allow"
	// KindRemoteAllow records a change of a role's consumer allowlist
	// (RemoteAllowEvent).
	KindRemoteAllow = "infer.remote.allow"
	// KindAdvertRefused records a refused advertisement
	// (AdvertRefusedEvent).
	KindAdvertRefused = "infer.advert.refused"
)

// Reasons an advertisement is refused, as recorded in AdvertRefusedEvent.Why
// and passed as the reason to Options.RecordRefusal: a fixed set, so that
// a recorder can count repeats of one reason together.
const (
	// ReasonOtherNode: the advertisement names a node other than the
	// verified sender.
	ReasonOtherNode = "advertisement is for another node"
	// ReasonNotAdmitted: there is no mesh admission, or the sender does not
	// qualify.
	ReasonNotAdmitted = "peer not admitted as a trusted node"
	// ReasonNotAllowed: the sender is not on the role's use_from allowlist.
	ReasonNotAllowed = "node is not allowed to serve this role"
	// ReasonTooLarge: the advertisement exceeds MaxAdvertMethods,
	// MaxAdvertMetadata (MaxHostAdvertMetadata for a workload host's) or
	// MaxAdvertFieldLen.
	ReasonTooLarge = "advertisement exceeds the size limits"
)

// ExposeEvent is the payload of KindMeshExpose.
type ExposeEvent struct {
	Role    string `json:"role"`
	NodeID  string `json:"node_id"`
	Exposed bool   `json:"exposed"`
}

// MeshAllowEvent is the payload of KindMeshAllow.
type MeshAllowEvent struct {
	Role    string `json:"role"`
	Peer    string `json:"peer"`
	Allowed bool   `json:"allowed"`
	// Server is this node's id.
	Server string `json:"server"`
}

// RemoteAllowEvent is the payload of KindRemoteAllow.
type RemoteAllowEvent struct {
	Role    string `json:"role"`
	Node    string `json:"node"`
	Allowed bool   `json:"allowed"`
	// Consumer is this node's id.
	Consumer string `json:"consumer"`
}

// AdvertRefusedEvent is the payload of KindAdvertRefused.
type AdvertRefusedEvent struct {
	// Role is the role of an infer.<role> advertisement; empty for a
	// workload-host one, which Name names instead.
	Role string `json:"role"`
	Name string `json:"name,omitempty"`
	// Sender is the node id the connection was verified as.
	Sender string `json:"sender"`
	// AdvertisedNode is the node id the advertisement claims.
	AdvertisedNode string `json:"advertised_node"`
	Why            string `json:"why"`
}
