// Package identity owns the node's ed25519 key: loading it from
// <data_dir>/node.key (PKCS#8 PEM, mode 0600), generating it on first
// start, deriving the node id, and making the self-signed TLS certificate
// the mesh presents.
//
// # Invariants
//
// A key file readable or writable by group or others is
// refused, never silently fixed; an existing key file is never
// overwritten; the node id is always "n-" followed by the first 16 hex
// characters of SHA-256 of the raw public key. Ids name things; trust
// binds to the full key.
//
// # Concurrency
//
// Every function is safe for concurrent use; *Identity is
// immutable after Load or Generate. The package starts no goroutines.
//
// How keys, ids and rotation look to an operator is README.md "Identity
// and the audit chain".
package identity
