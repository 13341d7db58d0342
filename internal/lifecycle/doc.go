// Package lifecycle is the daemon's life from start to stop, as parts a
// test can run alone: the logger, the data directory, the audit chain's
// opening, the metrics registry, the run group that starts components and
// stops them stage by stage, the supervisor (readiness, systemd, SIGHUP)
// and the reloader that applies a config all or nothing through the
// internal/reload list. cmd/nodeld ties them to the components; see
// docs/architecture.md "6. Lifecycle" and docs/internals.md.
//
// # Invariants
//
// Group.Run returns only once every component it started has returned;
// the first error stops all. A stage's context ends only once every
// component of the stage before it has returned. A reload that fails
// anywhere changes nothing and says why (the gauge, the chain, the log).
//
// # Concurrency
//
// Group.Run owns one goroutine per component and its stop watch, and
// waits for all. Supervisor.Run runs on its caller's goroutine, and calls
// Reload there, so reloads never overlap. Reloader is safe for concurrent
// use (LastError under its mutex).
package lifecycle
