// Package mesh is nodeld's node-to-node transport: QUIC links between
// configured peers, mutually authenticated by their ed25519 node keys, one
// link per peer carrying one bidirectional stream per exchange. It serves
// KindAdvert itself (handing advertisements to the table) and hands every
// other stream kind to the Handler registered for it. quic-go is imported
// by this package alone; everyone else sees *Stream and StreamCode.
//
// # Invariants
//
//   - A peer's node id comes from the key in its certificate and nothing
//     else. A key is admitted only when it is a configured peer's pinned
//     key (configured, or pinned on first use in known_peers.json); any
//     other is refused inside the handshake, before a stream can exist.
//   - One link per peer: of a simultaneous dial both keep the connection
//     dialed by the lower node id. A link that hears no heartbeat for
//     Config.LivenessTimeout is closed as dead; a peer's new run (another
//     certificate) replaces its old link at once.
//   - The mesh decides no route: link changes, advertisement rounds and
//     removed peers go in order as table.PeerEvents to Deps.PeerEvents;
//     OpenStream changes no route, and inference is never replayed.
//   - Malformed, oversized or unknown input resets only its stream with a
//     StreamCode and is counted; the link and the node carry on. Handshake
//     refusals are recorded keyed by address and reason, never by key.
//   - Advertisements go only to the peers the table's serving allowlist
//     names (default deny).
//
// # Concurrency
//
// New starts nothing. Run binds the socket and owns every goroutine (the
// accept, advert and dial loops, per link its stream-accept loop, advert
// sender and one bounded goroutine per incoming stream, and the OnLinkUp
// callers); it returns after closing every link and waiting for all of
// them. All methods are safe for concurrent use; Handle should be called
// before Run. Table, Auditor, Recorder, OnPeersChanged and OnLinkUp are
// never called with the mesh's locks held.
//
// The long story (trust and admission, links, restarts and liveness,
// streams, flow control and credit, advertisements) is docs/internals.md
// "internal/mesh".
package mesh
