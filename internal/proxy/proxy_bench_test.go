package proxy

import (
	"bufio"
	"context"
	"flag"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/activity"
	"github.com/nodeld/nodeld/internal/proxy/proxytest"
)

// sseChunks is the length of the benchmarked stream; ssePace is the gap
// the upstream leaves between its chunks, so each chunk is a separate
// event on the wire.
const (
	sseChunks = 200
	ssePace   = 200 * time.Microsecond
)

// benchEnv is a running proxy in front of two upstreams, with one client
// for direct requests and one for proxied requests.
type benchEnv struct {
	chatDirect, chatProxy     string
	streamDirect, streamProxy string
	direct, proxied           *http.Client

	mu   sync.Mutex // guards sent
	sent [sseChunks]time.Time
}

// BenchmarkProxy compares requests sent directly to an upstream with the
// same requests sent through the proxy, side by side, and reports the
// added latency (microseconds), the throughput ratio and, for an SSE
// stream, time to first chunk and per-chunk delay.
//
//	go test -run '^$' -bench BenchmarkProxy -benchtime 3s ./internal/proxy/
func BenchmarkProxy(b *testing.B) {
	env := &benchEnv{}
	chatUp := proxytest.New(b, proxytest.Options{})
	streamUp := proxytest.New(b, proxytest.Options{Chunks: sseChunks, Hooks: proxytest.Hooks{
		BeforeChunk: func(_ context.Context, i int) {
			time.Sleep(ssePace) // the upstream's pace, part of the workload
			env.mu.Lock()
			env.sent[i] = time.Now()
			env.mu.Unlock()
		},
	}})
	res := newResolver()
	res.local("chat", chatUp.URL)
	res.local("stream", streamUp.URL)
	p := runBenchProxy(b, Config{Roles: []RoleConfig{
		{Name: "chat", Listen: "127.0.0.1:0", Concurrency: 256},
		{Name: "stream", Listen: "127.0.0.1:0"},
	}}, res)
	chatAddr, _ := p.Addr("chat")
	streamAddr, _ := p.Addr("stream")
	env.chatDirect, env.chatProxy = chatUp.URL, "http://"+chatAddr.String()
	env.streamDirect, env.streamProxy = streamUp.URL, "http://"+streamAddr.String()
	newClient := func() (*http.Client, *http.Transport) {
		tr := &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}
		return &http.Client{Transport: tr}, tr
	}
	var dtr, ptr *http.Transport
	env.direct, dtr = newClient()
	env.proxied, ptr = newClient()
	defer dtr.CloseIdleConnections()
	defer ptr.CloseIdleConnections()

	b.Run("chat-c1", func(b *testing.B) { env.benchChat(b, 1) })
	b.Run("chat-c64", func(b *testing.B) { env.benchChat(b, 64) })
	b.Run("sse-200", env.benchSSE)
}

// chat sends one small chat completion and returns its latency.
func (e *benchEnv) chat(b *testing.B, c *http.Client, base string) time.Duration {
	start := time.Now()
	res, err := c.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(chatBody(false)))
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		b.Fatalf("status %d", res.StatusCode)
	}
	return time.Since(start)
}

// run sends n requests with conc workers and returns their latencies and
// the wall time.
func (e *benchEnv) run(b *testing.B, c *http.Client, base string, n, conc int) ([]time.Duration, time.Duration) {
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range conc {
		wg.Go(func() {
			for i := w; i < n; i += conc {
				lat[i] = e.chat(b, c, base)
			}
		})
	}
	wg.Wait()
	return lat, time.Since(start)
}

