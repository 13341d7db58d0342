package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"sync"
)

// relayBuf bounds one message the relay moves: a request or an answer
// must arrive in one read of at most this many bytes.
const relayBuf = 64 << 10

// runRelay is the floor a Go proxy stands on: a relay that does no HTTP
// work at all. Each accepted connection is paired with a connection of
// its own to the upstream, and the relay moves one read of the client to
// the upstream, then one read of the upstream back, in lockstep. That is
// right for the small keep-alive exchanges of scripts/bench-chat.lua (one
// request a read, one answer a read), and wrong for anything larger or
// streamed: it is a measuring stick, not a proxy.
//
// -mode goroutine serves each pair in a goroutine on net.Conn, as any Go
// server does; -mode epoll serves every pair from one thread over one
// epoll set with non-blocking system calls, as nginx does.
func runRelay(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "loopback address to serve on")
	upstream := fs.String("upstream", "", "loopback host:port of the upstream")
	mode := fs.String("mode", "goroutine", "goroutine, epoll or mux")
	tlsIn := fs.Bool("tls-in", false, "serve TLS 1.3 (with -cert and -key)")
	tlsOut := fs.Bool("tls-out", false, "reach the upstream over TLS 1.3, -cert its only root")
	certFile := fs.String("cert", "", "PEM certificate for -tls-in and -tls-out")
	keyFile := fs.String("key", "", "PEM key for -tls-in")
	conns := fs.Int("conns", 2, "-mode mux -tls-out: shared TLS connections to the upstream")
	if err := fs.Parse(args); err != nil {
		return err
	}
	up, err := net.ResolveTCPAddr("tcp", *upstream)
	if err != nil || !up.IP.IsLoopback() {
		return fmt.Errorf("relay: -upstream %q is not a loopback host:port", *upstream)
	}
	sec, err := loadTLSRelay(*tlsIn, *tlsOut, *certFile, *keyFile)
	if err != nil {
		return err
	}
	if *mode == "epoll" && (*tlsIn || *tlsOut) {
		return errors.New("relay: -mode epoll is plain TCP only")
	}
	if *conns < 1 || *conns > 64 {
		return fmt.Errorf("relay: -conns %d is not in 1..64", *conns)
	}
	ln, err := listenLoopback("relay", *listen)
	if err != nil {
		return err
	}
	if sec.in != nil {
		ln = tls.NewListener(ln, sec.in)
	}
	fmt.Fprintln(out, "listening", ln.Addr())
	go func() {
		<-ctx.Done()
		_ = ln.Close()
	}()
	switch *mode {
	case "goroutine":
		return relayGoroutines(ctx, ln, up, sec)
	case "mux":
		if *tlsOut {
			return relayMuxOut(ctx, ln, up, sec, *conns)
		}
		return relayMuxIn(ctx, ln, up)
	case "epoll":
		return relayEpoll(ctx, ln.(*net.TCPListener), up)
	default:
		_ = ln.Close()
		return fmt.Errorf("relay: -mode %q is not goroutine, epoll or mux", *mode)
	}
}

func relayGoroutines(ctx context.Context, ln net.Listener, up *net.TCPAddr, sec tlsRelay) error {
	return serveEach(ctx, ln, func(c net.Conn) {
		u, err := sec.dialUp(up)
		if err != nil {
			_ = c.Close()
			return
		}
		relayPair(ctx, c, u)
	})
}

// serveEach runs serve in a goroutine for each connection ln accepts,
// until ln fails (nil when ctx ended, which closes ln), and waits for them.
func serveEach(ctx context.Context, ln net.Listener, serve func(net.Conn)) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		wg.Go(func() { serve(c) })
	}
}

// relayPair moves one read each way at a time until either side ends.
func relayPair(ctx context.Context, c, u net.Conn) {
	stop := context.AfterFunc(ctx, func() { _ = c.Close(); _ = u.Close() })
	defer stop()
	defer c.Close()
	defer u.Close()
	buf := make([]byte, relayBuf)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		if _, err := u.Write(buf[:n]); err != nil {
			return
		}
		if n, err = u.Read(buf); err != nil {
			return
		}
		if _, err := c.Write(buf[:n]); err != nil {
			return
		}
	}
}

// errNoEpoll is -mode epoll off Linux.
var errNoEpoll = errors.New("relay: -mode epoll needs Linux")
