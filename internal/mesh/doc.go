// Package mesh is nodeld's node-to-node transport: QUIC links between
// configured peers, mutually authenticated by their ed25519 node keys, one
// link per peer carrying one bidirectional stream per exchange. quic-go is
// imported by this package alone; everyone else sees *Stream and StreamCode.
// Mesh composes parts with one job each: peerSet (the peers, their state
// and links), admission (handshake checks, first-use pins, refusal
// records), links (dial, accept, adopt, replace, lose; open streams),
// liveness (heartbeats), streamServer (kind byte, Handler dispatch,
// workers), advertiser (the advertisement exchange) and eventQueue (the
// ordered table.PeerEvents to Deps.PeerEvents).
//
// # Invariants
//
//   - A peer's node id comes from the key in its certificate and nothing
//     else. Only a configured peer's pinned key (configured, or pinned on
//     first use in known_peers.json) is admitted; any other is refused
//     inside the handshake, before a stream can exist.
//   - One link per peer: of a simultaneous dial both keep the connection
//     dialed by the lower node id. A link silent for
//     Config.LivenessTimeout is closed as dead; a peer's new run (another
//     certificate) replaces its old link at once.
//   - The mesh decides no route: link changes, advertisement rounds and
//     removed peers go in order as events; OpenStream changes no route,
//     and inference is never replayed.
//   - Malformed, oversized or unknown input resets only its stream with a
//     StreamCode and is counted. Refusals are keyed by address and
//     reason, never by key. Adverts go only to peers the table's serving
//     allowlist names (default deny).
//
// # Concurrency
//
// New starts nothing. Run binds the socket and owns every goroutine and
// returns after closing every link and waiting for all of them. The
// peerSet's lock guards peers and links; admission, streamServer and
// eventQueue have locks of their own. All methods are safe for concurrent
// use; Handle should be called before Run. Table, Auditor, Recorder,
// OnPeersChanged and OnLinkUp are never called with the mesh's locks held.
//
// The long story is docs/internals.md "internal/mesh".
package mesh
