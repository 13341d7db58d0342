//go:build unix

package httpfast

import (
	"net"
	"syscall"
)

// ConnAlive reports whether an idle connection is still open and silent:
// a non-blocking peek finds nothing to read. A peer that closed it (end of
// file) or sent bytes nobody asked for makes it unusable. One system call,
// no goroutine, no timer; a connection that is not a syscall.Conn is taken
// as alive. The upstream pool checks instances' connections with it, and
// internal/tlspool the raw TCP under its idle TLS connections.
func ConnAlive(c net.Conn) bool {
	if a, ok := c.(interface{ alive() bool }); ok {
		return a.alive() // a RawIO connection
	}
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
		e := sysPeek(fd, b[:])
		alive = e == syscall.EAGAIN
		return true // never wait for readiness
	})
	return err == nil && alive
}
