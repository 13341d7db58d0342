// Package sandbox isolates the processes nodeld starts for placed
// packages: it confines what they can reach on the file system
// (Landlock), which user they run as (a dynamic uid of their own), and
// what they may consume (per-instance cgroups with memory, pids and CPU
// limits), and reports an instance the kernel killed for exceeding its
// memory.
//
// # How an instance is launched
//
// The runner starts a placed instance's command through Instance.Wrap:
// the command becomes nodeld itself, run as LauncherName (argv[0]), with
// the real command line, the paths it may read and write and the devices
// it may use in a Spec (JSON, at most MaxSpecBytes) on file descriptor 3.
// Where the daemon is root and users isolation is on, the launcher is
// started with the instance's uid and gid (Go's exec drops every
// capability with the uid switch) and the instances' shared group, which
// alone may search the data directory. Once the launcher's pid exists,
// the daemon moves it into the instance's cgroup and only then writes the
// spec: the launcher reads the spec to its end before it does anything,
// so no instance code runs outside its cgroup. The launcher
// (LauncherMain, dispatched at the top of nodeld's main before anything
// else) sets no_new_privs, restricts itself with Landlock and execs the
// command, which inherits all of it: a domain can only narrow.
//
// # What an instance can reach
//
// Read and execute: its package directory, the system's programs and
// libraries (/usr, /lib*, /bin, /sbin), the files under /etc that
// programs need to start and resolve names (never /etc as a whole:
// nodeld's own config lives there), /proc and /sys, and the operator's
// host.isolation.read_paths. Read and write: its scratch directory
// <data_dir>/scratch/<instance> and the tmp directory inside it (TMPDIR),
// and the common character devices (/dev/null ...), GPU device nodes
// included (ioctl allowed). Nothing else: not node.key, the chain, the
// controller state, the package store, other instances' scratch
// directories. Where the kernel has Landlock ABI 6 or later, signals and
// abstract unix sockets outside the instance's domain are refused too.
//
// # Invariants
//
//   - Fail closed: with filesystem isolation on and no Landlock in the
//     kernel, Supported says so and the host refuses to place; the
//     launcher refuses to exec when the spec asks for Landlock and the
//     kernel cannot give it.
//   - A spec is decoded strictly (unknown fields, trailing bytes, oversize
//     input and relative paths are errors) before anything is applied.
//   - Every uid handed out is inside host.isolation.uid_range and held by
//     one live instance at a time.
//
// # Concurrency
//
// An Isolator is safe for concurrent use; mu guards its uid allocations.
// An Instance's methods may be called from several goroutines (the
// runner's spawn and reap); it starts no goroutine.
package sandbox
