package runner

import "time"

// Bounds enforced by this package. Every probe response is untrusted bytes
// from a process nodeld does not control, so each read and each decoded list
// is capped before it can grow.
const (
	// maxProbeBodyBytes caps the bytes read from one probe response body.
	// A response that declares or delivers more is an error, not truncated
	// JSON.
	maxProbeBodyBytes = 1 << 20

	// maxProbeHeaderBytes caps the response header of a probe.
	maxProbeHeaderBytes = 64 << 10

	// maxListedModels caps the entries read from a /v1/models or
	// /api/tags list; a longer list is refused while decoding, before the
	// extra entries are allocated.
	maxListedModels = 4096

	// maxModelNameBytes caps a configured or discovered model name. A
	// listed name that is longer (or not printable ASCII) is skipped.
	maxModelNameBytes = 256

	// maxAdoptedInstances caps inference.instances, which also bounds the
	// label sets of the per-instance metrics.
	maxAdoptedInstances = 64

	// maxDiscoverCandidates caps AdopterConfig.DiscoverCandidates, which
	// also bounds the instance label values discovery can add.
	maxDiscoverCandidates = 16

	// maxConcurrentProbes caps the probes in flight during one round.
	maxConcurrentProbes = 8

	// minProbeInterval is the shortest probe interval accepted, so a
	// misconfiguration cannot turn the loop into a busy one.
	minProbeInterval = 100 * time.Millisecond

	// DefaultProbeInterval is the probe interval when the config gives none.
	DefaultProbeInterval = 5 * time.Second

	// DefaultProbeTimeout bounds one instance's probe (all of its requests)
	// when the config gives none.
	DefaultProbeTimeout = 2 * time.Second
)

// Bounds of managed runtimes (managed.go, process.go, logs.go, netproc.go,
// supervise.go). A managed server's output and the kernel tables read to
// police it are bounded like any other untrusted input.
const (
	// DefaultLogCap is the bytes of each output stream (stdout, stderr)
	// kept from a managed process's last run when the Spec gives none: the
	// last DefaultLogCap bytes, older output is dropped.
	DefaultLogCap = 256 << 10

	// maxLogCap caps Spec.LogCap.
	maxLogCap = 4 << 20

	// maxSpecArgs caps the arguments of a managed command (including the
	// ones nodeld adds for llama.cpp and mlx-lm).
	maxSpecArgs = 64

	// maxSpecArgBytes caps one argument, after substitution.
	maxSpecArgBytes = 4096

	// maxSpecEnv caps the environment variables a Spec sets.
	maxSpecEnv = 64

	// maxEnvValueBytes caps an environment variable value.
	maxEnvValueBytes = 4096

	// maxPathBytes caps Spec.Dir, Spec.Command and Spec.ModelFile.
	maxPathBytes = 4096

	// DefaultStopGrace is how long Stop waits after SIGTERM before SIGKILL
	// when given no grace.
	DefaultStopGrace = 2 * time.Second

	// maxStopGrace caps the grace Stop waits.
	maxStopGrace = 60 * time.Second

	// DefaultStartTimeout bounds Start's wait for a server's health when the
	// Spec gives none; loading a large model can take minutes.
	DefaultStartTimeout = 5 * time.Minute

	// maxStartTimeout caps Spec.StartTimeout.
	maxStartTimeout = 30 * time.Minute

	// startPollFast is the pause between health checks while Start waits
	// for a server to come up, for the first startPollFastFor: a small
	// model is up within seconds, and its role should follow within
	// tens of milliseconds (a request may be held waiting for it).
	startPollFast    = 25 * time.Millisecond
	startPollFastFor = 5 * time.Second
	// startPollMid is the pause from then until startPollMidFor.
	startPollMid    = 50 * time.Millisecond
	startPollMidFor = 30 * time.Second
	// startPollSlow is the pause after that (a large model loading for
	// minutes): still within the 100 ms in which a ready server must be
	// noticed.
	startPollSlow = 100 * time.Millisecond

	// outputDrainTimeout bounds the wait for a process's output pipes to
	// reach EOF after its group was killed (a descendant that left the group
	// could hold them open forever).
	outputDrainTimeout = 2 * time.Second

	// maxProcNetBytes caps the bytes read from /proc/net/tcp or tcp6.
	maxProcNetBytes = 16 << 20

	// maxProcNetLines caps the socket lines decoded from one such file.
	maxProcNetLines = 1 << 17

	// maxProcsScanned caps the /proc entries scanned for a process group.
	maxProcsScanned = 1 << 16

	// maxFDsScanned caps the descriptors inspected per process.
	maxFDsScanned = 1 << 16

	// maxProcStatBytes caps the bytes read from one /proc/<pid>/stat.
	maxProcStatBytes = 4096

	// maxRestartsBound caps RestartPolicy.Max.
	maxRestartsBound = 100

	// DefaultHealthInterval is the Supervisor's health poll interval when
	// its config gives none.
	DefaultHealthInterval = 5 * time.Second

	// minHealthInterval is the shortest health interval accepted.
	minHealthInterval = 10 * time.Millisecond

	// DefaultMissLimit is how many failed health checks in a row make a
	// running instance unhealthy when the config gives none, and how many
	// probes in a row without an answer take an adopted instance that is up
	// down (AdopterConfig.MissLimit).
	DefaultMissLimit = 3

	// maxMissLimit caps SupervisorConfig.MissLimit and
	// AdopterConfig.MissLimit.
	maxMissLimit = 100

	// ollamaLoadTimeout bounds the request that loads a model into Ollama.
	ollamaLoadTimeout = 15 * time.Minute

	// maxOllamaBodyBytes caps the request body sent to Ollama (a model
	// name and two fixed fields).
	maxOllamaBodyBytes = 4096

	// maxTimestampBytes caps a timestamp read from a model server (an
	// Ollama /api/ps expires_at) before it is parsed.
	maxTimestampBytes = 64

	// maxServerErrorBodyBytes caps the bytes read from a model server's
	// error answer to find its message (serverErrorText).
	maxServerErrorBodyBytes = 64 << 10

	// maxServerErrorTextBytes caps the model server's error text kept in
	// an error (and so in a refusal, a status detail, a log line).
	maxServerErrorTextBytes = 256
)
