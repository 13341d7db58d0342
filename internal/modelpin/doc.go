// Package modelpin rewrites the "model" of a request body to the model of
// the instance that serves it, so that a body reaching a local instance
// names that instance's model whatever the client or a peer wrote. The
// role ports' local path and the mesh's serving side both pin with it.
//
// # Invariants
//
// Pin pins a body held in memory; Reader pins a body streamed from a peer
// as it is read, holding a chunk and the bytes of one undecided key at
// most. Each walks the body with a scanner (Pin's heldMembers, for a body
// held whole; Reader's jsonScan, for one fed in chunks) that validates it
// as encoding/json would (json.Valid) and finds the members of its
// top-level object: every "model" member (any case, duplicates included)
// gets the pinned value, every other byte stays as it was, and anything
// other than one JSON object is ErrNotObject. An instance whose model is
// unknown gets the client's model members removed, never passed through.
// FuzzJSONScan holds both scanners to encoding/json, FuzzHeldMembers
// heldMembers to jsonScan, FuzzPinReader the stream to Pin.
//
// # Concurrency
//
// Pin and Value are pure. A Reader is read by one goroutine
// at a time; its Failure and Complete may be called from any goroutine.
// It imports the standard library only. Its place on both paths is
// docs/architecture.md section 3.
package modelpin
