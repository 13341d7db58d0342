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

	// MaxAdvertFieldLen bounds each method name, metadata key and metadata
	// value of a received advertisement, in bytes.
	MaxAdvertFieldLen = 256

	// DefaultAdvertTTL is how long a received advertisement counts without
	// being repeated, measured from local receipt.
	DefaultAdvertTTL = 60 * time.Second
)
