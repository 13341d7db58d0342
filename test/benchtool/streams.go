package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxStreams bounds the streams one round may hold.
const maxStreams = 5000

// sample is what the measured process reports on its /metrics.
type sample struct {
	rss        float64 // bytes
	heap       float64 // bytes of Go heap in use
	goroutines float64
	// idle and released are the Go heap's idle bytes and, of those, the
	// ones returned to the OS (go_memstats_heap_idle_bytes and
	// _released_bytes); 0 when not exported.
	idle, released float64
	// stack is go_memstats_stack_inuse_bytes (goroutine stacks, outside
	// the heap); 0 when not exported.
	stack float64
	// goal is go_memstats_next_gc_bytes, the heap size at which the next
	// collection starts; the runtime keeps up to about 10% above it before
	// returning idle heap to the OS. 0 when not exported.
	goal float64
	// probes are nodeld_runtime_probes_total by their labels
	// (`result="up",role="chat"`), and down counts the adopted instances
	// whose nodeld_runtime_instance_up is 0; empty and 0 on a node
	// without adopted instances.
	probes map[string]float64
	down   int
}

// runStreams holds n streams at once through url, rounds times, and prints
// the measured process's resident memory and goroutines idle before each
// round, at its peak during the round, and settle after its streams ended.
func runStreams(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("streams", flag.ContinueOnError)
	url := fs.String("url", "", "base URL of the role port (http://127.0.0.1:PORT)")
	metrics := fs.String("metrics", "", "Prometheus /metrics URL of the process measured")
	n := fs.Int("n", 1000, "streams held at once")
	rounds := fs.Int("rounds", 5, "rounds in a row")
	chunks := fs.Int("chunks", 60, "chunks per stream (max_tokens); the upstream's -pace sets their spacing")
	settle := fs.Duration("settle", 10*time.Second, "wait after a round's streams ended before sampling")
	gcURL := fs.String("gc", "", "optional URL to GET before the idle and after samples, e.g. /debug/pprof/heap?gc=1, so the heap figures hold live memory only")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !strings.HasPrefix(*url, "http://127.0.0.1:") || !strings.HasPrefix(*metrics, "http://127.0.0.1:") ||
		(*gcURL != "" && !strings.HasPrefix(*gcURL, "http://127.0.0.1:")) {
		return errors.New("streams: -url, -metrics and -gc must be http://127.0.0.1:PORT URLs")
	}
	if *n < 1 || *n > maxStreams || *rounds < 1 || *chunks < 1 {
		return fmt.Errorf("streams: -n must be in 1..%d, -rounds and -chunks positive", maxStreams)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: *n, DisableCompression: true}
	client := &http.Client{Transport: tr}
	mclient := &http.Client{Timeout: 5 * time.Second}
	body := fmt.Sprintf(`{"model":"bench","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"Count slowly."}]}`, *chunks)

	fmt.Fprintf(out, "| round | streams ok / failed | most open at once | RSS idle / peak / after | Go heap in use idle / peak / after | goroutines idle / peak / after |\n")
	fmt.Fprintln(out, "|---|---|---|---|---|---|")
	collect := func() error {
		if *gcURL == "" {
			return nil
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, *gcURL, nil)
		if err != nil {
			return err
		}
		res, err := mclient.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", *gcURL, res.Status)
		}
		return nil
	}
	for round := 1; round <= *rounds; round++ {
		if err := collect(); err != nil {
			return err
		}
		idle, err := scrape(ctx, mclient, *metrics)
		if err != nil {
			return err
		}
		var open, most, failed atomic.Int64
		var wg sync.WaitGroup
		for range *n {
			wg.Go(func() {
				if err := holdStream(ctx, client, *url, body, *chunks, &open, &most); err != nil {
					failed.Add(1)
				}
			})
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		peak := idle
		tick := time.NewTicker(time.Second)
	wait:
		for {
			select {
			case <-done:
				break wait
			case <-tick.C:
				if s, err := scrape(ctx, mclient, *metrics); err == nil {
					peak.rss, peak.goroutines = max(peak.rss, s.rss), max(peak.goroutines, s.goroutines)
					peak.heap = max(peak.heap, s.heap)
				}
			}
		}
		tick.Stop()
		// The client's own idle connections are closed, as an application
		// that is done would; what stays open upstream is the proxy's pool.
		tr.CloseIdleConnections()
		select {
		case <-time.After(*settle):
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := collect(); err != nil {
			return err
		}
		after, err := scrape(ctx, mclient, *metrics)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "| %d | %d / %d | %d | %.0f / %.0f / %.0f MB | %.0f / %.0f / %.0f MB | %.0f / %.0f / %.0f |\n", round,
			int64(*n)-failed.Load(), failed.Load(), most.Load(), idle.rss/1e6, peak.rss/1e6, after.rss/1e6,
			idle.heap/1e6, peak.heap/1e6, after.heap/1e6, idle.goroutines, peak.goroutines, after.goroutines)
	}
	return nil
}

