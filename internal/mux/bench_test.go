package mux

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
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
// "conn" on a connection per client in lockstep; "mux-pool" is "mux"
// served by a pool of goroutines (serveWorkers). c is the number of
// clients at once. cpu-ns/op is the process's CPU (both ends, user and
// system) per exchange: the figure the mux is for.
func BenchmarkPingPong(b *testing.B) {
	cfg := testTLSConfig(b)
	for _, mode := range []string{"mux", "mux-pool", "conn"} {
		for _, c := range []int{1, benchClients} {
			b.Run(fmt.Sprintf("%s/c=%d", mode, c), func(b *testing.B) {
				var exchange func(i int) error
				switch mode {
				case "mux", "mux-pool":
					exchange = benchMux(b, cfg, c, mode == "mux-pool")
				default:
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
func benchMux(b *testing.B, cfg *tls.Config, n int, pool bool) func(int) error {
	var clients [2]*Session
	for k := range clients {
		c, s := tlsPair(b, cfg)
		client, server := sessionPair(b, c, s, Config{})
		clients[k] = client
		g := newGroup(b, client, server)
		serveWorkers(g, server, pool, func(st *Stream, buf []byte) {
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

// serveWorkers serves server's streams with handle. Without pool, one
// goroutine loops Accept, then handle: as the conn side serves each
// connection, and enough for a handler that never blocks; the goroutine
// that read the stream off the connection (holding the read token in
// Accept) handles it, so at c=1 no goroutine is woken per exchange. With
// pool, a goroutine that accepts starts another when none is left waiting
// in Accept (a handler may block): at c=1 two then take turns with the
// read token, one wake-up per exchange (see the package's open problems
// in its benchmark figures).
func serveWorkers(g *group, server *Session, pool bool, handle func(st *Stream, buf []byte)) {
	var idle atomic.Int64
	var worker func()
	worker = func() {
		buf := make([]byte, benchAnswer)
		for {
			idle.Add(1)
			st, err := server.Accept()
			if idle.Add(-1) == 0 && err == nil && pool {
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
