package meshproxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/proxy"
	"github.com/nodeld/nodeld/internal/proxy/proxytest"
)

// BenchmarkMeshHop measures what a remote hop (consumer proxy -> mesh ->
// serving node -> upstream) adds to a direct request to the upstream:
// latency at concurrency 1 and 64 (p50, p99, and the added p50/p99),
// 1 MiB embedding throughput, and the largest gap an SSE stream's chunk
// spacing gains across the mesh. It fails if a request needed a new mesh
// handshake.
func BenchmarkMeshHop(b *testing.B) {
	const sseChunks, sseGap = 20, 5 * time.Millisecond
	var mu sync.Mutex // guards sent
	var sent []time.Time
	up := proxytest.New(b, proxytest.Options{Model: "served-model", Chunks: sseChunks, Hooks: proxytest.Hooks{
		BeforeChunk: func(ctx context.Context, i int) {
			if i > 0 {
				time.Sleep(sseGap) // the upstream's own pacing, the signal under test
			}
		},
		AfterChunk: func(ctx context.Context, i int) {
			mu.Lock()
			sent = append(sent, time.Now())
			mu.Unlock()
		},
	}})
	a, _ := pairNodes(b, up, Deps{MaxInflightPerPeer: 128, MaxInflightTotal: 128})
	meshURL := "http://" + mustAddr(b, a.h.p) + "/v1/embeddings"
	directURL := up.URL + "/v1/embeddings"
	client := a.h.client
	handshakes := func() float64 {
		v, _ := metricValueTB(b, a, "nodeld_mesh_handshakes_total", map[string]string{"result": "ok"})
		return v
	}
	before := handshakes()

	small := []byte(`{"input":"hello","model":"x"}`)
	for _, conc := range []int{1, 64} {
		b.Run(fmt.Sprintf("latency/c=%d", conc), func(b *testing.B) {
			direct := measure(b, client, directURL, small, conc, b.N)
			viaMesh := measure(b, client, meshURL, small, conc, b.N)
			p50d, p99d := percentile(direct, 50), percentile(direct, 99)
			p50m, p99m := percentile(viaMesh, 50), percentile(viaMesh, 99)
			b.ReportMetric(float64(p50d.Microseconds()), "direct-p50-µs")
			b.ReportMetric(float64(p99d.Microseconds()), "direct-p99-µs")
			b.ReportMetric(float64(p50m.Microseconds()), "mesh-p50-µs")
			b.ReportMetric(float64(p99m.Microseconds()), "mesh-p99-µs")
			b.ReportMetric(float64((p50m - p50d).Microseconds()), "added-p50-µs")
			b.ReportMetric(float64((p99m - p99d).Microseconds()), "added-p99-µs")
			b.ReportMetric(0, "ns/op")
		})
	}

	b.Run("throughput/1MiB", func(b *testing.B) {
		big := []byte(`{"input":"` + strings.Repeat("x", 1<<20) + `"}`)
		for _, tc := range []struct{ name, url string }{{"direct", directURL}, {"mesh", meshURL}} {
			start := time.Now()
			measure(b, client, tc.url, big, 1, b.N)
			mbps := float64(len(big)) * float64(b.N) / time.Since(start).Seconds() / 1e6
			b.ReportMetric(mbps, tc.name+"-MB/s")
		}
		b.ReportMetric(0, "ns/op")
	})

	b.Run("sse-gaps", func(b *testing.B) {
		var worst time.Duration
		var gaps []time.Duration
		for range b.N {
			mu.Lock()
			sent = sent[:0]
			mu.Unlock()
			recv := streamArrivals(b, client, "http://"+mustAddr(b, a.h.p)+"/v1/chat/completions")
			mu.Lock()
			s := append([]time.Time(nil), sent...)
			mu.Unlock()
			if len(s) != sseChunks || len(recv) < sseChunks {
				b.Fatalf("sent %d chunks, received %d events", len(s), len(recv))
			}
			for i := 1; i < sseChunks; i++ {
				added := recv[i].Sub(recv[i-1]) - s[i].Sub(s[i-1])
				worst = max(worst, added)
				gaps = append(gaps, added)
			}
		}
		b.ReportMetric(float64(worst.Microseconds()), "max-added-gap-µs")
		b.ReportMetric(float64(percentile(gaps, 99).Microseconds()), "p99-added-gap-µs")
		b.ReportMetric(0, "ns/op")
	})

	if after := handshakes(); after != before {
		b.Fatalf("mesh handshakes grew from %v to %v: requests must reuse the link", before, after)
	}
}

func mustAddr(tb testing.TB, p *proxy.Proxy) string {
	tb.Helper()
	addr, ok := p.Addr("chat")
	if !ok {
		tb.Fatal("no chat listener")
	}
	return addr.String()
}

// measure sends n POSTs of body to url from conc workers and returns each
// request's latency.
func measure(tb testing.TB, client *http.Client, url string, body []byte, conc, n int) []time.Duration {
	tb.Helper()
	lat := make([]time.Duration, n)
	next := make(chan int)
	errs := make(chan error, conc)
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for i := range next {
				start := time.Now()
				res, err := client.Post(url, "application/json", bytes.NewReader(body))
				if err == nil {
					_, err = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode != 200 {
						err = fmt.Errorf("status %d", res.StatusCode)
					}
				}
				if err != nil {
					errs <- err
					return
				}
				lat[i] = time.Since(start)
			}
		})
	}
	for i := range n {
		select {
		case next <- i:
		case err := <-errs:
			close(next)
			wg.Wait()
			tb.Fatal(err)
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		tb.Fatal(err)
	default:
	}
	return lat
}

func percentile(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// streamArrivals sends a streamed chat completion and returns when each
// SSE event arrived.
func streamArrivals(tb testing.TB, client *http.Client, url string) []time.Time {
	tb.Helper()
	res, err := client.Post(url, "application/json", strings.NewReader(chatBody(true)))
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	var at []time.Time
	br := bufio.NewReader(res.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return at
		}
		if line == "\n" {
			at = append(at, time.Now())
		}
	}
}

// metricValueTB reads a counter from n's registry.
func metricValueTB(tb testing.TB, n *meshNode, name string, labels map[string]string) (float64, bool) {
	tb.Helper()
	families, err := n.Registry.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if sameLabels(m.GetLabel(), labels) && m.Counter != nil {
				return m.Counter.GetValue(), true
			}
		}
	}
	return 0, false
}
