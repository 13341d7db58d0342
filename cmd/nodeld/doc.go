// Command nodeld is the node daemon and its operator commands.
//
// main only calls run and exits once; run dispatches the subcommands.
// All wiring of the daemon is in run.go (runDaemon): it builds the
// logger, identity, chain, metrics registry and components, supervises
// them with an errgroup under signal.NotifyContext, reloads on SIGHUP,
// drains on SIGTERM or SIGINT, and closes the chain last. One
// chain.Recorder, run in the errgroup, takes every record a remote party
// can trigger (table, mesh, host, proxy); /readyz's "chain" condition is
// the chain's Healthy.
//
// Exit status: 0 on success, 1 when the command failed (one line on
// stderr), 2 on a usage error or an invalid config.
package main