// holdStream reads one streamed completion to its end, counting it open
// from its first chunk to its last.
func holdStream(ctx context.Context, client *http.Client, url, body string, chunks int, open, most *atomic.Int64) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(chunks)*time.Second+streamTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		// The error's code, when the body names one ("no_instance"):
		// which refusal it was.
		b, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
		var e struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error.Code != "" {
			return fmt.Errorf("status %d %s", res.StatusCode, e.Error.Code)
		}
		return fmt.Errorf("status %d", res.StatusCode)
	}
	br := bufio.NewReader(res.Body)
	got, counted := 0, false
	defer func() {
		if counted {
			open.Add(-1)
		}
	}()
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return err
		}
		if !strings.Contains(string(line), `"sent_ns":`) {
			continue
		}
		got++
		if !counted {
			counted = true
			now := open.Add(1)
			for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
			}
		}
	}
	if got != chunks {
		return fmt.Errorf("got %d chunks, want %d", got, chunks)
	}
	return nil
}

// scrape reads the resident memory and goroutine count from a Prometheus
// text exposition.
func scrape(ctx context.Context, client *http.Client, url string) (sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return sample{}, err
	}
	res, err := client.Do(req)
	if err != nil {
		return sample{}, err
	}
	defer res.Body.Close()
	var s sample
	found := 0
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		if labels, ok := strings.CutPrefix(name, "nodeld_runtime_probes_total{"); ok {
			if v, err := strconv.ParseFloat(val, 64); err == nil {
				if s.probes == nil {
					s.probes = map[string]float64{}
				}
				s.probes[strings.TrimSuffix(labels, "}")] = v
			}
			continue
		}
		if strings.HasPrefix(name, "nodeld_runtime_instance_up{") {
			if v, err := strconv.ParseFloat(val, 64); err == nil && v == 0 {
				s.down++
			}
			continue
		}
		switch name {
		case "go_memstats_heap_idle_bytes":
			s.idle, _ = strconv.ParseFloat(val, 64)
			continue
		case "go_memstats_heap_released_bytes":
			s.released, _ = strconv.ParseFloat(val, 64)
			continue
		case "go_memstats_stack_inuse_bytes":
			s.stack, _ = strconv.ParseFloat(val, 64)
			continue
		case "go_memstats_next_gc_bytes":
			s.goal, _ = strconv.ParseFloat(val, 64)
			continue
		case "process_resident_memory_bytes":
			s.rss, err = strconv.ParseFloat(val, 64)
		case "go_goroutines":
			s.goroutines, err = strconv.ParseFloat(val, 64)
		case "go_memstats_heap_inuse_bytes":
			s.heap, err = strconv.ParseFloat(val, 64)
		default:
			continue
		}
		if err != nil {
			return sample{}, fmt.Errorf("metrics %s: %w", name, err)
		}
		found++
	}
	if found != 3 {
		return sample{}, fmt.Errorf("metrics at %s lack process_resident_memory_bytes, go_memstats_heap_inuse_bytes or go_goroutines", url)
	}
	return s, sc.Err()
}
