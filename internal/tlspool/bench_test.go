package tlspool

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// BenchmarkPoolExchange is one 200-byte request and its 300-byte answer
// per operation through the pool (Get, write, read, Put) and the server,
// on loopback: the figure to set beside internal/mesh's
// BenchmarkMeshExchange, with the CPU time of both ends per exchange.
func BenchmarkPoolExchange(b *testing.B) {
	cert, addr, skey := benchServer(b, func(_ context.Context, _ string, c net.Conn) {
		req, answer := make([]byte, 200), make([]byte, 300)
		for {
			if _, err := io.ReadFull(c, req); err != nil {
				return
			}
			if _, err := c.Write(answer); err != nil {
				return
			}
		}
	})
	ctx := context.Background()
	p, err := NewPool(Config{Certificate: cert})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	req, answer := make([]byte, 200), make([]byte, 300)
	exchange := func() {
		c, err := p.Get(ctx, addr, skey)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, answer); err != nil {
			b.Fatal(err)
		}
		p.Put(c)
	}
	for range 10 {
		exchange()
	}
	cpu0 := cpuTime()
	b.ResetTimer()
	for range b.N {
		exchange()
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
}

// cpuTime is the user and system CPU time of this process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPoolGetPut is the pool's own work of a request on a warm
// connection: Get of the idle one (put back a moment ago, so not peeked)
// and Put, without the exchange between them.
func BenchmarkPoolGetPut(b *testing.B) {
	cert, addr, skey := benchServer(b, func(_ context.Context, _ string, c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	ctx := context.Background()
	p, err := NewPool(Config{Certificate: cert, PeekAfter: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	c, err := p.Get(ctx, addr, skey)
	if err != nil {
		b.Fatal(err)
	}
	p.Put(c)
	b.ReportAllocs()
	for b.Loop() {
		c, err := p.Get(ctx, addr, skey)
		if err != nil {
			b.Fatal(err)
		}
		p.Put(c)
	}
}

// benchServer runs, until the benchmark ends, a server on loopback that
// admits only the client certificate it returns and serves each
// connection with handle; it returns that certificate, the server's
// address and its key.
func benchServer(b *testing.B, handle func(context.Context, string, net.Conn)) (tls.Certificate, string, ed25519.PublicKey) {
	b.Helper()
	cert, key := newCert(b)
	scert, skey := newCert(b)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv, err := NewServer(ServerConfig{Listener: ln, Certificate: scert,
		Admit: func(k ed25519.PublicKey, _ net.Addr) (string, error) {
			if !k.Equal(key) {
				return "", errors.New("not admitted")
			}
			return "client", nil
		},
		Handle: handle})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	return cert, ln.Addr().String(), skey
}
