package proxy

import (
	"bufio"
	"io"
	"net"
	"runtime"
	"strconv"
	"testing"

	"github.com/nodeld/nodeld/internal/httpfast/httpfasttest"
	"github.com/nodeld/nodeld/internal/table"
)

// BenchmarkLocalPathHeld is BenchmarkLocalPath through a real table: every
// request takes and gives back a hold of the role's local registration
// (ResolveHeld, Hold.Done), which counts its activity (in flight, last
// request), as a placed instance's requests do.
//
//	go test -run '^$' -bench BenchmarkLocalPathHeld -benchmem ./internal/proxy/
func BenchmarkLocalPathHeld(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go httpfasttest.Serve(ln, localPathAnswer)
	tb := table.New("n-0000000000000001", table.Options{})
	slot, err := tb.RegisterLocal(table.OriginPlaced, "chat", "http://"+ln.Addr().String(), "bench", "openai", "llama.cpp")
	if err != nil {
		b.Fatal(err)
	}
	defer slot.Release()
	p := runBenchProxy(b, Config{Roles: []RoleConfig{{Name: "chat", Listen: "127.0.0.1:0", Concurrency: 256}}}, tb)
	addr, _ := p.Addr("chat")
	for _, conc := range []int{1, 16} {
		b.Run("c"+strconv.Itoa(conc), func(b *testing.B) {
			conns := make(chan net.Conn, conc)
			for range conc {
				c, err := net.Dial("tcp", addr.String())
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				conns <- c
			}
			one := func(c net.Conn, br *bufio.Reader) error {
				if _, err := c.Write(localPathRequest); err != nil {
					return err
				}
				n, err := httpfasttest.ReadHead(br)
				if err != nil {
					return err
				}
				_, err = br.Discard(n)
				return err
			}
			b.ReportAllocs()
			b.ResetTimer()
			if conc == 1 {
				c := <-conns
				br := bufio.NewReaderSize(c, 8<<10)
				for b.Loop() {
					if err := one(c, br); err != nil {
						b.Fatal(err)
					}
				}
				return
			}
			b.SetParallelism((conc + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			b.RunParallel(func(pb *testing.PB) {
				c := <-conns
				br := bufio.NewReaderSize(c, 8<<10)
				for pb.Next() {
					if err := one(c, br); err != nil && err != io.EOF {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
