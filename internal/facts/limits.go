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
	MaxNvidiaSMIOutputBytes = MaxCommandOutputBytes

	// MaxCommandOutputBytes bounds the output Probe keeps of any command
	// it runs (nvidia-smi, sysctl, vm_stat, a runtime's --version); more
	// is an error.
	MaxCommandOutputBytes = 64 << 10

	// NvidiaSMITimeout bounds one nvidia-smi run.
	NvidiaSMITimeout = 5 * time.Second

	// CommandTimeout bounds one run of sysctl or vm_stat (macOS).
	CommandTimeout = 5 * time.Second

	// RuntimeVersionTimeout bounds one "<runtime> --version" run; a
	// runtime that does not answer in time is listed without a version.
	RuntimeVersionTimeout = 2 * time.Second

	// RuntimeVersionMaxAge is how long a Source reuses a runtime's
	// version before asking the binary again: versions change only when
	// the operator upgrades, and each ask starts a process.
	RuntimeVersionMaxAge = 10 * time.Minute

	// GPUBusyPercent is the utilisation at or above which a GPU's
	// capability record is busy rather than available.
	GPUBusyPercent = 80

	// MaxModelWordBytes bounds the model word of an accelerator's
	// capability id ("accel.gpu.nvidia.<model>"); a longer one is cut.
	MaxModelWordBytes = 48

	// MaxCapabilities bounds the capability records in facts; Verify
	// counts them while decoding and refuses the 513th before decoding
	// it. Attributes per record are bounded by grammar.MaxCapabilityAttrs
	// (counted while decoding too), and each attribute value by
	// grammar.MaxValueStringLen and grammar.MaxValueListLen.
	MaxCapabilities = 512

	// MinPerfSamples is the fewest requests a measured performance
	// metric must rest on before facts carry it (PerfSource
	// implementations apply it; Source drops anything below it).
	MinPerfSamples = 20

	// MaxPerfRecords bounds the perf.infer records one node signs.
	MaxPerfRecords = 64

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
