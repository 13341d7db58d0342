package runner

import "syscall"

// isLinux reports whether /proc can be read to police listeners.
const isLinux = true

// procAttr puts a managed process in its own process group, so the whole
// group can be signalled, and has the kernel SIGKILL it if nodeld dies.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
