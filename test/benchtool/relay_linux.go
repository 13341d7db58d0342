package main

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"syscall"
	"unsafe"
)

// relayEpoll serves every pair from one locked thread: one epoll set,
// non-blocking sockets, raw read and write calls, as an event-loop proxy
// does. Each pair still moves one read each way in lockstep.
func relayEpoll(ctx context.Context, ln *net.TCPListener, up *net.TCPAddr) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	lf, err := ln.File() // a blocking duplicate; made non-blocking below
	_ = ln.Close()
	if err != nil {
		return err
	}
	defer lf.Close()
	lfd := int(lf.Fd())
	if err := syscall.SetNonblock(lfd, true); err != nil {
		return err
	}
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	defer syscall.Close(ep)
	watch := func(fd int) error {
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)}
		return syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, fd, &ev)
	}
	if err := watch(lfd); err != nil {
		return err
	}
	sa := &syscall.SockaddrInet4{Port: up.Port}
	copy(sa.Addr[:], up.IP.To4())
	other := map[int]int{}
	defer func() {
		for fd := range other {
			_ = syscall.Close(fd)
		}
	}()
	closePair := func(fd int) {
		o := other[fd]
		delete(other, fd)
		delete(other, o)
		_ = syscall.Close(fd)
		_ = syscall.Close(o)
	}
	pair := func(cfd int) error {
		ufd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		if err := syscall.Connect(ufd, sa); err != nil {
			_ = syscall.Close(ufd)
			return err
		}
		for _, fd := range []int{cfd, ufd} {
			_ = syscall.SetNonblock(fd, true)
			_ = syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
		}
		other[cfd], other[ufd] = ufd, cfd
		if err := watch(cfd); err != nil {
			closePair(cfd)
			return err
		}
		if err := watch(ufd); err != nil {
			closePair(cfd)
			return err
		}
		return nil
	}
	buf := make([]byte, relayBuf)
	p := uintptr(unsafe.Pointer(&buf[0]))
	events := make([]syscall.EpollEvent, 256)
	for ctx.Err() == nil {
		n, err := syscall.EpollWait(ep, events, 200)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("relay: epoll_wait: %w", err)
		}
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			if fd == lfd {
				for {
					cfd, _, err := syscall.Accept4(lfd, syscall.SOCK_CLOEXEC)
					if err != nil {
						break
					}
					if err := pair(cfd); err != nil {
						_ = syscall.Close(cfd)
					}
				}
				continue
			}
			o, ok := other[fd]
			if !ok {
				continue
			}
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), p, uintptr(len(buf)))
			if e == syscall.EAGAIN {
				continue
			}
			if e != 0 || r == 0 {
				closePair(fd)
				continue
			}
			// A small message into an idle loopback socket: written whole,
			// or the pair is dropped (a measuring stick, not a proxy).
			w, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(o), p, r)
			if e != 0 || w != r {
				closePair(fd)
			}
		}
	}
	return nil
}
