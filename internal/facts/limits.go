package facts

import "time"

// Bounds on what Probe reads and on what Verify accepts. Decoders check
// them before allocating.
const (
	// MaxMeminfoBytes bounds the /proc/meminfo content parseMeminfo reads.
	// The real file is about 1.5 KiB.
	MaxMeminfoBytes = 64 << 10

	// MaxLineBytes bounds one line of /proc/meminfo or of nvidia-smi
	// output; a longer line is skipped as malformed.
	MaxLineBytes = 512

	// MaxNvidiaSMIOutputBytes bounds the nvidia-smi output kept; more is
	// an error (the child's stdout is cut off at this size).
	MaxNvidiaSMIOutputBytes = 64 << 10

	// NvidiaSMITimeout bounds one nvidia-smi run.
	NvidiaSMITimeout = 5 * time.Second

	// MaxGPUs bounds the GPUs of one node; further GPUs are dropped with
	// a note.
	MaxGPUs = 64

	// MaxGPUNameBytes bounds a GPU name; a longer one is truncated.
	MaxGPUNameBytes = 128

	// MaxGPUUUIDBytes bounds a GPU UUID; a line with a longer one is
	// skipped.
	MaxGPUUUIDBytes = 96

	// MaxVRAMMiB bounds one GPU's memory, in MiB (16 TiB); a larger value
	// is absurd and the line is skipped.
	MaxVRAMMiB = 16 << 20

	// MaxMemBytes bounds a node's memory (4 PiB); a larger MemTotal is
	// treated as absent.
	MaxMemBytes = 1 << 52

	// MaxCPUs bounds a node's CPU count.
	MaxCPUs = 1 << 16

	// MaxShortStringBytes bounds os, arch, kernel, hostname and runtime
	// names.
	MaxShortStringBytes = 128

	// MaxKernelFileBytes bounds the /proc/sys/kernel/osrelease read.
	MaxKernelFileBytes = 4 << 10

	// MaxRuntimes bounds the runtime names in facts.
	MaxRuntimes = 32

	// MaxLabels bounds the labels in facts.
	MaxLabels = 64

	// MaxNotes bounds the probe notes in facts; further notes are
	// dropped.
	MaxNotes = 16

	// MaxNoteBytes bounds one note's message; a longer one is truncated.
	MaxNoteBytes = 256

	// MaxPayloadBytes bounds a signed payload.
	MaxPayloadBytes = 256 << 10

	// MaxTimestampBytes bounds the issued_at string.
	MaxTimestampBytes = 64

	// MinTTL and MaxTTL bound the lifetime of signed facts.
	MinTTL = 10 * time.Second
	// MaxTTL is the longest lifetime signed facts may claim.
	MaxTTL = 24 * time.Hour

	// DefaultTTL is the lifetime Source gives signed facts.
	DefaultTTL = 5 * time.Minute

	// DefaultMaxProbeAge is how long Source reuses probed facts before
	// probing again; free memory changes, so it is short.
	DefaultMaxProbeAge = 10 * time.Second

	// MaxFutureSkew is how far in the future issued_at may be before
	// Verify refuses the facts.
	MaxFutureSkew = 60 * time.Second

	// seqReserveBlock is how many seq values one durable write reserves.
	// A crash skips at most this many values, never reuses one.
	seqReserveBlock = 64
)

// MaxGPUIndex bounds a GPU index reported by nvidia-smi.
const MaxGPUIndex = 1 << 10
