//go:build linux && race

package httpfast

import (
	"syscall"
	"unsafe"
)

// Under the race detector RawIO reads and writes through package
// syscall's Read and Write, whose annotations tell the detector that a
// write to a socket happens before the read of its bytes, as net's own
// connections do; everything else about RawIO is the same.
func sysRead(fd uintptr, b []byte) (int, syscall.Errno) {
	n, err := syscall.Read(int(fd), b)
	return errnoOf(n, err)
}

// sysWritev is writev(2) of iov, after an empty syscall.Write for the
// detector's sake.
func sysWritev(fd uintptr, iov []syscall.Iovec) (int, syscall.Errno) {
	if _, err := syscall.Write(int(fd), nil); err != nil {
		return errnoOf(-1, err)
	}
	n, _, e := syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(unsafe.SliceData(iov))), uintptr(len(iov)))
	return int(n), e
}

func errnoOf(n int, err error) (int, syscall.Errno) {
	if err == nil {
		return n, 0
	}
	if e, ok := err.(syscall.Errno); ok {
		return 0, e
	}
	return 0, syscall.EIO
}

// sysPeek is a non-blocking recv(2) with MSG_PEEK into b.
func sysPeek(fd uintptr, b []byte) syscall.Errno {
	_, _, err := syscall.Recvfrom(int(fd), b, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	_, e := errnoOf(0, err)
	return e
}
