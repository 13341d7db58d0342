// Package runtime runs and observes the model servers behind nodeld's roles.
//
// This file set covers adopted servers: servers listed in
// inference.instances that nodeld probes but never starts, stops or
// restarts (llama.cpp's llama-server, Ollama, mlx_lm.server, or any
// OpenAI-compatible server). Managed runtimes (process supervision, launched
// llama.cpp and mlx-lm) are added to this package later, beside adopted.go.
//
// # Job
//
// An Adopter probes every configured instance once when Run starts, then
// every Interval (5 s by default) and at once after each ApplyConfig. Probe
// asks each runtime the way it answers (llama.cpp GET /health, Ollama GET
// /api/version then /api/tags, mlx-lm and openai GET /v1/models) and
// discovers the served model when the config names none. For each role, the
// first instance in config order whose probe is up is registered with the
// Registrar (the placement table); a role with no instance up is
// deregistered. So an instance that goes down stops resolving within one
// probe interval plus the round's probing time (ProbeTimeout per batch of
// maxConcurrentProbes instances), and one that comes back resolves again on
// the next round. The runtime string registered is the Kind ("llama.cpp",
// "ollama", "mlx-lm", "openai"); the api string is always "openai".
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
//   - A role is registered only while an instance for it is up; the Adopter
//     deregisters only roles it registered itself, and all of them when Run
//     returns.
//   - Metric label values come from the validated config only.
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
// ends; Run returns nil once ctx is done. ApplyConfig and Status are safe to
// call from any goroutine, before, during or after Run. Registrar methods
// are called with the Adopter's mutex held (never during network I/O), so a
// round and a reload cannot interleave registrations; a round that raced a
// reload is discarded and redone.
package runtime
