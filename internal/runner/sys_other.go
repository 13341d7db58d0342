//go:build !linux

package runner

import "syscall"

// isLinux reports whether /proc can be read to police listeners.
const isLinux = false

// procAttr puts a managed process in its own process group, so the whole
// group can be signalled. (There is no parent-death signal outside Linux.)
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
