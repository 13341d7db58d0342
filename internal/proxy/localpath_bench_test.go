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

// localPathRequest is the request of `make bench-compare`
// (scripts/bench-chat.lua): a small chat completion naming the instance's
// model, so the pin check runs.
var localPathRequest = func() []byte {
	body := `{"model":"bench","messages":[{"role":"system","content":"You are a helpful assistant."},` +
		`{"role":"user","content":"Say hello."}],"max_tokens":16}`
	return []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}()

// localPathAnswer is the upstream's answer (test/benchtool upstream's).
var localPathAnswer = func() []byte {
	body := `{"id":"chatcmpl-bench","object":"chat.completion","created":1,"model":"bench",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help you today?"},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":12,"completion_tokens":9,"total_tokens":21}}`
	return []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nDate: Tue, 01 Dec 2026 20:00:00 GMT\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}()

// BenchmarkLocalPath measures the local path in process: raw HTTP/1.1
// keep-alive clients (no allocation of their own) send the benchmark's
// chat request through a role port to a raw upstream. allocs/op is what
// the proxy allocates per request.
//
//	go test -run '^$' -bench BenchmarkLocalPath -benchmem ./internal/proxy/
func BenchmarkLocalPath(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go httpfasttest.Serve(ln, localPathAnswer)
	res := newResolver()
	res.set("chat", table.Target{Kind: table.TargetLocal, Base: "http://" + ln.Addr().String(), Model: "bench"})
	p := runBenchProxy(b, Config{Roles: []RoleConfig{{Name: "chat", Listen: "127.0.0.1:0", Concurrency: 256}}}, res)
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
