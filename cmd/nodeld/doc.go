// Command nodeld is the node daemon and its operator commands.
//
// main only calls run and exits once; run dispatches the subcommands.
// All wiring of the daemon is in run.go: runDaemon makes the logger, data
// dir, identity, metrics registry and chain; newNode builds every
// component on them in dependency order, starting nothing; node.run starts
// them in one errgroup under signal.NotifyContext, reloads on SIGHUP,
// drains the proxy first on SIGTERM or SIGINT, and runDaemon closes the
// chain last. A reload (reload.go) is all or nothing: every component
// checks the new config (check.go, the checks config check runs too), then
// prepares it without side effects but the proxy's new ports, then all
// commit or all abort. One chain.Recorder, run in the errgroup, takes
// every record a remote party can trigger (table, mesh, host, proxy);
// /readyz's "chain" condition is the chain's Healthy.
//
// With controller.enabled, newNode also builds the controller
// (planewire.go: its config, its targets from mesh.peers and the host,
// and planeDispatcher, its calls over the dispatcher), run by
// controllerRunner in the errgroup, which applies new targets on its own
// goroutine after a reload or a first-contact pin. The operator socket's
// backend (ctlbackend.go) serves the controller's verbs and hands the
// rest to the dispatcher. nodeld run --test-hold-after-place and
// --test-hold-before-place are test hooks only: the controller holds after
// a place was answered, before it records the answer (or before it sends
// the place, after it persisted the candidate), until the process is
// killed.
//
// Exit status: 0 on success, 1 when the command failed (one line on
// stderr), 2 on a usage error or an invalid config.
package main
