package mesh

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math/big"
	"net"
	"testing"
	"time"
)

// The benchmarks in this file measure what a transport change for
// inference streams (issue 26: mutually authenticated TLS 1.3 over TCP
// between the same node identities, QUIC kept for control) would give,
// before anything of it is built: the same exchanges as
// BenchmarkMeshExchange and BenchmarkQUICLoopbackBody, over one TLS 1.3
// connection on loopback, both ends presenting an Ed25519 certificate and
// pinning the other's key, kept open across operations (a pool of one).

// tlsPair returns the two ends of a mutually authenticated TLS 1.3
// connection over TCP on loopback, each end pinning the other's Ed25519
// key, handshake done.
func tlsPair(b *testing.B) (client, server *tls.Conn) {
	b.Helper()
	cc, ck := benchCert(b)
	sc, sk := benchCert(b)
	pin := func(want ed25519.PublicKey) func([][]byte, [][]*x509.Certificate) error {
		return func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) != 1 {
				return errors.New("want one certificate")
			}
			c, err := x509.ParseCertificate(raw[0])
			if err != nil {
				return err
			}
			if k, ok := c.PublicKey.(ed25519.PublicKey); !ok || !k.Equal(want) {
				return errors.New("key not pinned")
			}
			return nil
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan *tls.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		tc := tls.Server(c, &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{sc},
			ClientAuth: tls.RequireAnyClientCert, VerifyPeerCertificate: pin(ck)})
		if err := tc.Handshake(); err != nil {
			_ = c.Close()
			accepted <- nil
			return
		}
		accepted <- tc
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	client = tls.Client(c, &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cc},
		InsecureSkipVerify: true, VerifyPeerCertificate: pin(sk)}) // the pin is the verification
	if err := client.Handshake(); err != nil {
		b.Fatal(err)
	}
	if server = <-accepted; server == nil {
		b.Fatal("server handshake failed")
	}
	b.Cleanup(func() {
		_ = client.Close()
		_ = server.Close()
	})
	return client, server
}

func benchCert(b *testing.B) (tls.Certificate, ed25519.PublicKey) {
	b.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		b.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pub
}

// BenchmarkTLSExchange is BenchmarkMeshExchange over a pooled TLS 1.3
// connection: the opener writes a 200-byte request frame and an end frame
// in one write, the server reads them and answers a 300-byte frame and an
// end frame in one write, the opener reads the answer to its end. Two
// goroutines, one read and one write each per exchange.
func BenchmarkTLSExchange(b *testing.B) {
	client, server := tlsPair(b)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var buf [1 << 10]byte
		answer := AppendFrameHeader(append(AppendFrameHeader(nil, 1, 300), make([]byte, 300)...), 2, 0)
		for {
			if _, _, err := ReadFrameInto(server, buf[:]); err != nil {
				return
			}
			if _, _, err := ReadFrameInto(server, buf[:]); err != nil {
				return
			}
			if _, err := server.Write(answer); err != nil {
				return
			}
		}
	}()
	req := AppendFrameHeader(append(AppendFrameHeader(nil, 1, 200), make([]byte, 200)...), 2, 0)
	var buf [1 << 10]byte
	exchange := func() {
		if _, err := client.Write(req); err != nil {
			b.Fatal(err)
		}
		if _, _, err := ReadFrameInto(client, buf[:]); err != nil {
			b.Fatal(err)
		}
		if _, _, err := ReadFrameInto(client, buf[:]); err != nil {
			b.Fatal(err)
		}
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
	_ = client.Close()
	<-done
}

// BenchmarkTLSLoopbackBody is BenchmarkQUICLoopbackBody over a pooled TLS
// 1.3 connection: a 1 MiB body in 64 KiB frames and an end frame, the
// server reading it to the end frame and answering one byte.
func BenchmarkTLSLoopbackBody(b *testing.B) {
	const size = 1 << 20
	client, server := tlsPair(b)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			t, _, err := ReadFrameInto(server, buf)
			if err != nil {
				return
			}
			if t == 2 {
				if _, err := server.Write([]byte{1}); err != nil {
					return
				}
			}
		}
	}()
	body := make([]byte, size)
	frame := make([]byte, 0, FrameHeaderSize+64<<10)
	var one [1]byte
	b.SetBytes(size)
	cpu0 := cpuTime()
	b.ResetTimer()
	for range b.N {
		for off := 0; off < size; off += 64 << 10 {
			chunk := body[off:min(off+64<<10, size)]
			frame = append(AppendFrameHeader(frame[:0], 1, len(chunk)), chunk...)
			if _, err := client.Write(frame); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := client.Write(AppendFrameHeader(frame[:0], 2, 0)); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(client, one[:]); err != nil || !bytes.Equal(one[:], []byte{1}) {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
	_ = client.Close()
	<-done
}
