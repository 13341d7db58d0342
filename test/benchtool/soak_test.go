package main

import (
	"bytes"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// ramp is a series sampled every 5 s over dur seconds: base + slope*t
// plus a deterministic wobble of amplitude wob.
func ramp(dur, base, slopePerSec, wob float64) *series {
	s := &series{name: "x", scale: 1}
	for t := 0.0; t <= dur; t += 5 {
		w := wob * math.Sin(t*1.7)
		s.t, s.v = append(s.t, t), append(s.v, base+slopePerSec*t+w)
	}
	return s
}

// TestFlatness: the verdict on the last half of a series. Noise alone is
// flat, a leak beyond the noise grows, a fall is flat, and a series that
// barely moves (goroutines) is not failed on one unit.
func TestFlatness(t *testing.T) {
	const dur = 600
	for _, tc := range []struct {
		name string
		s    *series
		flat bool
	}{
		{"noise only", ramp(dur, 200e6, 0, 5e6), true},
		{"a leak of 1 MB/min under 0.5 MB of noise", ramp(dur, 200e6, 1e6/60, 0.5e6), false},
		{"a leak hidden in 20 MB of noise", ramp(dur, 200e6, 0.1e6/60, 20e6), true},
		{"falling", ramp(dur, 200e6, -5e6/60, 1e6), true},
		{"goroutines, one unit up", ramp(dur, 2000, 1.0/300, 0), true},
		{"goroutines, 50 up", ramp(dur, 2000, 50.0/300, 0), false},
	} {
		f := flatness(tc.s, dur)
		if f.flat != tc.flat {
			t.Errorf("%s: flat = %v (slope %g/s, noise %g, rise %g), want %v", tc.name, f.flat, f.slope, f.noise, f.rise, tc.flat)
		}
		if f.n != 61 {
			t.Errorf("%s: %d samples in the last half, want 61", tc.name, f.n)
		}
	}
	if f := flatness(ramp(10, 1, 0, 0), dur); f.n >= 3 {
		t.Errorf("a series sampled before the last half: %d samples in it", f.n)
	}
	// A clean line: its slope, no noise but the floor.
	f := flatness(ramp(dur, 1000, 2, 0), dur)
	if math.Abs(f.slope-2) > 1e-9 || math.Abs(f.rise-600) > 1e-6 || f.flat {
		t.Errorf("line: %+v", f)
	}
}

// TestSoakReport: a failed stream, too few streams open, a growing RSS and
// a chain that grows faster in the last half each fail the soak and are
// named; a clean run passes.
func TestSoakReport(t *testing.T) {
	const dur = 600
	mk := func(failed int64, open float64, rss, chain *series) error {
		tg := &soakTarget{name: "local", errs: map[string]int{}}
		tg.ok.Store(100)
		for range failed {
			tg.fail(errString("status 503"))
		}
		openS := map[string]*series{"local": ramp(dur, open, 0, 0)}
		rss.name, rss.unit, rss.scale = "s RSS", "MB", 1e6
		chainS := map[string]*series{"s": chain}
		var out bytes.Buffer
		err := soakReport(&out, []*soakTarget{tg}, []*series{rss}, []string{"s"}, []string{"s"}, chainS, openS, dur, 4096, 1000)
		if !strings.Contains(out.String(), "| local | 100 / ") {
			t.Errorf("report lacks the target row:\n%s", out.String())
		}
		return err
	}
	flatChain := ramp(dur, 4000, 0, 0)
	if err := mk(0, 1000, ramp(dur, 200e6, 0, 2e6), flatChain); err != nil {
		t.Errorf("clean run: %v", err)
	}
	for _, tc := range []struct {
		name       string
		failed     int64
		open       float64
		rss, chain *series
		want       string
	}{
		{"failed", 2, 1000, ramp(dur, 200e6, 0, 2e6), flatChain, "2 streams failed"},
		{"few open", 0, 64, ramp(dur, 200e6, 0, 2e6), flatChain, "only 64 streams open"},
		{"rss grows", 0, 1000, ramp(dur, 200e6, 5e6/60, 0.5e6), flatChain, "s RSS grows"},
		{"chain accelerates", 0, 1000, ramp(dur, 200e6, 0, 2e6), chainAccel(dur), "chain grows faster"},
	} {
		err := mk(tc.failed, tc.open, tc.rss, tc.chain)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}

// chainAccel is a chain that grows by nothing in the first half and by
// 60 KB a minute in the second.
func chainAccel(dur float64) *series {
	s := &series{name: "s chain", scale: 1}
	for t := 0.0; t <= dur; t += 5 {
		v := 4000.0
		if t > dur/2 {
			v += (t - dur/2) * 1000
		}
		s.t, s.v = append(s.t, t), append(s.v, v)
	}
	return s
}

type errString string

func (e errString) Error() string { return string(e) }

// TestNamedFlag: NAME=VALUE, in order, each name once.
func TestNamedFlag(t *testing.T) {
	var f namedFlag
	for _, v := range []string{"local=http://127.0.0.1:1", "mesh=http://127.0.0.1:2"} {
		if err := f.Set(v); err != nil {
			t.Fatal(err)
		}
	}
	if f.String() != "local,mesh" || f.values[1] != "http://127.0.0.1:2" {
		t.Errorf("flag = %v %v", f.names, f.values)
	}
	for _, bad := range []string{"local=http://127.0.0.1:3", "novalue", "=x", "x="} {
		if err := f.Set(bad); err == nil {
			t.Errorf("Set(%q) accepted", bad)
		}
	}
}

// TestScrapeProbesAndHeap: scrape reads the Go heap's idle and released
// bytes, the probe counters by their labels and the adopted instances
// down, and probeReport prints the probes made between the first and the
// last sample.
func TestScrapeProbesAndHeap(t *testing.T) {
	var probesUp atomic.Int64
	probesUp.Store(10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "# HELP x\n"+
			"process_resident_memory_bytes 2e+08\ngo_goroutines 50\ngo_memstats_heap_inuse_bytes 1.5e+08\n"+
			"go_memstats_heap_idle_bytes 4e+07\ngo_memstats_heap_released_bytes 1e+07\ngo_memstats_stack_inuse_bytes 3e+06\ngo_memstats_next_gc_bytes 2e+08\n"+
			"nodeld_runtime_instance_up{instance=\"127.0.0.1:9\",role=\"chat\"} 0\n"+
			"nodeld_runtime_probes_total{result=\"missed\",role=\"chat\"} 2\n"+
			"nodeld_runtime_probes_total{result=\"up\",role=\"chat\"} %d\n", probesUp.Load())
	}))
	defer srv.Close()
	first, err := scrape(t.Context(), srv.Client(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if first.idle != 4e7 || first.released != 1e7 || first.stack != 3e6 || first.goal != 2e8 || first.down != 1 || first.heap != 1.5e8 {
		t.Errorf("sample %+v: want idle 4e7, released 1e7, stacks 3e6, goal 2e8, one down", first)
	}
	probesUp.Store(25)
	last, err := scrape(t.Context(), srv.Client(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	probeReport(&out, []string{"s", "c"}, map[string]*probeTally{
		"s": {first: first.probes, last: last.probes, samples: 2, down: 2},
		"c": {samples: 2},
	})
	want := "| s | result=missed,role=chat 0; result=up,role=chat 15 | 2 of 2 |\n"
	if !strings.Contains(out.String(), want) || strings.Contains(out.String(), "| c |") {
		t.Errorf("probe report:\n%s\nwant the row %q and none for c", out.String(), want)
	}
}
