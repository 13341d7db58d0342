// Package planetest is the controller's test harness: a cluster of
// in-process nodes (Cluster, one Host per node) that answers the calls a
// plane.Controller makes through its Dispatcher as the nodes' workload
// hosts would, on a fake clock (Clock) the test moves. A test adds nodes
// (AddNode) and packages (AddPackage), kills and revives nodes (Kill,
// Revive), makes a node misbehave (Set: a refused, lost or in-flight
// place, a frozen describe, a lost listing, a disabled host, a crash of
// the controller mid-place), moves the clock (Advance), ticks the
// controller, and reads what the nodes hold (Copies, Calls).
//
// It does not import plane, so plane's own tests can use it: a
// Dispatcher over it converts the three calls that carry plane's types
// (Describe's Description converts as is; a plane.Package is a
// *pkg.Verified), as internal/plane/fake_test.go does in a few lines.
//
// # Invariants
//
// A node's answers depend only on its fields, the packages added and the
// clock: the same calls give the same answers. A killed node is
// unreachable to every call and keeps what it held. Node keys and ids
// derive from the seed alone (Key).
//
// # Concurrency
//
// A Cluster is safe for concurrent use: Mu guards its fields and every
// Host's, so a test changes a Host only through Set, Kill or Revive (or
// with Mu held) while a controller may be calling. A Clock is safe for
// concurrent use. The package starts no goroutine; a frozen describe
// blocks its caller until its ctx ends. Only tests may import it.
package planetest
