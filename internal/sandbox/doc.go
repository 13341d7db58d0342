// Package sandbox isolates the processes nodeld starts for placed
// packages: it confines what they can reach on the file system (Landlock),
// which user they run as (a dynamic uid of their own), and what they may
// consume (per-instance cgroups with memory, pids and CPU limits), and
// reports an instance the kernel killed for exceeding its memory. The
// runner starts an instance through Instance.Wrap: the command becomes
// nodeld itself as LauncherName, with a Spec on file descriptor 3; the
// launcher (LauncherMain) sets no_new_privs, restricts itself with
// Landlock and execs the real command, which inherits all of it.
//
// # Invariants
//
//   - No instance code runs outside its cgroup: the launcher is moved into
//     it before the spec is written, and reads the spec whole before it
//     does anything.
//   - An instance reads its package, the system's programs and libraries,
//     what programs need of /etc, /proc, /sys and host.isolation.read_paths,
//     and writes only its scratch directory and the common devices: never
//     node.key, the chain, the controller state or another instance's
//     files.
//   - Fail closed: with filesystem isolation on and no Landlock in the
//     kernel the host refuses to place, and the launcher refuses to exec.
//   - A spec is decoded strictly and bounded (MaxSpecBytes) before anything
//     is applied. Every uid handed out is inside host.isolation.uid_range
//     and held by one live instance at a time.
//
// # Concurrency
//
// An Isolator is safe for concurrent use; mu guards its uid allocations.
// An Instance's methods may be called from several goroutines (the
// runner's spawn and reap); it starts no goroutine.
//
// The long story (how an instance is launched, what it can reach) is
// docs/internals.md "internal/sandbox"; the operator's side is README.md.
package sandbox
