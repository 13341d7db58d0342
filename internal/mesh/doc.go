// Package mesh is nodeld's node-to-node transport: QUIC links between
// configured peers, mutually authenticated by their ed25519 node keys,
// carrying one bidirectional stream per exchange.
//
// # Trust and admission
//
// Both sides present a self-signed certificate made from the node key
// (TLS 1.3, ALPN "nodeld/1"); the peer's node id is derived from the key in
// its certificate and nothing else. A key is admitted only when it is the
// pinned key of a configured peer: the key given in config, or, for a peer
// configured without one, the first key seen at its address (trust on
// first use, persisted in <data_dir>/known_peers.json by temp file, fsync,
// rename and directory fsync, mode 0600). Any other key is refused inside
// the handshake (VerifyPeerCertificate), before a stream can exist; a
// different key at a pinned address is refused and shown in Status until
// the operator pins it in config. A configured key supersedes a first-use
// pin for good: the pin is dropped from known_peers.json when the key
// appears in config (at New or ApplyConfig), so removing the key later
// leaves the address unpinned rather than trusting the replaced key again.
// Refusals are counted (nodeld_mesh_handshakes_total) and handed to
// Deps.Recorder (KindPeerRefused), the daemon's shared rate-limited chain
// recorder: anyone who can reach the listener can make handshakes fail,
// so the record is keyed by the remote IP (without its port) or, for a
// dial, the configured address, and by the fixed Refusal* reason, never
// by the key presented. The recorder chains the first of a key per period
// and sums up the rest (KindPeerRefusalsSuppressed); a refusal is logged
// when chained.
//
// Inbound admission on first use needs the remote address during the
// handshake: the listener's tls.Config.GetConfigForClient builds a
// per-handshake config whose certificate check knows it. Listening and
// dialing share one quic.Transport (one UDP socket), so a node's outbound
// connections come from its mesh.listen address, the address its peers
// have configured.
//
// # Links
//
// There is one link per peer, reused for every stream. When both sides
// dial at once, both keep the connection dialed by the lower node id and
// close the other with CodeDuplicate (a link arriving more than
// DuplicateSettleWindow after the current one replaces it: the peer lost
// the old one). Links keep alive (Config.Keepalive; idle timeout
// IdleTimeoutFactor times it); a lost link is redialed with capped
// exponential backoff and jitter. The stateless reset key is derived from
// the node key, so a restarted node resets its peers' stale links.
//
// A restarted peer (killed and started again on the same key and address)
// is recognised by the certificate it presents, which each run makes anew:
// a link carrying another certificate than the current link's replaces it
// at once, whatever DuplicateSettleWindow and the dialers say, and the old
// one is closed with CodeStale. A link that ends with a stateless reset is
// redialed at once. A stream opened on a link to the peer's previous run
// is sent again, once, on the link to its new run when no run can have
// read it (replay.go: a stateless reset drawn by the stream's own packet,
// nothing heard from the peer since the stream's first write, at most
// replayCap written, nothing read); OpenStream retires a link it finds
// ended and opens on the next one, and waits up to RestartLinkWait for the
// link to a peer that restarted. PeerRestarted tells a caller that may
// send its request twice (an inference request) that the peer's new run
// is linking. The connection that loses a simultaneous dial is served
// until it is closed, so streams the peer opened on it before it settled
// are answered.
// Failure detection does not wait for the idle timeout: each end of a link
// sends a one-byte QUIC datagram LivenessHeartbeatsPerTimeout times per
// Config.LivenessTimeout (default 2 s), and a link that hears none for the
// timeout is closed with CodeDead (watchLiveness), so a peer killed,
// frozen or cut off is retired within the timeout. LinkFailed tells a
// stream error caused by the link dying from a reset by the peer.
// Losing a link or removing a peer calls Table.RemoveNode for it, so its
// roles stop resolving at once, with one exception: a link that ended with
// a stateless reset (the peer restarted; its new run links again in a
// moment) or that the peer closed as it stopped gracefully (CodeShutdown:
// a restart or an upgrade, as often as not) calls Table.KeepForRestart
// instead. The peer's routes then stay,
// waiting for its link, for at most RestartLinkWait (Deps.RestartLinkWait):
// the table ranks them after every local instance and every peer with a
// live link, so they only serve a request nothing else can, which
// OpenStream then holds until the new link is up. The new link's first
// advertisement round replaces the kept routes and ends the wait
// (Table.Linked): until then they rank last, so no request goes to a new
// run that may not serve the role yet while another node does. Without a
// new link by the end of the wait, expireRestart removes them
// (Table.RemoveLinking) and OpenStream returns ErrNoLink; for a peer that
// closed its link stopping (not one reset by its new run) the mesh then
// calls Deps.OnPeerStopped, so the controller counts it dead without
// waiting for its own dead_after. (For a peer that
// stopped, OpenStream holds only inference streams: a control call or an
// artifact fetch to it fails at once.) An idle or liveness timeout, a close by this node, a refused peer
// or one removed from the config still drops its routes at once, so
// failover to another node never waits.
//
// # Streams
//
// A stream's first byte is its StreamKind; then come length-prefixed
// frames (WriteFrame, ReadFrame). Malformed, oversized or unknown input
// resets only that stream with a StreamCode* error code and is counted;
// the link and the node carry on. KindAdvert is served by the mesh: one
// frame (FrameAdverts) holding a JSON list of at most MaxAdvertsPerFrame
// advertisements, handed to Table.IngestAdvertisement with the link's
// verified node id as sender; the roles the frame no longer names are
// dropped (Table.RetainRemote). Other kinds (KindInfer, KindCtl,
// KindArtifact, KindNotice) go to the Handler registered with Handle,
// which owns the stream.
//
// Handlers and the callers of OpenStream get a *Stream, never a quic-go
// type: quic-go is imported by this package alone. A Stream ends cleanly
// on the write side (CloseWrite), as a whole (Close: stop reading, which
// unblocks a pending Read, and end the write side cleanly), or with a
// StreamCode: both directions (Reset) or one (StopReading, AbortWrite);
// FinishReading takes the peer's clean end when it came with its last
// bytes and stops reading otherwise. ResetCode tells the code a peer
// aborted with from other errors. A stream from OpenStream sends its kind
// byte with the first bytes written, so a request written at once is one
// packet; AppendFrameHeader and ReadFrameInto let a caller write several
// frames in one Write and read one without allocating.
//
// Flow control is quic-go's default (a stream's window starts at 512 KiB
// and grows with its use up to 6 MiB; a link's starts at 768 KiB and grows
// up to 15 MiB): it bounds what a peer can make this node buffer for
// streams its handlers do not read. Larger
// initial windows did not speed up 1 MiB requests on loopback
// (BENCHMARKS.md, "Mesh hop").
//
// Stream credit: a served stream's place (QUIC's MAX_STREAMS) is given
// back with the next answer written on the link rather than in a packet
// of its own (quic.Config.RequireStreamCreditRelease), at once when
// creditBatch streams wait and after creditFlushDelay in any case: a
// request and its answer are then one packet each way.
//
// Advertisements are sent to each linked peer when its link comes up, on
// every table change and every AdvertInterval: the table's, each only to
// the peers its serving allowlist names (Table.MeshPeerAllowed, by node id
// or configured name; default deny), plus Deps.ExtraAdverts to every peer.
// The table is a required dependency whose interface (AdvertTable) holds
// the serving policy, so no table can leave default deny out.
//
// # Concurrency
//
// New starts nothing. Run binds the socket and owns every goroutine: the
// accept loop, the advert loop, the OnPeersChanged notifier, one dial loop
// per configured peer, and per link a stream-accept loop, an advert sender,
// one goroutine per incoming stream in progress (bounded by
// Config.MaxStreams, at least MaxStreamsPerPeer, per link; a goroutine
// that served one waits up to workerIdle for the next, keeping its grown
// stack) and, with Deps.OnLinkUp, one goroutine calling it (its context
// ends when the link stops being the peer's link). Run returns after closing every link and waiting for all of them.
// All methods are safe for concurrent use; Handle should be called before
// Run. Table, Auditor, Recorder, OnPeersChanged and OnLinkUp are never
// called with the mesh's locks held.
package mesh
