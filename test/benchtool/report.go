package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// result is one wrk run, as bench_wrk in scripts/bench-lib.sh appends it:
// "round path concurrency p50_us p99_us requests_per_s errors non2xx
// [proxy_cpu_us_per_request]".
type result struct {
	round     int
	path      string
	conc      int
	p50, p99  float64
	rps       float64
	errs, bad int
	cpu       float64 // the proxy's CPU per request, µs; 0: not measured
}

func parseResults(r io.Reader) ([]result, error) {
	var out []result
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) != 8 && len(f) != 9 {
			return nil, fmt.Errorf("line %d: %d fields, want 8 or 9", line, len(f))
		}
		var res result
		var err error
		nums := make([]float64, 0, 7)
		for i, s := range f {
			if i == 1 {
				continue
			}
			v, perr := strconv.ParseFloat(s, 64)
			if perr != nil {
				err = fmt.Errorf("line %d: field %d %q is not a number", line, i+1, s)
				break
			}
			nums = append(nums, v)
		}
		if err != nil {
			return nil, err
		}
		res.round, res.path, res.conc = int(nums[0]), f[1], int(nums[1])
		res.p50, res.p99, res.rps = nums[2], nums[3], nums[4]
		res.errs, res.bad = int(nums[5]), int(nums[6])
		if len(nums) == 8 {
			res.cpu = nums[7]
		}
		out = append(out, res)
	}
	return out, sc.Err()
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// runReport prints, for every path against "direct" in the same round, the
// median over rounds of the added p50 and p99 at the lowest concurrency
// and of the throughput share at the highest.
func runReport(args []string, out io.Writer) error {
	if len(args) != 1 {
		return errors.New("usage: benchtool report FILE")
	}
	f, err := os.Open(args[0])
	if err != nil {
		return err
	}
	defer f.Close()
	results, err := parseResults(f)
	if err != nil {
		return fmt.Errorf("%s: %w", args[0], err)
	}
	if len(results) == 0 {
		return fmt.Errorf("%s: no results", args[0])
	}
	type key struct {
		round int
		path  string
		conc  int
	}
	byKey := map[key]result{}
	var paths []string
	lo, hi := results[0].conc, results[0].conc
	rounds := map[int]bool{}
	for _, r := range results {
		byKey[key{r.round, r.path, r.conc}] = r
		if !slices.Contains(paths, r.path) {
			paths = append(paths, r.path)
		}
		lo, hi = min(lo, r.conc), max(hi, r.conc)
		rounds[r.round] = true
	}
	if !slices.Contains(paths, "direct") {
		return errors.New("report: no \"direct\" results to compare with")
	}
	// direct first, the rest in the order they were first measured
	paths = slices.DeleteFunc(paths, func(p string) bool { return p == "direct" })
	paths = append([]string{"direct"}, paths...)
	fmt.Fprintf(out, "| path | p50 at c=%d | added p50 | added p99 | req/s at c=%d | share of direct | proxy CPU per request at c=%d | errors |\n", lo, hi, hi)
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|")
	for _, path := range paths {
		var p50, add50, add99, rps, share, cpu []float64
		errs := 0
		for round := range rounds {
			d1, ok1 := byKey[key{round, "direct", lo}]
			dN, okN := byKey[key{round, "direct", hi}]
			r1, ok := byKey[key{round, path, lo}]
			if ok && ok1 {
				p50 = append(p50, r1.p50)
				add50 = append(add50, r1.p50-d1.p50)
				add99 = append(add99, r1.p99-d1.p99)
				errs += r1.errs + r1.bad
			}
			if rN, ok := byKey[key{round, path, hi}]; ok && okN && dN.rps > 0 {
				rps = append(rps, rN.rps)
				share = append(share, rN.rps/dN.rps)
				if rN.cpu > 0 {
					cpu = append(cpu, rN.cpu)
				}
				errs += rN.errs + rN.bad
			}
		}
		cpuText := "-"
		if len(cpu) > 0 {
			cpuText = fmt.Sprintf("%.0f µs", median(cpu))
		}
		if path == "direct" {
			fmt.Fprintf(out, "| %s | %.0f µs | 0 | 0 | %.0f | 1.00 | %s | %d |\n", path, median(p50), median(rps), cpuText, errs)
			continue
		}
		fmt.Fprintf(out, "| %s | %.0f µs | %+.0f µs | %+.0f µs | %.0f | %.2f | %s | %d |\n",
			path, median(p50), median(add50), median(add99), median(rps), median(share), cpuText, errs)
	}
	fmt.Fprintf(out, "\n%d rounds; added latency and share are medians of per-round differences and ratios against direct in the same round;\n"+
		"proxy CPU per request is the proxy process's user+system time during the run over its requests (median of rounds).\n", len(rounds))
	return nil
}
