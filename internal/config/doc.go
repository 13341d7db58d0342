// Package config is nodeld's configuration: the YAML schema, its defaults,
// strict decoding, static validation, node references (ResolveNodeRef) and
// the diff a reload uses.
//
// # Invariants
//
//   - Parse decodes one YAML document of at most MaxConfigBytes onto
//     Default(); every unknown or duplicate key, alias or mistyped value is
//     reported in one run, each with its line, as
//     "line N: <dotted.path[i].key>: <message>", joined with errors.Join.
//   - A Config returned by Load, Check or LoadEmbedded has passed Validate:
//     every role and admin listener is loopback, every instance URL a
//     loopback http URL, every serve_to and use_from entry a configured
//     peer, every duration and limit positive, no peer without a tier.
//   - Validate is static: it opens no file and resolves no host name.
//
// # Concurrency
//
// The package has no state and starts no goroutine. A *Config is a plain
// value: safe for concurrent reads, not for concurrent writes. It imports
// no other internal package but the leaves.
//
// The long story is docs/internals.md "internal/config"; every key is
// README.md "Configuration".
package config
