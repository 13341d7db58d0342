// Package grammar holds the syntax rules that more than one package
// enforces: names (roles, peers, workloads, packages, variants, label keys,
// runtime names), node names, versions, instance ids, label values,
// environment variable names, health check paths, capability ids, the
// runtime kinds nodeld knows, and what counts as a loopback address. Each rule has exactly one home here, so config check
// refuses what the component that later consumes a value would refuse.
//
// It is a leaf: it imports the standard library only, and every package of
// the module may import it, including the otherwise isolated table and
// chain (deps_test.go). It does no I/O, keeps no state and reads no clock;
// every function is a pure predicate or parser, safe for concurrent use,
// and starts no goroutines.
//
// # Invariants
//
//   - A Name is 1 to MaxNameLen bytes of words of a-z 0-9 _ -, each word
//     starting with a-z or 0-9, joined by single dots ("qwen2.5-7b"). So a
//     Name is never "." or "..", never starts with '-', '_' or '.', never
//     holds '/', upper case or a byte that JSON, a URL path or a log line
//     would escape, and "label." + a Name is a capability id whenever the
//     capability bounds allow it.
//   - A node name is a Name in which letters may also be upper case (it is
//     often a host name); compare node names with strings.EqualFold.
//   - A capability id is 1 to MaxCapabilitySegments Name words joined by
//     dots, at most MaxCapabilityLen bytes ("cpu.arch.amd64",
//     "runtime.llamacpp"). A capability record's id has at least
//     MinCapabilityRecordSegments words; a requirement selector selects an
//     id exactly or as a dot-prefix (SelectorMatches). The capability
//     vocabulary (provenances claimed < probed < measured, states, the
//     predicate operators eq gte lte in has, attribute names, the trust
//     family no node may claim) is defined in capability.go, once, for
//     facts, manifests and the placement engine; the well-known ids and
//     attribute names that facts emit and manifests select (cpu.arch.*,
//     mem.system, mem.unified, mem.vram, accel.gpu.*, runtime.*, label.*,
//     perf.infer.*), label keys (one capability word) and the runtime
//     spelling rule in capids.go.
//   - A Value (an attribute value or predicate operand) is a bool, an
//     int64, a finite float, a string of at most MaxValueStringLen bytes
//     of UTF-8, or a list of at most MaxValueListLen of those scalars; its
//     JSON form keeps the kind across a round trip, and decoding refuses
//     anything else before building it.
//   - A loopback host is "localhost" (ASCII case-insensitive, nothing more
//     or less), an IPv4 address in 127.0.0.0/8 in dotted decimal without
//     leading zeros, the IPv6 address ::1 in any spelling, or an IPv4-mapped
//     IPv6 form of a 127.0.0.0/8 address; never with a zone. Parsers return
//     the address unmapped ([::ffff:127.0.0.1] becomes 127.0.0.1) and map
//     "localhost" to 127.0.0.1, so what they return is an IP literal that
//     is dialled or bound without a name lookup.
//   - Ports are plain decimal without sign or leading zero. A listen
//     address (ParseLoopbackAddrPort) must be an IP literal and may use
//     port 0; an endpoint URL (ParseLoopbackURL) may name localhost, must
//     use port 1 to 65535 and has no path beyond a single "/".
//   - Every refusal of a loopback parser matches ErrNotLoopback with
//     errors.Is; its text is a short reason that never repeats the input,
//     so callers add the input, quoted and bounded, as they see fit.
package grammar
