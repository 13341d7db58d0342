//go:build unix

package tlspool

import (
	"errors"
	"net"
	"syscall"
)

// peerOpen reports whether an idle connection is still open from its
// peer's side: a peek that would block (nothing to read, no end of
// stream) says it is; an end of stream, an error or unexpected bytes
// (nothing is due on an idle connection) say it is not. One non-blocking
// system call, no goroutine and no timer.
func peerOpen(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	var buf [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK)
		return true // never wait for readiness
	})
	return err == nil && open
}
