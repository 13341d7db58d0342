//go:build unix && !linux

package httpfast

import "syscall"

// sysPeek is a non-blocking recv(2) with MSG_PEEK into b (on Linux, a raw
// one: rawsys_linux.go).
func sysPeek(fd uintptr, b []byte) syscall.Errno {
	_, _, err := syscall.Recvfrom(int(fd), b, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	if err == nil {
		return 0
	}
	if e, ok := err.(syscall.Errno); ok {
		if e == syscall.EWOULDBLOCK {
			return syscall.EAGAIN
		}
		return e
	}
	return syscall.EIO
}
