//go:build unix

package httpfast

import (
	"net"
	"syscall"
)

// connAlive reports whether an idle connection to an instance is still
// open and silent: a non-blocking peek finds nothing to read. An instance
// that closed it (end of file) or sent bytes nobody asked for makes it
// unusable.
func connAlive(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		alive = rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK
		return true // never wait for readiness
	})
	return err == nil && alive
}
