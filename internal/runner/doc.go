// Package runner runs and observes the model servers behind nodeld's roles.
//
// It covers two kinds of servers. Adopted servers (adopted.go, probe.go)
// are listed in inference.instances; nodeld probes them but never starts,
// stops or restarts them (llama.cpp's llama-server, Ollama, mlx_lm.server,
// or any OpenAI-compatible server). Managed servers (managed.go,
// process.go, prockind.go, ollama.go, supervise.go) are started by nodeld
// from a package: see "Managed runtimes" below.
//
// # Job
//
// An Adopter probes every configured instance once when Run starts, then
// every Interval (5 s by default) and at once after each ApplyConfig. Probe
// asks each runtime the way it answers (llama.cpp GET /health, Ollama GET
// /api/version then /api/tags, mlx-lm and openai GET /v1/models) and
// discovers the served model when the config names none. For each role, the
// first instance in config order whose probe is up is registered with the
// Registrar (the placement table, as an adopted instance): the Adopter holds
// one registration (a LocalSlot) per role, moves it with Update when
// another instance becomes the first one up, and releases it when none is
// up. So an instance that goes down stops resolving within one probe
// interval plus the round's probing time (ProbeTimeout per batch of
// maxConcurrentProbes instances), and one that comes back resolves again on
// the next round. "Goes down" means an answer that it is not up; a probe
// with no answer is a miss (see "Missed probes"). The table elects which of a role's registrations serves:
// a placed instance of the role serves before the adopted one, which stands
// by meanwhile (InstanceStatus.Serving is false) and takes over at once
// when the placed one stops. The runtime string registered is the Kind ("llama.cpp",
// "ollama", "mlx-lm", "openai"); the api string is always "openai".
//
// # Missed probes
//
// A probe that gets no answer (its ProbeTimeout ran out, or its connection
// was reset or cut mid-answer) is a miss: on a loaded host it says nothing
// about the server, and dropping a role on it refused every new request to
// a server that was serving well (the soak saw this). An instance that is
// up stays up, registered and serving, through misses, and goes down only
// at the MissLimit-th in a row (DefaultMissLimit, 3: about three intervals
// plus three ProbeTimeouts); Status shows it up with the miss in
// LastError. An answer that it is not up takes it down at once, misses or
// not: a refused connection (nothing listens), any status but 200 (503
// loading included), a model not listed, a body that does not decode. A
// miss of an instance that is not up leaves it down. Probes are counted by
// result (nodeld_runtime_probes_total), misses as "missed".
//
// # Discovery
//
// With AdopterConfig.Discover set and no instance configured, each round
// that has no discovered instance also probes DiscoverCandidates (by
// default Ollama on 127.0.0.1:11434, llama-server on :8080, LM Studio on
// :1234 and vLLM on :8000, each with its own runtime's probe) and adopts
// for DiscoverRole the first, in order, that answers like one: its probe
// is up and it names a model (Ollama: lists one), so some other service
// answering a health path is passed over. A discovered instance is then
// probed like a configured one and shown in Status as Discovered; once its
// probe finds it down it is dropped and the next round discovers again, so
// a server started after nodeld is found within one interval. Configuring
// any instance turns discovery off.
//
// # Invariants
//
//   - Only loopback servers are adopted: instance URLs must be
//     http://<loopback ip or localhost>:<port> (localhost is registered as
//     127.0.0.1), and the probe client's dialer refuses any other address,
//     follows no redirect and ignores proxy environment variables.
//   - Only GET requests are sent. Response bodies are untrusted: at most
//     maxProbeBodyBytes are read, lists are counted while decoding and cut
//     at maxListedModels, and names that are not bounded printable ASCII are
//     dropped (limits.go).
//   - The Adopter holds a registration of a role only while an instance
//     for it is up, at most one per role, and updates or releases only the
//     registrations it holds (never a role by name), so an adopted
//     instance going down never withdraws a placed instance of its role.
//     It releases all of them when Run returns.
//   - Metric label values come from the validated config only (instances
//     and discovery candidates, both bounded).
//
// # Ollama without a configured model
//
// Ollama serves any pulled model by name, so with no model configured the
// instance is up when it answers and lists at least one model: with exactly
// one, that model is registered; with several, the role is registered with
// no model and the client's request picks one. No pulled model at all is
// model_missing. With a model configured, it must be listed by /api/tags
// (":latest" tolerated) or the instance is model_missing.
//
// # Concurrency
//
// NewAdopter starts nothing. Run owns the probe loop and, during a round, up
// to maxConcurrentProbes probe goroutines that it waits for before the round
// ends; Run returns nil once ctx is done. ApplyConfig, Prepare (which changes
// nothing), the commit Prepare returns, and Status are safe to call from any
// goroutine, before, during or after Run; AdopterConfig.Validate is
// Prepare's check without an Adopter. Registrar and LocalSlot methods are
// called with the Adopter's mutex held (never during network I/O), so a
// round and a reload cannot interleave registrations; a round that raced a
// reload is discarded and redone.
//
// # Managed runtimes
//
// NewManaged validates a Spec (known managed kind, absolute package
// directory, command and model file resolvable and inside it unless
// absolute, bounded arguments and environment, owned flags not repeated)
// and starts nothing. A Managed is one instance:
//
//   - process (KindProcess): any command with the manifest's args and env.
//   - llama.cpp: llama-server --model <model file> --host 127.0.0.1 --port
//     <port> [args]; Start waits for GET /health (503 while loading).
//   - mlx-lm: mlx_lm.server --model <model file, else model, else dir>
//     --host 127.0.0.1 --port <port> [args]; health is GET /v1/models.
//   - ollama: drives an existing loopback Ollama daemon, never starts or
//     signals it. Start loads the model with the pin (POST /api/generate,
//     empty prompt, keep_alive -1) unless /api/ps shows it resident and
//     pinned already (someone else's load); Stop unloads it (keep_alive 0)
//     only if this instance loaded or pinned it. Health is "/api/ps lists
//     it, pinned": a listed model whose expires_at is less than a year
//     ahead lost its pin (the daemon restarted and client traffic loaded
//     it with Ollama's default five minutes), and health pins it again,
//     which Ollama does without a reload; the instance owns the load from
//     then on. A load Ollama refuses keeps Ollama's error text
//     ({"error":"model 'x' not found"}) in the error, bounded
//     (serverErrorText).
//
// Each kind has one driver behind the unexported driver interface (start,
// stop, health, endpoint, lastRun), and newDriver is the only place a kind
// is mapped to one. process, llama.cpp and mlx-lm share procDriver
// (process.go), which holds all the process machinery below and is told by
// its kind's procKind (prockind.go) what that server needs: its default
// program, the flags nodeld owns, the arguments before the Spec's, whether
// HealthPath applies, and its health probe. ollama has ollamaDriver
// (ollama.go). Managed itself keeps only what every kind shares: one start
// at a time, the loopback refusal, and the waiters for a run's end. Adding
// a server program is adding a procKind and a case in newDriver; any
// other runtime is a driver of its own and a case there.
//
// A process run gets its own process group (Setpgid; Pdeathsig SIGKILL on
// Linux, so a dying nodeld takes it along), an environment of the Spec's
// Env, PATH (default /usr/local/bin:/usr/bin:/bin) and NODELD_PORT only,
// {port}, {dir} and {model_file} substituted in args and env values, and a
// port picked free on 127.0.0.1 when the Spec gives 0 (a server that exits
// at once because another socket took that port before it could bind is
// started again on another, at most 3 times in all; a server that exits
// before it is up for any other reason fails the start, the error quoting
// its last line of output). Stdout and stderr
// are captured into tail buffers of LogCap bytes each (DefaultLogCap 256
// KiB); Logs returns the last run's, the front cut on a UTF-8 boundary.
// Stop sends SIGTERM to the group, then SIGKILL to the group after the
// grace (default 2 s, at most 60 s); when the leader exits by itself the
// rest of its group is SIGKILLed too, so no descendant outlives a run.
//
// # Invariants of managed runtimes
//
//   - A managed server listens on loopback only. Health (and Start, once
//     the server is up) first reads /proc/net/tcp and tcp6 for the LISTEN
//     sockets of every process in the run's group; any not bound to
//     127.0.0.0/8 or ::1 gets the process stopped, and Start and Health
//     return ErrNotLoopback, as does every later Start of that Managed. The
//     check needs /proc: outside Linux it is skipped unless
//     ManagedDeps.Listeners is given.
//   - Only the process group nodeld spawned is ever signalled.
//   - Every buffer and list read from a process or from /proc is bounded
//     (limits.go) before it grows.
//
// # Supervision
//
// A Supervisor keeps one Instance (a *Managed) running. Run starts it,
// checks Health every HealthInterval (default 5 s) and watches for its
// exit. Every failed check is logged at warn. A check answered that the
// instance is not up (a refused connection, an error status, the model
// gone) makes it unhealthy at once, so the host withdraws its role within
// one interval of a server's death, and the next check that finds it up
// makes it running again; a check that got no answer (a timeout, a reset
// connection: a loaded host rather than a dead server) leaves it running.
// An exit, or MissLimit (default 3) failed checks in a row of either
// kind, makes it unhealthy for a restart: RestartPolicy.Next (a pure
// function) allows one after Backoff·2^k, at most MaxBackoff (k: restarts
// in the Window), or declares the budget spent when Max restarts happened
// in the Window (default 5 in 10 minutes, waiting 2, 4, 8, 16 and 30 s, so
// a server down for about a minute, a daemon restarted, is ridden out). A
// spent budget, or a listener beyond loopback, stops the instance and
// ends in failed: a new Run gives a fresh budget. States are starting,
// running, unhealthy, restarting, stopped and failed, the names of the
// workload.ctl instance states; OnChange reports each one so the host
// holds a registration of the inference role while running and releases
// it otherwise, and Cause says why the instance is not running with a
// sentinel to branch on (ErrRestartBudget, ErrNotLoopback, ErrHealthCheck,
// ErrExited, ErrStartFailed). A change for the worse (unhealthy,
// restarting, failed) is logged at warn, one for the better at info.
//
// # Concurrency of managed runtimes
//
// NewManaged starts nothing. Each process run owns three goroutines (two
// draining the output pipes, one reaping the process) that end when the
// process group is gone; Stop waits for them. A caller must Stop a
// Managed, or see its Wait channel deliver, before dropping it. Methods of
// Managed are safe for concurrent use; Start and Stop of the same instance
// should not race each other (Start refuses while a run is in progress).
// Managed's mutex may be held while asking its driver for the endpoint;
// each driver's own mutex is taken after it and never held while the
// driver reports back (a run's end, a listener beyond loopback).
// Supervisor.Run does all its work on the calling goroutine and returns
// nil once ctx ends, Stop is called, or the instance failed; the instance
// is stopped when Run returns. Time is injectable: ManagedDeps.Now,
// SupervisorDeps.Now, Ticks and After.
package runner