func (e *benchEnv) benchChat(b *testing.B, conc int) {
	// Warm both paths so connection setup is not measured.
	e.run(b, e.direct, e.chatDirect, 2*conc, conc)
	e.run(b, e.proxied, e.chatProxy, 2*conc, conc)
	n := max(b.N, conc)
	b.ResetTimer()
	var direct, proxied []time.Duration
	var directWall, proxiedWall, directCPU, proxiedCPU time.Duration
	// Alternate rounds so drift (GC, CPU frequency, neighbours) hits both
	// sides alike.
	const rounds = 4
	for range rounds {
		c0 := cpuTime(b)
		d, dw := e.run(b, e.direct, e.chatDirect, max(n/rounds, conc), conc)
		c1 := cpuTime(b)
		p, pw := e.run(b, e.proxied, e.chatProxy, max(n/rounds, conc), conc)
		c2 := cpuTime(b)
		direct, proxied = append(direct, d...), append(proxied, p...)
		directWall, proxiedWall = directWall+dw, proxiedWall+pw
		directCPU, proxiedCPU = directCPU+c1-c0, proxiedCPU+c2-c1
	}
	b.StopTimer()
	// CPU per request of the whole process (client, proxy and upstream):
	// the difference is what the proxy costs, whatever the neighbours do.
	b.ReportMetric(us(directCPU)/float64(len(direct)), "direct-cpu-us/req")
	b.ReportMetric(us(proxiedCPU)/float64(len(proxied)), "proxy-cpu-us/req")
	b.ReportMetric(us(pct(proxied, 50)-pct(direct, 50)), "added-p50-us")
	b.ReportMetric(us(pct(proxied, 99)-pct(direct, 99)), "added-p99-us")
	b.ReportMetric(us(pct(direct, 50)), "direct-p50-us")
	b.ReportMetric(us(pct(proxied, 50)), "proxy-p50-us")
	if conc > 1 {
		b.ReportMetric(directWall.Seconds()/proxiedWall.Seconds(), "throughput-ratio")
	}
}

// stream reads one 200-chunk SSE stream and returns the time to the first
// chunk and each chunk's delay from the upstream writing it to the client
// reading it.
func (e *benchEnv) stream(b *testing.B, base string, c *http.Client) (time.Duration, []time.Duration) {
	start := time.Now()
	res, err := c.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(chatBody(true)))
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	br := bufio.NewReaderSize(res.Body, 64<<10)
	var recv [sseChunks]time.Time
	for i := range sseChunks {
		if _, err := readEvent(br); err != nil {
			b.Fatalf("chunk %d: %v", i, err)
		}
		recv[i] = time.Now()
	}
	_, _ = io.Copy(io.Discard, br)
	e.mu.Lock()
	defer e.mu.Unlock()
	delays := make([]time.Duration, sseChunks)
	for i := range delays {
		delays[i] = recv[i].Sub(e.sent[i])
	}
	return recv[0].Sub(start), delays
}

func (e *benchEnv) benchSSE(b *testing.B) {
	e.stream(b, e.streamDirect, e.direct)
	e.stream(b, e.streamProxy, e.proxied)
	b.ResetTimer()
	var dFirst, pFirst, dDelay, pDelay []time.Duration
	for range b.N {
		f, d := e.stream(b, e.streamDirect, e.direct)
		dFirst, dDelay = append(dFirst, f), append(dDelay, d...)
		f, d = e.stream(b, e.streamProxy, e.proxied)
		pFirst, pDelay = append(pFirst, f), append(pDelay, d...)
	}
	b.StopTimer()
	b.ReportMetric(us(pct(dFirst, 50)), "direct-first-chunk-us")
	b.ReportMetric(us(pct(pFirst, 50)), "proxy-first-chunk-us")
	b.ReportMetric(us(pct(dDelay, 50)), "direct-chunk-delay-p50-us")
	b.ReportMetric(us(pct(pDelay, 50)), "proxy-chunk-delay-p50-us")
	b.ReportMetric(us(pct(pDelay, 99)-pct(dDelay, 99)), "added-chunk-delay-p99-us")
	b.ReportMetric(us(pct(pDelay, 100)-pct(dDelay, 50)), "max-added-chunk-delay-us")
}

// cpuTime returns the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pct returns the q-th percentile (0..100) of ds.
func pct(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s)-1) * q / 100)
	return s[i]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// runBenchProxy starts a proxy of cfg on res for a benchmark and returns it
// once it is ready; it stops when the benchmark ends.
// benchActivity gives the benchmarks' proxies an activity log, as nodeld
// gives its own (the fleet page's recent requests).
var benchActivity = flag.Bool("bench-activity", false, "benchmarks: keep an activity log, as nodeld does")

func runBenchProxy(b *testing.B, cfg Config, res Resolver) *Proxy {
	b.Helper()
	deps := Deps{Resolver: res, Logger: zap.NewNop(), Registerer: prometheus.NewRegistry()}
	if *benchActivity {
		deps.Activity = activity.New(0, nil)
	}
	p, err := New(cfg, deps)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("Run: %v", err)
		}
	})
	<-p.Ready()
	return p
}
