package dispatch

import "time"

// Artifact serving bounds. The wire bounds (piece size, control frame
// and refusal message sizes) are the protocol's, in package ctl.
const (
	// MaxConcurrentArtifactStreams bounds the files served at once, over
	// every peer; further authorised fetches wait for a slot.
	MaxConcurrentArtifactStreams = 8
	// MaxArtifactStreamsPerPeer bounds the files served at once to one
	// peer (a host fetches one file at a time per place), so one peer
	// never holds every slot.
	MaxArtifactStreamsPerPeer = 2
	// ArtifactSlotWait bounds an authorised fetch's wait for its slots;
	// then its stream is reset and the fetcher resumes later. It is
	// shorter than the host's wait for an answer (30 s), so the host sees
	// the reset rather than its own timeout.
	ArtifactSlotWait = 20 * time.Second
	// ArtifactRequestTimeout bounds the wait for a fetch frame. No slot is
	// held meanwhile.
	ArtifactRequestTimeout = 10 * time.Second
	// ArtifactWriteTimeout bounds the write of one frame to a fetcher; a
	// fetcher that stops reading loses its stream, not a slot forever.
	ArtifactWriteTimeout = 30 * time.Second
	// OfferGrace keeps an offer of the operator's Place after its call
	// returned, so that a host resuming a fetch it already started is not
	// refused at once. PlaceDecided offers have none: a controller's
	// target that it moved on from must not fetch and load later.
	OfferGrace = 30 * time.Second
	// MaxOffers bounds the offers held at once (places in flight plus
	// those in their grace), each a decision offered to one node.
	MaxOffers = 256
	// MaxVerifiedPackages bounds the packages whose file hashes
	// VerifyPackage remembers (one entry per manifest hash: its directory
	// and its files' sizes, modes and modification times); the least
	// recently used is dropped first.
	MaxVerifiedPackages = 64
)
