package host

import (
	"time"

	"github.com/nodeld/nodeld/internal/pkg"
)

// Size, count and time bounds of the workload host. Every size is checked
// before the memory or disk it guards is used.
const (
	// MaxPackageBytes bounds the sum of the files a placed package lists;
	// a manifest above it is refused before anything is fetched. The free
	// disk of the data directory bounds it further.
	MaxPackageBytes = 64 << 30

	// maxInstanceConfigBytes bounds the instance config of a place the
	// host decodes (ctl.MaxInstanceConfigBytes bounds it on the wire).
	maxInstanceConfigBytes = 4 << 10

	// The artifact stream's piece and frame bounds are the protocol's:
	// ctl.MaxPieceBytes, ctl.MaxArtifactControlBytes and
	// ctl.MaxArtifactMessageBytes.

	// FetchRetries is how many times a dropped artifact stream is resumed
	// for one file before the fetch fails.
	FetchRetries = 5
	// FetchBackoff is the first pause before a resume; it doubles up to
	// FetchBackoffMax.
	FetchBackoff    = 100 * time.Millisecond
	FetchBackoffMax = 2 * time.Second
	// ArtifactIdleTimeout bounds the wait for any one artifact frame.
	ArtifactIdleTimeout = 30 * time.Second

	// MaxDeparted is how many instances taken down on purpose status
	// remembers (in memory: a restart empties it).
	MaxDeparted = 256
	// MaxInstances bounds the instances (loaded or running) on one node,
	// in-flight placements included.
	MaxInstances = 256
	// MaxLogBytes caps each of stdout and stderr returned by logs; the
	// newest bytes are kept, cut on a UTF-8 boundary.
	MaxLogBytes = 64 << 10

	// StartTimeout bounds the first start of a placed instance (its
	// server coming up), inside the place call's own deadline.
	StartTimeout = 3 * time.Minute
	// RevocationSweep is the period of the revocation sweep that retries
	// teardowns that failed and catches changes missed.
	RevocationSweep = 60 * time.Second
	// TeardownRetry is the pause before retrying a failed forced teardown.
	TeardownRetry = 5 * time.Second
	// MaxNoticeLog bounds the notices kept in the replay log (one per
	// subject, the newest); the oldest go first.
	MaxNoticeLog = 1024
	// maxNoticeLogBytes bounds the replay log file read at start: every
	// notice in base64 plus its newline.
	maxNoticeLogBytes = MaxNoticeLog * ((pkg.MaxNoticeBytes+2)/3*4 + 1)
	// NoticeTimeout bounds sending one notice (open, write, the
	// receiver's close) and reading one.
	NoticeTimeout = 10 * time.Second
	// NoticeForwardConcurrency bounds the peers a notice is sent to at
	// once.
	NoticeForwardConcurrency = 4
	// NoticeReplayPace is the pause between notices replayed to a peer.
	NoticeReplayPace = 20 * time.Millisecond
	// NoticeReplayCooldown is the least time between two replays to the
	// same peer (a flapping link does not replay the log each time).
	NoticeReplayCooldown = 30 * time.Second

	// MaxTermSets bounds the controller sets whose highest term the host
	// keeps (TermsFile); beyond it the set raised longest ago is
	// forgotten (host.controllers changed that many times since).
	MaxTermSets = 64
	// maxTermsFileBytes bounds TermsFile as read at start: every set's id
	// and a 20-digit term in their JSON, and the envelope.
	maxTermsFileBytes = MaxTermSets*128 + 64

	// shutdownGrace is the stop grace every instance gets when Run ends.
	shutdownGrace = 2 * time.Second
)
