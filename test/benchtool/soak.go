package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// namedFlag is a repeatable NAME=VALUE flag, kept in order.
type namedFlag struct {
	names, values []string
}

func (f *namedFlag) String() string { return strings.Join(f.names, ",") }

func (f *namedFlag) Set(v string) error {
	name, val, ok := strings.Cut(v, "=")
	if !ok || name == "" || val == "" || slices.Contains(f.names, name) {
		return fmt.Errorf("%q: want a new NAME=VALUE", v)
	}
	f.names, f.values = append(f.names, name), append(f.values, val)
	return nil
}

// soakTarget is one role port held at -n streams.
type soakTarget struct {
	name, url  string
	ok, failed atomic.Int64
	open, most atomic.Int64
	mu         sync.Mutex
	errs       map[string]int
}

func (t *soakTarget) fail(err error) {
	t.failed.Add(1)
	msg := err.Error()
	if len(msg) > 160 {
		msg = msg[:160]
	}
	t.mu.Lock()
	t.errs[msg]++
	t.mu.Unlock()
}

// series is one measured quantity over time.
type series struct {
	name, unit string
	scale      float64 // printed value = raw / scale
	t, v       []float64
	// shown series are printed but not judged: the Go heap's parts, which
	// explain RSS but move with the collector's pace.
	shown bool
}

// probeTally is what one measured node's adopted-instance metrics said
// during the run: its probes by result (counter values at the first and
// the last sample) and the samples that found an adopted instance down.
type probeTally struct {
	first, last   map[string]float64
	samples, down int
}

func (s *series) add(at time.Duration, v float64) {
	s.t, s.v = append(s.t, at.Seconds()), append(s.v, v)
}

