//go:build linux && !race

package httpfast

import (
	"syscall"
	"unsafe"
)

// sysRead is read(2) without the runtime's system-call bookkeeping: the
// calling goroutine keeps its P.
func sysRead(fd uintptr, b []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
	return int(n), e
}

// sysWritev is writev(2) of iov, as sysRead.
func sysWritev(fd uintptr, iov []syscall.Iovec) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(unsafe.SliceData(iov))), uintptr(len(iov)))
	return int(n), e
}

// sysPeek is a non-blocking recv(2) with MSG_PEEK into b, as sysRead.
func sysPeek(fd uintptr, b []byte) syscall.Errno {
	_, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)),
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	return e
}
