// Package meshtest runs real mesh nodes for the tests of the packages
// built on the mesh: each Node has its own identity, data directory,
// table (made by the caller, which may have it consult the node's mesh for
// admission), metrics registry and logger, and a mesh listening on a UDP port
// of 127.0.0.1 reserved when the node is made, so that nodes can be
// configured with each other's pinned keys and addresses before any runs.
//
// Linking two nodes is done by one dial only (see AdmitLater and Pin):
// when both sides dial at once the mesh keeps one connection and closes
// the other, which would fail a stream a test had opened on the loser.
// WaitFor polls a condition on a ticker until a deadline; nothing here
// sleeps to wait.
//
// A Node's mesh runs in one goroutine started by Run (or Start) and
// stopped by Stop, which the test's cleanup also calls; a Node is used by
// its test's goroutine only. Only tests may import this package; the
// mesh's own tests cannot (it imports mesh).
package meshtest
