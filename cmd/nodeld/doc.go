// Command nodeld is the node daemon and its operator commands: main only
// calls run and exits once; run dispatches the subcommands (run, ctl,
// config check, reload, package, chain, ...). All wiring of the daemon is
// in run.go: runDaemon makes the logger, data dir, identity, metrics
// registry and chain; newNode builds every component on them in dependency
// order, starting nothing. With controller.enabled it also builds the
// controller (controller.go: plane.NewFromConfig on the node's config,
// dispatcher and node references) and the operator socket's router
// (internal/operator).
//
// # Invariants
//
//   - Nothing below cmd exits the process, reads flags or the environment.
//     Exit status: 0 on success, 1 when the command failed (one line on
//     stderr), 2 on a usage error or an invalid config.
//   - A reload (reload.go) is all or nothing: every component checks the
//     new config (check.go, the checks config check runs too), then one
//     list of steps (reloadSteps) prepares every component without side
//     effects but the proxy's new ports, then all commit or all abort
//     (internal/reload).
//   - One chain.Recorder takes every record a remote party can trigger;
//     /readyz's "chain" condition is the chain's Healthy.
//   - The shipped binary has no --test-* flag: they exist only in a build
//     with the nodeld_testhooks tag (testhooks.go), which tests build.
//
// # Concurrency
//
// node.run starts every component in one errgroup under
// signal.NotifyContext: one failing stops all; SIGHUP reloads; SIGTERM or
// SIGINT drains the proxy first, and runDaemon closes the chain last.
//
// The map of the daemon (where a request, a placement and a reload go) is
// docs/architecture.md "How to find your way".
package main
