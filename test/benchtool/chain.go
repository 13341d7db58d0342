package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// runChain splits the latency of a request chain at concurrency 1 into
// its stages, from a system call trace: `perf script -F
// comm,pid,tid,cpu,time,event,trace` of raw_syscalls:sys_enter, recorded
// on every CPU while one client sends one request at a time through the
// processes named by -label. In such a chain each process writes once
// (or a few times in a row) and the next one writes only after it, so the
// time from one labelled process's write to the next labelled process's
// write is the second's stage: its wake-up and its work. Each stage is
// also told apart by whether the two writes ran on the same CPU: a
// wake-up on another CPU, idle until then, costs tens of µs on a virtual
// machine, and which CPU the kernel picks changes from run to run.
func runChain(args []string, in io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("chain", flag.ContinueOnError)
	labels := map[int]string{}
	fs.Func("label", "NAME=PID: a process of the chain (repeat)", func(v string) error {
		name, pid, ok := strings.Cut(v, "=")
		n, err := strconv.Atoi(pid)
		if !ok || name == "" || err != nil || n <= 0 {
			return fmt.Errorf("%q is not NAME=PID", v)
		}
		labels[n] = name
		return nil
	})
	proxies := fs.String("proxies", "", "comma-separated labels whose stages are summed as the hop's")
	name := fs.String("name", "chain", "what the summary line is called")
	minCount := fs.Int("min", 20, "stages seen fewer times are left out (stray writes)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(labels) < 2 {
		return errors.New("chain: at least two -label NAME=PID")
	}
	st, err := chainStages(in, labels, writeSyscalls(runtime.GOARCH))
	if err != nil {
		return err
	}
	hop := map[string]bool{}
	for _, p := range strings.Split(*proxies, ",") {
		hop[p] = p != ""
	}
	printChain(out, *name, st, hop, *minCount)
	return nil
}

// writeSyscalls are the numbers of write, writev, sendto and sendmsg.
func writeSyscalls(arch string) map[int]bool {
	if arch == "arm64" {
		return map[int]bool{64: true, 66: true, 206: true, 211: true}
	}
	return map[int]bool{1: true, 20: true, 44: true, 46: true}
}

// chainStage is one stage's samples: from's write to to's.
type chainStage struct {
	from, to string
	took     []float64 // µs
	cross    int       // of took, the stages whose two writes ran on different CPUs
}

var perfLine = regexp.MustCompile(`^\s*(.*?)\s+(\d+)/(\d+)\s+\[(\d+)\]\s+(\d+)\.(\d+):\s+(\S+):\s*NR (\d+)\b`)

// chainStages reads the trace and returns its stages, in the order first
// seen. Lines that are not a labelled process's write are skipped.
func chainStages(in io.Reader, labels map[int]string, writes map[int]bool) ([]*chainStage, error) {
	type write struct {
		label string
		cpu   int
		at    time.Duration
	}
	var prev *write
	byPair := map[[2]string]*chainStage{}
	var order []*chainStage
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := perfLine.FindStringSubmatch(sc.Text())
		if m == nil || m[7] != "raw_syscalls:sys_enter" {
			continue
		}
		pid, _ := strconv.Atoi(m[2])
		label, ok := labels[pid]
		nr, _ := strconv.Atoi(m[8])
		if !ok || !writes[nr] {
			continue
		}
		cpu, _ := strconv.Atoi(m[4])
		sec, err1 := strconv.ParseInt(m[5], 10, 64)
		frac, err2 := strconv.ParseInt((m[6] + "000000000")[:9], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("chain: bad time in %q", sc.Text())
		}
		w := &write{label: label, cpu: cpu, at: time.Duration(sec)*time.Second + time.Duration(frac)}
		if prev != nil && prev.label != w.label && w.at >= prev.at {
			k := [2]string{prev.label, w.label}
			s := byPair[k]
			if s == nil {
				s = &chainStage{from: k[0], to: k[1]}
				byPair[k] = s
				order = append(order, s)
			}
			s.took = append(s.took, float64(w.at-prev.at)/float64(time.Microsecond))
			if prev.cpu != w.cpu {
				s.cross++
			}
		}
		prev = w
	}
	return order, sc.Err()
}

// printChain prints each stage's quartiles and share on another CPU, then
// one line: the sum of the hop's stages' medians (the stages that end in
// a write of a -proxies label), the rest, and the share of stages that
// crossed CPUs.
func printChain(out io.Writer, name string, stages []*chainStage, hop map[string]bool, minCount int) {
	var hopSum, rest float64
	n, cross := 0, 0
	for _, s := range stages {
		if len(s.took) < minCount {
			continue
		}
		p50 := median(s.took)
		fmt.Fprintf(out, "%s %-14s n %5d  p25 %6.1f  p50 %6.1f  p75 %6.1f µs  other CPU %5.1f%%\n", name, s.from+"->"+s.to,
			len(s.took), quantile(s.took, 0.25), p50, quantile(s.took, 0.75), 100*float64(s.cross)/float64(len(s.took)))
		if hop[s.to] {
			hopSum += p50
		} else {
			rest += p50
		}
		n += len(s.took)
		cross += s.cross
	}
	share := 0.0
	if n > 0 {
		share = 100 * float64(cross) / float64(n)
	}
	fmt.Fprintf(out, "%s: the hop's stages %.0f µs, the others %.0f µs (sums of medians); %.1f%% of stages woke on another CPU\n",
		name, hopSum, rest, share)
}
