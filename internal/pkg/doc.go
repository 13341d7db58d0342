// Package pkg reads, builds, signs and verifies nodeld workload packages,
// and keeps the node's revocation list.
//
// # Packages
//
// A package is a directory holding manifest.json, manifest.sig and the
// files the manifest lists. manifest.json (Manifest) names the package
// (id, version), its kind (inference, with the role it serves, or
// service), its runtime (process, llama.cpp, ollama or mlx-lm, with
// command, args, env, model or model_file and an optional health path),
// one or more variants and every file with its size, SHA-256 and exec
// bit. The design brief's "mode" is the boolean "exec": packages carry no
// other permission bits.
//
// # Requirements
//
// A variant is a route: requirements (in the grammar of the capability
// records nodes sign, internal/grammar: a selector exact or dot-prefix,
// predicates eq gte lte in has on attributes, a count, exclusive use, a
// minimum provenance), an execution (native, or emulated: placed only
// when emulation is allowed) and resources, its own memory demand
// (mem_bytes on the host, vram_bytes on accelerators, cpu_millis). The
// first manifest grammar's requires block (arch, os, gpu, runtimes) keeps
// working: EffectiveRequirements reads it as the equivalent requirements
// (cpu.arch.<a>, os.<o>, accel.gpu, runtime.<kind> with the runtime
// spelled as its capability word), followed by the declared ones;
// CommonRequirements adds the package's own runtime. A package also
// carries labels and excludes (co-residency), an optional perf target
// (id, param, param_value, better, budget) over measured capabilities,
// and sticky. Manifests without these fields encode exactly as before,
// so packages signed before requirements existed still verify.
//
// manifest.sig is {"signatures":[{"key": hex, "sig": hex}]}: ed25519
// signatures by publisher keys over "nodeld.pkg.manifest.v1\x00" followed
// by the exact bytes of manifest.json. The manifest is never
// re-marshalled to be verified, and it is parsed only after a signature
// by a trust anchor verified over the bytes as read. A package's artifact
// hash is the SHA-256 of manifest.json (ManifestHash).
//
// The publisher's workflow (nodeld package keygen|sign|verify) is
// GenerateKey, Build (fill files[] from the directory and write the
// manifest), Sign, VerifyDir. A host fetching a package checks the
// manifest and signature bytes with VerifyBytes before fetching any file,
// then the finished directory with VerifyDir.
//
// # Invariants
//
//   - Decoding is strict and bounded: unknown fields, duplicate keys and
//     trailing data are errors; every size and count is bounded by a
//     constant in limits.go and checked before the bytes are read; a
//     predicate value is a grammar.Value (bool, integer, float, string or
//     a bounded list of those), refused while decoding when it is
//     anything else; the trust family can be neither required nor a perf
//     target (tiers are the operator's).
//   - Listed paths are relative, clean, slash-separated, without "..",
//     backslashes, colons or control characters, unique, never a
//     directory of another listed path, and never manifest.json or
//     manifest.sig. VerifyDir opens them through an os.Root and refuses
//     any symbolic link on their way, so nothing outside the directory is
//     ever read. Unlisted files are ignored; runtimes use listed files
//     only.
//   - A package verifies only when a trust anchor signed it, every listed
//     file has its listed size and SHA-256 (hashed streaming), and no
//     subject it names is revoked: its id, any key with a valid signature
//     in manifest.sig (anchor or not), its manifest hash, any file's hash.
//   - Refusals are *VerifyError with a stable Code (bad_signature,
//     untrusted_signer, bad_manifest, file_missing, file_size, file_hash,
//     path_escape, too_large, revoked, bad_notice).
//
// # Store
//
// Store is the controller's package store, <data_dir>/store: each
// package in <id>/<version>/. Store.Add verifies a package (anchors,
// revocations, every file) and copies it in, hashing each file as it is
// copied, through a temporary directory renamed into place; a stored
// package is never replaced (another package under the same id and
// version is ErrStoreConflict). Store.Resolve finds a version, or the
// newest by semantic version (CompareVersions, NewestVersion: semver 2.0.0
// precedence, an optional leading "v"; the highest release, else the
// highest pre-release; versions that are not semantic sort below every
// semantic one and are only ever chosen by name).
//
// PlacedStore is the controller's placed-package store,
// <data_dir>/placed: the package an operator placement placed, in
// <manifest hash>/, copied as Store.Add copies (the verified manifest and
// signature bytes, each listed file hashed as it is copied, through a
// temporary directory renamed into place), at most MaxPlaced of them;
// Prune drops those no placement uses and copies a crash left.
//
// # Revocations
//
// Revocations is <data_dir>/revocations.json (mode 0600, written to a
// temp file, fsynced, renamed, directory fsynced). It holds subjects
// (package id, signer key, artifact hash), a generation counter, and the
// last sequence number applied from each controller's signed notices. An
// unreadable or undecodable file is an error, never an empty list. Adding
// a revocation takes effect in memory even when the file cannot be
// written (the error is returned); lifting one takes effect only once
// written. Controllers sign notices (SignNotice) over
// "nodeld.pkg.revocation.v1\x00" followed by the exact payload bytes;
// VerifyNotice accepts them only from configured controller keys, and
// ApplyNotice only with a sequence number above the last applied from
// that controller, so replaying an old notice neither revives nor lifts
// a revocation. Subscribe signals changes so the host can tear down
// running instances that carry a newly revoked subject (CheckVerified).
//
// # Concurrency
//
// Package functions are safe for concurrent use. *Revocations is safe
// for concurrent use: readers take a mutex that is never held across
// I/O; mutations are serialised by a second mutex held across the file
// write, so the file and memory advance in the same order and a reader
// never waits for a disk. The package starts no goroutines.
package pkg
