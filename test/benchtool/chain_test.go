package main

import (
	"fmt"
	"strings"
	"testing"
)

// A synthetic trace of a lockstep chain wrk -> C -> S -> up -> S -> C ->
// wrk, each stage of a known length, one of them on another CPU: the
// stages and the hop's sum come out as written, and what is not a
// labelled write (a read, another process, another event) is skipped.
func TestChainStages(t *testing.T) {
	var b strings.Builder
	line := func(comm string, pid, cpu int, at float64, event string, nr int) {
		fmt.Fprintf(&b, "%16s %5d/%-5d [%03d] %.6f: %s: NR %d (3, 7f00, 40, 0, 0, 0)\n", comm, pid, pid, cpu, at, event, nr)
	}
	// Stages in µs, in chain order; C's reply to wrk is on CPU 1.
	steps := []struct {
		comm string
		pid  int
		took float64
		cpu  int
	}{{"wrk", 10, 0, 0}, {"n", 20, 30, 0}, {"n", 21, 20, 0}, {"up", 30, 40, 0}, {"n", 21, 25, 0}, {"n", 20, 15, 1}}
	at := 100.0
	for i := 0; i < 30; i++ {
		for _, s := range steps {
			at += s.took / 1e6
			line(s.comm, s.pid, s.cpu, at, "raw_syscalls:sys_enter", 20)
			line(s.comm, s.pid, s.cpu, at+1e-6, "raw_syscalls:sys_enter", 0) // a read
			if s.pid == 21 && s.took == 20 {
				line(s.comm, s.pid, s.cpu, at, "raw_syscalls:sys_enter", 1) // a second write in a row: no stage
			}
		}
		line("other", 99, 1, at+2e-6, "raw_syscalls:sys_enter", 1)
		line("wrk", 10, 0, at+3e-6, "sched:sched_switch", 1)
		at += 10e-6 // wrk's own stage
	}
	var out strings.Builder
	err := runChain([]string{"-label", "wrk=10", "-label", "C=20", "-label", "S=21", "-label", "up=30", "-proxies", "C,S", "-name", "mesh"},
		strings.NewReader(b.String()), &out)
	if err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if strings.Contains(got, "S->S") {
		t.Errorf("a process's writes in a row made a stage:\n%s", got)
	}
	for _, want := range []string{
		"mesh wrk->C ", "p50   30.0", "mesh C->S ", "p50   20.0", "mesh S->up", "p50   40.0",
		"mesh up->S", "p50   25.0", "mesh S->C ", "p50   15.0", "mesh C->wrk", "p50   10.0",
		// 30 + 20 + 25 + 15 for the hop, 40 + 10 the others; one stage
		// in six on another CPU (C's reply, and wrk's next request after it).
		"mesh: the hop's stages 90 µs, the others 50 µs", "33.0% of stages woke on another CPU",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
}

func TestChainRefusesBadLabels(t *testing.T) {
	for _, args := range [][]string{
		{"-label", "C=20"},
		{"-label", "C=x", "-label", "S=2"},
		{"-label", "=20", "-label", "S=2"},
		{"-label", "C20", "-label", "S=2"},
	} {
		if err := runChain(args, strings.NewReader(""), &strings.Builder{}); err == nil {
			t.Errorf("runChain(%q) = nil error", args)
		}
	}
}
