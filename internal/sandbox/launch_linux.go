package sandbox

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// LauncherMain is the launcher: it reads its Spec from SpecFD, sets
// no_new_privs, applies Landlock and execs the command. It returns only
// on failure, with the exit status the caller should use (126, as a
// shell does for a command that cannot run), having said why on stderr.
func LauncherMain() int {
	// The exec below replaces the thread that applied the rules.
	runtime.LockOSThread()
	if err := launch(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", LauncherName, err)
	}
	return 126
}

func launch() error {
	f := os.NewFile(SpecFD, "spec")
	if f == nil {
		return errors.New("no spec on fd 3")
	}
	spec, err := DecodeSpec(f)
	f.Close()
	if err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if spec.Landlock {
		if err := restrict(spec); err != nil {
			return fmt.Errorf("landlock: %w", err)
		}
	}
	return fmt.Errorf("exec %s: %w", spec.Path, syscall.Exec(spec.Path, spec.Args, os.Environ()))
}

// LandlockABI is the kernel's Landlock ABI version, 0 when it has none.
func LandlockABI() int {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// Rights the rules grant.
const (
	readRights = llsys.AccessFSExecute | llsys.AccessFSReadFile | llsys.AccessFSReadDir
	fileRead   = llsys.AccessFSExecute | llsys.AccessFSReadFile
	writeExtra = llsys.AccessFSWriteFile | llsys.AccessFSRemoveDir | llsys.AccessFSRemoveFile |
		llsys.AccessFSMakeDir | llsys.AccessFSMakeReg | llsys.AccessFSMakeSock | llsys.AccessFSMakeFifo |
		llsys.AccessFSMakeSym | llsys.AccessFSTruncate
	deviceRights = llsys.AccessFSReadFile | llsys.AccessFSWriteFile | llsys.AccessFSReadDir |
		llsys.AccessFSIoctlDev | llsys.AccessFSTruncate
)

// restrict applies spec's rules to this process with the newest Landlock
// the kernel has, refusing a kernel with none. Network access is not
// handled: a server must listen (nodeld polices loopback).
func restrict(spec Spec) error {
	if LandlockABI() < 1 {
		return errors.New("the kernel has no Landlock")
	}
	write := landlock.AccessFSSet(readRights | writeExtra)
	if LandlockABI() >= 2 {
		// Refer (rename and link across directories) exists from ABI 2;
		// asking for it on ABI 1 would make go-landlock enforce nothing.
		write |= llsys.AccessFSRefer
	}
	cfg := landlock.Config{HandledAccessFS: landlock.V7.HandledAccessFS, Scoped: landlock.V7.Scoped}.BestEffort()
	var rules []landlock.Rule
	add := func(rights landlock.AccessFSSet, fileRights landlock.AccessFSSet, paths []string) {
		for _, p := range paths {
			fi, err := os.Stat(p)
			if err != nil {
				continue // a path that does not exist grants nothing
			}
			r := rights
			if !fi.IsDir() {
				r = fileRights
			}
			rules = append(rules, landlock.PathAccess(r, p))
		}
	}
	add(readRights, fileRead, spec.Read)
	add(write, write&fileRights(), spec.Write)
	add(deviceRights, deviceRights&fileRights(), spec.Devices)
	return cfg.Restrict(rules...)
}

// fileRights are the rights that apply to a file (not a directory).
func fileRights() landlock.AccessFSSet {
	return llsys.AccessFSExecute | llsys.AccessFSWriteFile | llsys.AccessFSReadFile |
		llsys.AccessFSTruncate | llsys.AccessFSIoctlDev
}
