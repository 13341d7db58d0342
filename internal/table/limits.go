package table

import "time"

// Bounds the table enforces. Every value here is checked before the table
// allocates or stores anything derived from the bounded input.
const (
	// MaxAdvertMethods is the most methods a received advertisement may
	// list.
	MaxAdvertMethods = 16

	// MaxAdvertMetadata is the most metadata entries a received
	// advertisement may carry.
	MaxAdvertMetadata = 16

	// MaxHostAdvertMetadata is the most metadata entries a received
	// workload-host advertisement may carry: its three counts and flags
	// and one entry per node label (facts allow 64), with room for keys a
	// newer host adds.
	MaxHostAdvertMetadata = 96

	// MaxAdvertFieldLen bounds each method name, metadata key and metadata
	// value of a received advertisement, in bytes.
	MaxAdvertFieldLen = 256

	// DefaultAdvertTTL is how long a received advertisement counts without
	// being repeated, measured from local receipt.
	DefaultAdvertTTL = 60 * time.Second
)
