// Command nodeld is the node daemon and its operator commands: main only
// calls run and exits once; run dispatches the subcommands (run, ctl,
// config check, reload, package, chain, ...). The daemon's wiring is
// run.go, wire.go and reload.go: runDaemon makes the logger, data dir,
// identity, metrics registry and chain (internal/lifecycle); newNode
// builds every component on them in dependency order, starting nothing,
// each from its own part of the config (its FromConfig); a component
// built early reaches one built later through a func value.
//
// # Invariants
//
//   - Nothing below cmd exits the process, reads flags or the environment.
//     Exit status: 0 on success, 1 when the command failed (one line on
//     stderr), 2 on a usage error or an invalid config.
//   - A reload is all or nothing (lifecycle.Reloader): every component
//     checks the new config (check.go, as config check does), then one
//     list of steps (reloadSteps) prepares, then all commit or all abort.
//   - One chain.Recorder takes every record a remote party can trigger;
//     /readyz's "chain" condition is the chain's Healthy.
//   - The shipped binary has no --test-* flag and no test hook code: they
//     exist only in a nodeld_testhooks build (testhooks.go).
//   - The daemon wiring stays under 600 lines (TestDaemonWiringFits).
//
// # Concurrency
//
// node.run starts every component in one lifecycle.Group under
// signal.NotifyContext: one failing stops all; SIGHUP reloads; SIGTERM or
// SIGINT drains the proxy first, and runDaemon closes the chain last.
//
// The map of the daemon (where a request, a placement and a reload go) is
// docs/architecture.md "How to find your way".
package main
