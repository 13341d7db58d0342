package mesh

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"io"
	"math/big"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// BenchmarkQUICLoopbackBody is quic-go alone on loopback, with none of the
// mesh around it: what the library allows for the mesh hop's 1 MiB body
// case. Each operation opens a stream, writes a 1 MiB body and its FIN,
// and waits for the peer's one-byte answer after it read the body to its
// end, as a serving node answers a request. "default" is quic-go's
// flow-control windows, "mesh" the windows the mesh configures.
func BenchmarkQUICLoopbackBody(b *testing.B) {
	for _, c := range []struct {
		name string
		conf func() *quic.Config
	}{
		{"default", func() *quic.Config { return &quic.Config{} }},
		{"mesh", func() *quic.Config { return flowWindows(&quic.Config{}) }},
	} {
		b.Run(c.name, func(b *testing.B) { benchQUICBody(b, c.conf(), 1<<20) })
	}
}

func benchQUICBody(b *testing.B, conf *quic.Config, size int) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		b.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	ln, err := quic.ListenAddr("127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"bench"}}, conf)
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		conn, err := ln.Accept(ctx)
		if err != nil {
			return
		}
		buf := make([]byte, 64<<10)
		for {
			s, err := conn.AcceptStream(ctx)
			if err != nil {
				return
			}
			go func() {
				for {
					if _, err := s.Read(buf); err != nil {
						break
					}
				}
				_, _ = s.Write([]byte{1})
				_ = s.Close()
			}()
		}
	}()
	conn, err := quic.DialAddr(ctx, ln.Addr().(*net.UDPAddr).String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"bench"}}, conf)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.CloseWithError(0, "")
	body := make([]byte, size)
	b.SetBytes(int64(size))
	cpu0 := cpuTime()
	b.ResetTimer()
	for range b.N {
		s, err := conn.OpenStreamSync(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for off := 0; off < size; off += 64 << 10 {
			if _, err := s.Write(body[off:min(off+64<<10, size)]); err != nil {
				b.Fatal(err)
			}
		}
		_ = s.Close()
		if _, err := io.ReadAll(s); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
}

// cpuTime is the user and system CPU time of this process so far: both
// ends of the benchmark's connection run in it.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func flowWindows(c *quic.Config) *quic.Config {
	c.InitialStreamReceiveWindow = 4 << 20
	c.MaxStreamReceiveWindow = 8 << 20
	c.InitialConnectionReceiveWindow = 8 << 20
	c.MaxConnectionReceiveWindow = 32 << 20
	return c
}

// BenchmarkMeshExchange is one request and its answer per operation over
// a mesh link, one at a time, framed as the proxy frames them: the opener
// writes a request frame and its end, the handler reads it, answers with
// a frame and its end, and the opener reads the answer to its end. It
// reports the datagrams each side sent per exchange (QUIC packets; the
// fewer, the fewer wake-ups of both nodes) and the CPU time of both sides
// per exchange.
func BenchmarkMeshExchange(b *testing.B) {
	a, c := pair(b)
	a.m.Handle(KindInfer, func(_ context.Context, _ PeerInfo, s *Stream) {
		if _, _, err := ReadFrame(s, 1<<10); err != nil {
			s.Reset(StreamCodeMalformed)
			return
		}
		_ = WriteFrame(s, 1, make([]byte, 300))
		_ = s.CloseWrite()
		s.FinishReading(time.Second)
	})
	ctx := context.Background()
	req := make([]byte, 200)
	var buf [1 << 10]byte
	exchange := func() {
		s, err := c.m.OpenStream(ctx, a.id(), KindInfer)
		if err != nil {
			b.Fatal(err)
		}
		if err := WriteFrame(s, 1, req); err != nil {
			b.Fatal(err)
		}
		_ = s.CloseWrite()
		if _, _, err := ReadFrameInto(s, buf[:]); err != nil {
			b.Fatal(err)
		}
		s.FinishReading(time.Second)
	}
	for range 10 {
		exchange()
	}
	la, lc := a.link(c.id()), c.link(a.id())
	sa, sc := la.conn.ConnectionStats(), lc.conn.ConnectionStats()
	cpu0 := cpuTime()
	b.ResetTimer()
	for range b.N {
		exchange()
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
	ea, ec := la.conn.ConnectionStats(), lc.conn.ConnectionStats()
	b.ReportMetric(float64(ea.PacketsSent-sa.PacketsSent)/float64(b.N), "server-pkts/op")
	b.ReportMetric(float64(ec.PacketsSent-sc.PacketsSent)/float64(b.N), "client-pkts/op")
}
