// Package config is nodeld's configuration: the YAML schema (the types of
// DESIGN.md "Configuration"), its defaults, strict decoding, static
// validation and the diff a reload uses.
//
// # Decoding
//
// Parse decodes exactly one YAML document of at most MaxConfigBytes onto
// Default(), walking the yaml.Node tree itself so that every unknown key,
// duplicate key, alias or mistyped value is reported in one run, each
// with its line. It records the line of every key it sets; Config.Line
// and Validate use them. A duration that does not parse is kept as
// written and reported by Validate, so that it does not hide other
// problems. Check and Load report decoding and validation problems
// together.
//
// # Errors
//
// Every problem is a *DecodeError or *ValidationError whose text is
//
//	line N: <dotted.path[i].key>: <message>
//
// ("line N: " is left out when no line is known, the path when the
// problem concerns the whole document). Several are joined with
// errors.Join; Load wraps them in a *FileError naming the file.
//
// # Invariants
//
// A Config returned by Load, Check or LoadEmbedded has passed Validate:
// every role and admin listener is loopback, every instance URL is a
// loopback http URL, every serve_to and use_from entry names a configured
// peer (see PeerByRef), every host.readers entry is a key or a
// configured peer's name, every duration and limit is positive, and no
// peer has an empty tier. Validate is static: it opens no file and
// resolves no host name.
//
// # Concurrency
//
// The package has no state and starts no goroutines. A *Config is a
// plain value: safe for concurrent reads, not for concurrent writes.
// The package imports no other internal package.
package config
