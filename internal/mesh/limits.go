package mesh

import "time"

// Bounds and timings the mesh enforces. Every size or count here is checked
// before anything derived from the bounded input is allocated.
const (
	// ALPN is the only application protocol a mesh link speaks.
	ALPN = "nodeld/1"

	// DefaultKeepalive is the keep-alive period when Config.Keepalive is 0.
	DefaultKeepalive = 15 * time.Second
	// IdleTimeoutFactor times the keep-alive period is the idle timeout
	// after which a silent link is dropped.
	IdleTimeoutFactor = 3
	// DefaultLivenessTimeout is how long a link may go without hearing a
	// liveness heartbeat from its peer before it is closed as dead, when
	// Config.LivenessTimeout is 0. It is independent of the keep-alive:
	// a peer killed with SIGKILL, frozen or cut off is noticed within it,
	// not after IdleTimeoutFactor keep-alive periods.
	DefaultLivenessTimeout = 2 * time.Second
	// MinLivenessTimeout and MaxLivenessTimeout bound a configured
	// liveness timeout.
	MinLivenessTimeout = 200 * time.Millisecond
	MaxLivenessTimeout = 60 * time.Second
	// LivenessHeartbeatsPerTimeout heartbeats are sent per liveness
	// timeout (one datagram of one byte each), so a link is closed only
	// after that many in a row were lost.
	LivenessHeartbeatsPerTimeout = 8
	// MinLivenessInterval floors the heartbeat period.
	MinLivenessInterval = 25 * time.Millisecond
	// HandshakeTimeout bounds a QUIC handshake (idle time before it
	// completes).
	HandshakeTimeout = 5 * time.Second

	// DefaultAdvertInterval is how often advertisements are re-sent to
	// every connected peer when Config.AdvertInterval is 0.
	DefaultAdvertInterval = 20 * time.Second
	// AdvertSendTimeout bounds one advertisement exchange on one link.
	AdvertSendTimeout = 10 * time.Second
	// MaxAdvertFrameBytes bounds the one frame of an advert stream.
	MaxAdvertFrameBytes = 256 << 10
	// MaxAdvertsPerFrame bounds the advertisements in one advert frame.
	MaxAdvertsPerFrame = 256

	// MaxStreamsPerPeer is the most concurrent bidirectional streams a
	// peer may open on its link (quic.Config.MaxIncomingStreams) unless
	// Config.MaxStreams raises it.
	MaxStreamsPerPeer = 64
	// MaxStreamsLimit caps Config.MaxStreams.
	MaxStreamsLimit = 1 << 17
	// StreamHeadTimeout bounds the wait for the kind byte of an incoming
	// stream.
	StreamHeadTimeout = 10 * time.Second

	// BackoffBase is the first reconnect delay; it doubles per failed
	// attempt up to BackoffMax, with jitter.
	BackoffBase = 500 * time.Millisecond
	// BackoffMax caps the reconnect delay.
	BackoffMax = 30 * time.Second

	// DuplicateSettleWindow: two links to the same peer established
	// within this window are a simultaneous dial and settle on the one
	// dialed by the lower node id. A new link arriving later than this
	// after the current one means the peer lost the old link: the new one
	// wins.
	DuplicateSettleWindow = 5 * time.Second
	// DuplicateDrain is how long the losing connection of a simultaneous
	// dial is kept open for streams already started on it.
	DuplicateDrain = 10 * time.Second

	// RestartLinkWait is how long a stream to a peer that restarted (its
	// link ended with a stateless reset) waits for the link to its new
	// run, when the caller gives no earlier deadline: the peer dials its
	// peers when it starts, and this side redials at once. The loss is
	// reported with the wait (table.PeerLinkLost), so the table can keep
	// the peer's routes for as long, and its end (table.PeerWaitOver).
	RestartLinkWait = 5 * time.Second

	// MaxPeers bounds the configured peers.
	MaxPeers = 1024
	// MaxKnownPeersFileBytes bounds known_peers.json when it is read.
	MaxKnownPeersFileBytes = 1 << 20
)
