package pkg

// Size and count bounds. Each is checked before the thing it bounds is
// allocated or read: file sizes are compared with Stat before reading, and
// JSON documents are cut at their byte bound before decoding, so a decoded
// document can never hold more than its byte bound allows.
const (
	// MaxManifestBytes bounds manifest.json.
	MaxManifestBytes = 256 << 10
	// MaxSigFileBytes bounds manifest.sig.
	MaxSigFileBytes = 16 << 10
	// MaxSignatures bounds the signatures in manifest.sig.
	MaxSignatures = 16

	// MaxFiles bounds the files a package lists.
	MaxFiles = 1024
	// MaxFileSize bounds one listed file (a large GGUF model fits).
	MaxFileSize = 64 << 30
	// MaxTotalSize bounds the sum of the listed files' sizes.
	MaxTotalSize = 256 << 30
	// MaxPathLen bounds a listed file's path, and MaxPathDepth its number
	// of components.
	MaxPathLen   = 512
	MaxPathDepth = 16
	// MaxVariants bounds the variants of a package.
	MaxVariants = 32
	// MaxListLen bounds each list in a variant's requires block.
	MaxListLen = 16
	// MaxRequirements bounds a variant's requirements, MaxPredicates the
	// predicates of one requirement, and MaxRequirementCount its count.
	// Predicate values are bounded by grammar.MaxValueStringLen and
	// grammar.MaxValueListLen as they are decoded.
	MaxRequirements     = 64
	MaxPredicates       = 32
	MaxRequirementCount = 64
	// MaxPackageLabels bounds a package's labels and its excludes.
	MaxPackageLabels = 64
	// MaxArgs bounds runtime.args and MaxArgLen each argument.
	MaxArgs   = 128
	MaxArgLen = 4096
	// MaxEnv bounds runtime.env and MaxEnvValueLen its values (names:
	// grammar.MaxEnvNameLen).
	MaxEnv         = 64
	MaxEnvValueLen = 4096
	// MaxCommandLen bounds runtime.command, runtime.model and
	// runtime.model_file.
	MaxCommandLen = 1024

	// MaxRevocationsFileBytes bounds revocations.json.
	MaxRevocationsFileBytes = 8 << 20
	// MaxRevocations bounds the subjects in the revocation list.
	MaxRevocations = 16384
	// MaxIssuers bounds the controllers whose notice sequence numbers the
	// list remembers.
	MaxIssuers = 256
	// MaxReasonLen bounds a revocation's reason, MaxByLen its author.
	MaxReasonLen = 256
	MaxByLen     = 128

	// MaxNoticeBytes bounds a signed revocation notice as received.
	MaxNoticeBytes = 4 << 10
	// MaxNoticePayloadBytes bounds the signed payload inside it.
	MaxNoticePayloadBytes = 2 << 10
)
