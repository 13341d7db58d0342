// Package runner runs and observes the model servers behind nodeld's
// roles. Adopted servers (an operator's llama-server, Ollama, mlx_lm.server
// or other OpenAI-compatible server listed in inference.instances, or
// discovered on loopback) are probed by an Adopter, never started or
// stopped, and registered in the table while up. Managed servers are
// started from a package (NewManaged: process, llama.cpp, mlx-lm, or a
// model in an existing Ollama), wrapped by a Launcher (the host's sandbox),
// and kept running by a Supervisor with a restart budget.
//
// # Invariants
//
//   - Only loopback is adopted or dialled; the probe client follows no
//     redirect and ignores proxy variables. A managed server found
//     listening beyond loopback is stopped (ErrNotLoopback).
//   - Only GET is sent to adopted servers, and every body, list and buffer
//     read from a server, a process or /proc is bounded (limits.go).
//   - An Adopter holds at most one registration per role, only while an
//     instance is up, and releases only its own, so an adopted server going
//     down never withdraws a placed instance. A probe without an answer is
//     a miss; an up instance goes down only at MissLimit misses in a row.
//   - Only the process group nodeld spawned is signalled; no descendant
//     outlives a run. RestartPolicy.Next is pure; a spent budget ends in
//     failed, never in a silent stop.
//
// # Concurrency
//
// NewAdopter and NewManaged start nothing. Adopter.Run owns the probe loop
// and each round's bounded probe goroutines; ApplyConfig, Prepare and
// Status are safe from any goroutine, and a round that raced a reload is
// redone. Each process run owns three goroutines (two output drains, one
// reaper) that Stop waits for. Supervisor.Run works on the calling
// goroutine and stops its instance before it returns. Time is injectable
// (ManagedDeps.Now, SupervisorDeps.Now, Ticks, After).
//
// The long story (probing and misses, discovery, Ollama, each managed
// kind, supervision) is docs/internals.md "internal/runner".
package runner
