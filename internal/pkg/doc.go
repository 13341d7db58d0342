// Package pkg reads, builds, signs and verifies nodeld workload packages (a
// directory of manifest.json, manifest.sig and the files the manifest
// lists), keeps the controller's package stores (Store, <data_dir>/store;
// PlacedStore, <data_dir>/placed) and the node's revocation list
// (Revocations, with the controllers' signed notices).
//
// # Invariants
//
//   - The manifest is parsed only after a trust anchor's signature
//     verified over its bytes as read; it is never re-marshalled to verify.
//     Decoding is strict and bounded (limits.go).
//   - Listed paths are relative and clean and never escape: VerifyDir opens
//     them through an os.Root and refuses any symbolic link on the way.
//   - A package verifies only when an anchor signed it, every listed file
//     has its size and SHA-256, and no subject it names (id, signer,
//     manifest hash, file hash) is revoked. Refusals are *VerifyError with
//     a stable Code.
//   - A stored package is never replaced. An unreadable revocation file is
//     an error, never an empty list; a notice applies only with a sequence
//     number above the last from its controller, so a replay changes
//     nothing.
//
// # Concurrency
//
// Package functions are safe for concurrent use. *Revocations is: readers
// take a mutex never held across I/O; mutations are serialised by a second
// mutex held across the file write, so file and memory advance in the same
// order. The package starts no goroutine.
//
// The long story (manifests and requirements, signing, stores, revocation
// notices) is docs/internals.md "internal/pkg".
package pkg
