package mux

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// The exchange of BenchmarkPingPong: a request and its answer, of the
// sizes of a small inference call's framing.
const (
	benchRequest = 150
	benchAnswer  = 400
	benchClients = 64
)

// BenchmarkPingPong compares exchanges over loopback TLS 1.3: "mux" runs
// them as streams over 2 sessions (a stream per exchange, End after it),
// "conn" on a connection per client in lockstep. c is the number of
// clients at once. cpu-ns/op is the process's CPU (both ends, user and
// system) per exchange: the figure the mux is for.
func BenchmarkPingPong(b *testing.B) {
	cfg := testTLSConfig(b)
	for _, mode := range []string{"mux", "conn"} {
		for _, c := range []int{1, benchClients} {
			b.Run(fmt.Sprintf("%s/c=%d", mode, c), func(b *testing.B) {
				var exchange func(i int) error
				if mode == "mux" {
					exchange = benchMux(b, cfg, c)
				} else {
					exchange = benchConns(b, cfg, c)
				}
				runClients(b, c, exchange)
			})
		}
	}
}

// runClients runs b.N exchanges from c goroutines and reports the CPU
// they cost.
func runClients(b *testing.B, c int, exchange func(client int) error) {
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	errs := make(chan error, c)
	b.ResetTimer()
	before := cpuTime(b)
	for i := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				if err := exchange(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	cpu := cpuTime(b) - before
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
}

// cpuTime returns the process's user and system CPU time so far, in ns.
func cpuTime(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// benchMux starts 2 sessions whose server answers every stream, and
// returns client i's exchange on session i%2.
func benchMux(b *testing.B, cfg *tls.Config, n int) func(int) error {
	var clients [2]*Session
	for k := range clients {
		c, s := tlsPair(b, cfg)
		client, server := sessionPair(b, c, s, Config{})
		clients[k] = client
		g := newGroup(b, client, server)
		serveWorkers(g, server, func(st *Stream, buf []byte) {
			if _, err := io.ReadFull(st, buf[:benchRequest]); err != nil {
				st.Close()
				return
			}
			st.Write(buf[:benchAnswer])
			st.End()
		})
	}
	bufs := clientBuffers(n)
	return func(i int) error {
		buf := bufs[i]
		st, err := clients[i%2].Open()
		if err != nil {
			return err
		}
		if _, err := st.Write(buf[:benchRequest]); err != nil {
			return err
		}
		if _, err := io.ReadFull(st, buf); err != nil {
			return err
		}
		st.End()
		return nil
	}
}

// benchConns starts n TLS connections, each answered in lockstep by its
// own server goroutine, and returns client i's exchange on connection i.
func benchConns(b *testing.B, cfg *tls.Config, n int) func(int) error {
	g := newGroup(b)
	conns := make([]net.Conn, n)
	for i := range conns {
		c, s := tlsPair(b, cfg)
		conns[i] = c
		g.Go(func() {
			buf := make([]byte, benchAnswer)
			for {
				if _, err := io.ReadFull(s, buf[:benchRequest]); err != nil {
					return
				}
				if _, err := s.Write(buf); err != nil {
					return
				}
			}
		})
	}
	b.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	bufs := clientBuffers(n)
	return func(i int) error {
		buf := bufs[i]
		if _, err := conns[i].Write(buf[:benchRequest]); err != nil {
			return err
		}
		_, err := io.ReadFull(conns[i], buf)
		return err
	}
}

// clientBuffers returns an answer-sized buffer per client.
func clientBuffers(n int) [][]byte {
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, benchAnswer)
	}
	return bufs
}

// serveWorkers serves server's streams with handle the way a session is
// meant to be served: by goroutines that each loop Accept, then handle,
// and a new one started only when none is left waiting in Accept. The
// goroutine that reads a new stream off the connection (holding the read
// token in Accept) is then the one that handles it: at one exchange in
// flight no goroutine is woken or started per exchange.
var spawn = os.Getenv("MUXSPAWN") != ""

func serveWorkers(g *group, server *Session, handle func(st *Stream, buf []byte)) {
	var idle atomic.Int64
	var worker func()
	worker = func() {
		buf := make([]byte, benchAnswer)
		for {
			idle.Add(1)
			st, err := server.Accept()
			if idle.Add(-1) == 0 && err == nil && spawn {
				g.Go(worker)
			}
			if err != nil {
				return
			}
			handle(st, buf)
		}
	}
	g.Go(worker)
}