// runSoak holds -n SSE streams open through each -target for -duration:
// each stream reads -chunks chunks to its end and is replaced at once by
// a new one, the first ones staggered over one stream's length so that
// they do not end together. Every -sample it reads RSS, the Go heap (in
// use, idle and not released, released to the OS, the next collection's
// goal), goroutine stacks (what
// RSS holds besides live objects) and goroutines from each -metrics URL, its adopted
// instances' probes by result, and the size of each -chain file.
// It prints the streams ok and failed per target, and for each series
// its slope over the last half of the run, the noise about that line and
// the rise the slope makes over the last half; and each chain's growth in
// bytes per minute, and each node's probes during the run by result
// (shown, not judged). With -gc it also reads each such process's live heap
// right after two collections (the second frees what sync.Pools kept over
// the first), every -gc-every. It fails on any failed
// stream, on an RSS, goroutine or live heap series whose rise exceeds
// twice its noise (a live heap sampled fewer than three times in the last
// half is shown, not judged), and on a chain that grows faster in the
// last half than in the first (beyond -chain-slack).
func runSoak(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	var targets, metrics, chains namedFlag
	fs.Var(&targets, "target", "NAME=URL of a role port to hold -n streams through (repeatable)")
	fs.Var(&metrics, "metrics", "NAME=URL of a Prometheus /metrics of a process measured (repeatable)")
	fs.Var(&chains, "chain", "NAME=PATH of a chain file whose growth is measured (repeatable)")
	var gcs namedFlag
	fs.Var(&gcs, "gc", "NAME=URL to GET (e.g. /debug/pprof/heap?gc=1) every -gc-every before reading NAME's -metrics: its heap then is the live heap (repeatable)")
	gcEvery := fs.Duration("gc-every", time.Minute, "time between the collections of -gc")
	n := fs.Int("n", 1000, "streams held at once through each target")
	chunks := fs.Int("chunks", 30, "chunks per stream (max_tokens); the upstream's -pace sets their spacing")
	pace := fs.Duration("pace", time.Second, "the upstream's -pace, to stagger the first streams over one stream's length")
	duration := fs.Duration("duration", 10*time.Minute, "how long new streams are started; running ones then end")
	every := fs.Duration("sample", 5*time.Second, "time between samples")
	chainSlack := fs.Float64("chain-slack", 4096, "bytes per minute a chain may grow faster in the last half than in the first")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(targets.names) == 0 || len(metrics.names) == 0 {
		return errors.New("soak: at least one -target and one -metrics")
	}
	for _, name := range gcs.names {
		if !slices.Contains(metrics.names, name) {
			return fmt.Errorf("soak: -gc %s names no -metrics", name)
		}
	}
	if *gcEvery < *every {
		return errors.New("soak: -gc-every must be at least -sample")
	}
	for _, u := range append(append(slices.Clone(targets.values), metrics.values...), gcs.values...) {
		if !strings.HasPrefix(u, "http://127.") {
			return fmt.Errorf("soak: %q is not a loopback http URL", u)
		}
	}
	if *n < 1 || *n > maxStreams || *chunks < 1 || *pace <= 0 || *duration < 2**every || *every <= 0 {
		return fmt.Errorf("soak: -n must be in 1..%d, -chunks, -pace and -sample positive, -duration at least two samples", maxStreams)
	}

	tr := &http.Transport{MaxIdleConnsPerHost: *n * len(targets.names), DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	mclient := &http.Client{Timeout: 5 * time.Second}
	body := fmt.Sprintf(`{"model":"bench","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"Count slowly."}]}`, *chunks)
	streamLen := time.Duration(*chunks) * *pace

	var ts []*soakTarget
	for i, name := range targets.names {
		ts = append(ts, &soakTarget{name: name, url: targets.values[i], errs: map[string]int{}})
	}
	start := time.Now()
	stopAt := start.Add(*duration)
	var wg sync.WaitGroup
	for _, t := range ts {
		for i := range *n {
			delay := time.Duration(int64(streamLen) * int64(i) / int64(*n))
			wg.Go(func() {
				select {
				case <-time.After(delay):
				case <-ctx.Done():
					return
				}
				for ctx.Err() == nil && time.Now().Before(stopAt) {
					if err := holdStream(ctx, client, t.url, body, *chunks, &t.open, &t.most); err != nil {
						if ctx.Err() != nil {
							return
						}
						t.fail(err)
						continue
					}
					t.ok.Add(1)
				}
			})
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	var all []*series
	mem := map[string][7]*series{}
	live := map[string]*series{}
	tallies := map[string]*probeTally{}
	for _, name := range metrics.names {
		s := [7]*series{
			{name: name + " RSS", unit: "MB", scale: 1e6},
			{name: name + " Go heap in use", unit: "MB", scale: 1e6, shown: true},
			{name: name + " Go heap idle, not released", unit: "MB", scale: 1e6, shown: true},
			{name: name + " Go heap released to the OS", unit: "MB", scale: 1e6, shown: true},
			{name: name + " Go heap goal (next GC)", unit: "MB", scale: 1e6, shown: true},
			{name: name + " goroutine stacks", unit: "MB", scale: 1e6, shown: true},
			{name: name + " goroutines", unit: "", scale: 1},
		}
		mem[name] = s
		tallies[name] = &probeTally{}
		all = append(all, s[:]...)
		if slices.Contains(gcs.names, name) {
			live[name] = &series{name: name + " live heap (after a collection)", unit: "MB", scale: 1e6}
			all = append(all, live[name])
		}
	}
	var lastGC time.Time
	chainS := map[string]*series{}
	for _, name := range chains.names {
		chainS[name] = &series{name: name + " chain", unit: "bytes", scale: 1}
	}
	openS := map[string]*series{}
	for _, t := range ts {
		openS[t.name] = &series{name: t.name + " streams open", scale: 1}
	}
	sampleOnce := func() {
		at := time.Since(start)
		if time.Since(lastGC) >= *gcEvery {
			lastGC = time.Now()
			for i, name := range gcs.names {
				// Twice: what sync.Pools hold survives one collection
				// (their victim caches) and goes at the second, so the
				// heap read after it is what the program still uses, not
				// how many idle buffers a pool held at that moment.
				if err := getOK(ctx, mclient, gcs.values[i]); err != nil {
					continue
				}
				if err := getOK(ctx, mclient, gcs.values[i]); err != nil {
					continue
				}
				if s, err := scrape(ctx, mclient, metrics.values[slices.Index(metrics.names, name)]); err == nil {
					live[name].add(at, s.heap)
				}
			}
		}
		for i, name := range metrics.names {
			if s, err := scrape(ctx, mclient, metrics.values[i]); err == nil {
				m := mem[name]
				m[0].add(at, s.rss)
				m[1].add(at, s.heap)
				m[2].add(at, s.idle-s.released)
				m[3].add(at, s.released)
				m[4].add(at, s.goal)
				m[5].add(at, s.stack)
				m[6].add(at, s.goroutines)
				pt := tallies[name]
				if pt.samples == 0 {
					pt.first = s.probes
				}
				pt.samples++
				pt.last = s.probes
				if s.down > 0 {
					pt.down++
				}
			}
		}
		for i, name := range chains.names {
			if fi, err := os.Stat(chains.values[i]); err == nil {
				chainS[name].add(at, float64(fi.Size()))
			}
		}
		for _, t := range ts {
			openS[t.name].add(at, float64(t.open.Load()))
		}
	}
	tick := time.NewTicker(*every)
	defer tick.Stop()
	progress := time.NewTicker(time.Minute)
	defer progress.Stop()
	sampleOnce()
wait:
	for {
		select {
		case <-done:
			break wait
		case <-ctx.Done():
			<-done
			return ctx.Err()
		case <-progress.C:
			var parts []string
			for _, t := range ts {
				parts = append(parts, fmt.Sprintf("%s %d open, %d ok, %d failed", t.name, t.open.Load(), t.ok.Load(), t.failed.Load()))
			}
			fmt.Fprintf(os.Stderr, "soak: %s: %s\n", time.Since(start).Round(time.Second), strings.Join(parts, "; "))
		case <-tick.C:
			if time.Now().Before(stopAt) {
				sampleOnce()
			}
		}
	}
	if err := soakReport(out, ts, all, metrics.names, chains.names, chainS, openS, duration.Seconds(), *chainSlack, *n); err != nil {
		probeReport(out, metrics.names, tallies)
		return err
	}
	probeReport(out, metrics.names, tallies)
	return nil
}

// probeReport prints, for each measured node with adopted instances, its
// probes during the run by role and result and the samples that found
// one of them down. It judges nothing: a probe without an answer (missed)
// is tolerated by design, and a role withdrawn shows as failed streams.
func probeReport(out io.Writer, names []string, tallies map[string]*probeTally) {
	header := false
	for _, name := range names {
		pt := tallies[name]
		if len(pt.last) == 0 && pt.down == 0 {
			continue
		}
		if !header {
			fmt.Fprintln(out)
			fmt.Fprintln(out, "| node | probes of adopted instances during the run | samples with one down |")
			fmt.Fprintln(out, "|---|---|---|")
			header = true
		}
		keys := make([]string, 0, len(pt.last))
		for k := range pt.last {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s %.0f", strings.ReplaceAll(k, `"`, ""), pt.last[k]-pt.first[k]))
		}
		fmt.Fprintf(out, "| %s | %s | %d of %d |\n", name, strings.Join(parts, "; "), pt.down, pt.samples)
	}
}

// getOK GETs url and wants 200.
func getOK(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, res.Status)
	}
	return nil
}

// soakReport prints the figures and returns an error naming every miss.
func soakReport(out io.Writer, ts []*soakTarget, all []*series, metricNames, chainNames []string,
	chainS, openS map[string]*series, dur, chainSlack float64, n int) error {
	var misses []string
	fmt.Fprintln(out, "| target | streams ok / failed | open at once: most / median of the last half |")
	fmt.Fprintln(out, "|---|---|---|")
	for _, t := range ts {
		_, lastOpen := halves(openS[t.name], dur)
		fmt.Fprintf(out, "| %s | %d / %d | %d / %.0f |\n", t.name, t.ok.Load(), t.failed.Load(), t.most.Load(), median(lastOpen))
		if t.failed.Load() > 0 {
			misses = append(misses, fmt.Sprintf("%s: %d streams failed", t.name, t.failed.Load()))
		}
		if med := median(lastOpen); med < 0.9*float64(n) {
			misses = append(misses, fmt.Sprintf("%s: only %.0f streams open (median of the last half), want about %d", t.name, med, n))
		}
		keys := make([]string, 0, len(t.errs))
		for k := range t.errs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			if i == 5 {
				fmt.Fprintf(out, "  (%d more kinds of error)\n", len(keys)-5)
				break
			}
			fmt.Fprintf(out, "  %dx %s\n", t.errs[k], k)
		}
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| series | first sample | mean of the last half | slope of the last half | noise (σ about it) | rise over the last half | verdict |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|")
	for _, s := range all {
		if len(s.v) == 0 {
			misses = append(misses, s.name+": no samples")
			continue
		}
		f := flatness(s, dur)
		// The heap's parts are shown, not judged: RSS holds them, and a
		// collection that comes late makes their samples jump.
		judged := !s.shown
		verdict := "flat"
		switch {
		case f.n < 3:
			verdict = "too few samples"
			if judged && !strings.Contains(s.name, "live heap") {
				misses = append(misses, s.name+": too few samples in the last half")
			}
		case !f.flat && judged:
			verdict = "GROWS"
			misses = append(misses, fmt.Sprintf("%s grows: %.2f%s over the last half, noise %.2f%s", s.name, f.rise/s.scale, s.unit, f.noise/s.scale, s.unit))
		case !f.flat:
			verdict = "grows (not judged)"
		case !judged:
			verdict = "flat (not judged)"
		}
		if f.n < 3 {
			fmt.Fprintf(out, "| %s | %.1f%s | - | - | - | - | %s |\n", s.name, s.v[0]/s.scale, s.unit, verdict)
			continue
		}
		fmt.Fprintf(out, "| %s | %.1f%s | %.1f%s | %+.2f%s/min | %.2f%s | %+.2f%s | %s |\n", s.name, s.v[0]/s.scale, s.unit,
			f.mean/s.scale, s.unit, f.slope*60/s.scale, s.unit, f.noise/s.scale, s.unit, f.rise/s.scale, s.unit, verdict)
	}
	if len(chainNames) > 0 {
		fmt.Fprintln(out)
		fmt.Fprintln(out, "| chain | size at start / end | growth, whole run | first half | last half | verdict |")
		fmt.Fprintln(out, "|---|---|---|---|---|---|")
	}
	for _, name := range chainNames {
		s := chainS[name]
		if len(s.v) < 3 {
			misses = append(misses, name+" chain: too few samples")
			continue
		}
		whole := rate(s.t, s.v)
		first, last := halves(s, dur)
		firstT, lastT := s.t[:len(first)], s.t[len(s.t)-len(last):]
		r1, r2 := rate(firstT, first), rate(lastT, last)
		verdict := "bounded"
		if r2 > r1+chainSlack {
			verdict = "GROWS FASTER"
			misses = append(misses, fmt.Sprintf("%s chain grows faster in the last half: %.0f B/min against %.0f", name, r2, r1))
		}
		fmt.Fprintf(out, "| %s | %.0f / %.0f B | %.0f B/min | %.0f B/min | %.0f B/min | %s |\n", name, s.v[0], s.v[len(s.v)-1], whole, r1, r2, verdict)
	}
	if len(misses) > 0 {
		return fmt.Errorf("soak: %s", strings.Join(misses, "; "))
	}
	return nil
}

// halves splits a series at half the run: samples before dur/2, and
// those from dur/2 on.
func halves(s *series, dur float64) (first, last []float64) {
	i := sort.SearchFloat64s(s.t, dur/2)
	return s.v[:i], s.v[i:]
}

// rate is the growth in units per minute from the first to the last
// sample.
func rate(t, v []float64) float64 {
	if len(v) < 2 || t[len(t)-1] <= t[0] {
		return 0
	}
	return (v[len(v)-1] - v[0]) / (t[len(t)-1] - t[0]) * 60
}

// flat is the verdict on the last half of a series.
type flat struct {
	n           int
	mean, slope float64 // slope per second
	noise, rise float64
	flat        bool
}

// flatness fits a least-squares line to the samples of the last half of
// the run (t >= dur/2) and compares the rise that line makes over the
// last half (slope x its length) with the noise: the standard deviation
// of the samples about the line, at least 0.5% of their mean (a series
// that barely moves, goroutines say, must not fail on one unit). Flat:
// a rise of at most twice the noise. A falling series is flat.
func flatness(s *series, dur float64) flat {
	i := sort.SearchFloat64s(s.t, dur/2)
	t, v := s.t[i:], s.v[i:]
	f := flat{n: len(v)}
	if f.n < 3 {
		return f
	}
	var mt, mv float64
	for k := range v {
		mt += t[k]
		mv += v[k]
	}
	mt /= float64(f.n)
	mv /= float64(f.n)
	var sxy, sxx float64
	for k := range v {
		sxy += (t[k] - mt) * (v[k] - mv)
		sxx += (t[k] - mt) * (t[k] - mt)
	}
	if sxx > 0 {
		f.slope = sxy / sxx
	}
	var ss float64
	for k := range v {
		r := v[k] - (mv + f.slope*(t[k]-mt))
		ss += r * r
	}
	f.mean = mv
	f.noise = max(math.Sqrt(ss/float64(f.n-2)), 0.005*math.Abs(mv))
	f.rise = f.slope * (t[len(t)-1] - t[0])
	f.flat = f.rise <= 2*f.noise
	return f
}
