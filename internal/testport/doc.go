// Package testport reserves loopback ports for tests that must know a
// port before the socket that binds it exists: a mesh node configured
// with its peers' addresses, TCP served beside a mesh's UDP port, a node
// restarted at its address.
//
// A port asked of the kernel (127.0.0.1:0) and closed again is only
// "free a moment ago": before the node binds it, any socket that asks for
// an ephemeral port (a parallel test's listener, a proxy's role port, an
// outgoing dial) may be handed the same number, and the node fails with
// EADDRINUSE. Reserve takes ports from below the kernel's ephemeral range
// instead, which the kernel never hands out for port 0, and holds each by
// an flock on a file named after it until the test ends, so that no other
// test of this process or of another test process takes it.
//
// # Invariants
//
//   - A reserved port is in Range, was bindable for TCP and UDP on
//     127.0.0.1 when reserved, and is not reserved again, by any test
//     process of the machine, until the test that reserved it ends.
//   - Hold waits for a fixed port's lock; it never steals one.
//   - Only tests import this package.
//
// # Concurrency
//
// Reserve and Hold may be called from any goroutine; a mutex orders the
// walk over the range, and the locks are the kernel's.
package testport
