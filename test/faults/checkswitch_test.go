//go:build faults

package faults

import (
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"
)

// probeResult is what one burst of UDP probes through the switch saw.
type probeResult struct {
	sent, lost int
	rtts       []time.Duration // sorted
}

func (r probeResult) quantile(q float64) time.Duration {
	if len(r.rtts) == 0 {
		return -1
	}
	return r.rtts[min(len(r.rtts)-1, int(q*float64(len(r.rtts))))]
}

// probe sends n UDP datagrams from conn to echoAddr, one every gap, each
// carrying its index and send time, and collects the echoes until every
// one is back or settle has passed since the last send (so a check that
// expects every echo waits only as long as they take, and one that
// expects losses waits settle).
func probe(t *testing.T, conn net.PacketConn, echoAddr net.Addr, n int, gap, settle time.Duration) probeResult {
	t.Helper()
	sentAt := make([]time.Time, n)
	got := make([]bool, n)
	var res probeResult
	var mu sync.Mutex
	var wg sync.WaitGroup
	stop := make(chan struct{})
	all := make(chan struct{}) // closed once every echo is back
	wg.Go(func() {
		buf := make([]byte, 64)
		for {
			_ = conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			k, _, err := conn.ReadFrom(buf)
			select {
			case <-stop:
				return
			default:
			}
			if err != nil || k < 4 {
				continue
			}
			i := int(binary.BigEndian.Uint32(buf))
			mu.Lock()
			if i < n && !got[i] && !sentAt[i].IsZero() {
				got[i] = true
				res.rtts = append(res.rtts, time.Since(sentAt[i]))
				if len(res.rtts) == n {
					close(all)
				}
			}
			mu.Unlock()
		}
	})
	msg := make([]byte, 32)
	for i := range n {
		binary.BigEndian.PutUint32(msg, uint32(i))
		mu.Lock()
		sentAt[i] = time.Now()
		mu.Unlock()
		if _, err := conn.WriteTo(msg, echoAddr); err != nil {
			t.Fatalf("probe %d: %v", i, err)
		}
		time.Sleep(gap) // pacing of the probes, not a wait for a condition
	}
	settled := time.NewTimer(settle) // the longest a delayed echo can take
	select {
	case <-all:
	case <-settled.C:
	}
	settled.Stop()
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	res.sent = n
	res.lost = n - len(res.rtts)
	slices.Sort(res.rtts)
	return res
}

// frameCounts are a port's frame counters at one time.
type frameCounts struct{ direct, delayed, dropped uint64 }

func countFrames(p *port) frameCounts {
	return frameCounts{p.stats.direct.Load(), p.stats.delayed.Load(), p.stats.dropped.Load()}
}

func (c frameCounts) since(before frameCounts) frameCounts {
	return frameCounts{c.direct - before.direct, c.delayed - before.delayed, c.dropped - before.dropped}
}

// TestSwitchImpairs checks the suite's instrument before any fault uses
// it: two namespaces on the switch exchange UDP probes. It checks the
// switch's mechanism, not the machine's speed (a wall-clock ceiling
// flakes on a loaded machine): unimpaired, none is lost and the switch
// forwards every frame at once, putting none on a timer; with 5% loss
// and 50 ms ± 20 ms on both ports, the round-trip loss is near 1-0.95^2,
// every frame either side sent went through the impairment (dropped or
// delayed, none forwarded at once), every delay the switch drew lies in
// [30 ms, 70 ms] and they centre on 50 ms, and no round trip is shorter
// than its two delays' floor, 60 ms (a timer never fires early); a port
// that is down passes nothing; cleared, it passes again; a port cut from
// a node passes nothing between the two, whichever side the cut is set
// on, and a cut from another node takes nothing from them. The round
// trips and how late the switch's timers fired (the machine's share) are
// logged.
func TestSwitchImpairs(t *testing.T) {
	needMachine(t)
	sw, nodes := newTestNet(t, "10.213.1", "x", "y")
	var echo, client net.PacketConn
	if err := nodes["y"].do(func() (err error) { echo, err = net.ListenPacket("udp4", "10.213.1.2:9000"); return }); err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	if err := nodes["x"].do(func() (err error) { client, err = net.ListenPacket("udp4", "10.213.1.1:0"); return }); err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer echo.Close()
	wg.Go(func() {
		buf := make([]byte, 64)
		for {
			k, from, err := echo.ReadFrom(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err == nil {
				_, _ = echo.WriteTo(buf[:k], from)
			}
		}
	})
	echoAddr := echo.LocalAddr()
	px, py := sw.port("x"), sw.port("y")

	// Neighbour discovery first, unimpaired.
	deadline := time.Now().Add(5 * time.Second)
	for probe(t, client, echoAddr, 1, 0, 100*time.Millisecond).lost == 1 {
		if time.Now().After(deadline) {
			t.Fatal("no echo through the switch within 5 s")
		}
	}
	x0, y0 := countFrames(px), countFrames(py)
	clean := probe(t, client, echoAddr, 200, time.Millisecond, 5*time.Second)
	dx, dy := countFrames(px).since(x0), countFrames(py).since(y0)
	t.Logf("switch, unimpaired: %d of %d lost, round trip p50 %v max %v; frames forwarded at once x %d y %d, delayed x %d y %d",
		clean.lost, clean.sent, clean.quantile(0.5), clean.quantile(1), dx.direct, dy.direct, dx.delayed, dy.delayed)
	if clean.lost != 0 {
		t.Fatalf("unimpaired: %d of %d lost", clean.lost, clean.sent)
	}
	if dx.direct < uint64(clean.sent) || dy.direct < uint64(clean.sent) || dx.delayed != 0 || dy.delayed != 0 || dx.dropped != 0 || dy.dropped != 0 {
		t.Errorf("unimpaired: x forwarded %+v, y %+v; want every probe and echo forwarded at once, none delayed or dropped", dx, dy)
	}
	px.takeDelays()
	py.takeDelays()

	imp := impairment{Loss: 0.05, Delay: 50 * time.Millisecond, Jitter: 20 * time.Millisecond}
	sw.impair("", imp)
	x0, y0 = countFrames(px), countFrames(py)
	bad := probe(t, client, echoAddr, 1000, time.Millisecond, time.Second)
	// Counted while still impaired: a frame the kernel sends between a
	// reset and the count would be forwarded at once.
	dx, dy = countFrames(px).since(x0), countFrames(py).since(y0)
	delX, delY := px.takeDelays(), py.takeDelays()
	sw.impair("", impairment{})
	lossRate := float64(bad.lost) / float64(bad.sent)
	t.Logf("switch, %v on both ports: round-trip loss %.1f%% (expected 9.75%%), round trip min %v p50 %v p90 %v p99 %v max %v (60..140 ms, centred on 100 ms, plus the timers' lateness)",
		imp, 100*lossRate, bad.quantile(0).Round(time.Millisecond), bad.quantile(0.5).Round(time.Millisecond),
		bad.quantile(0.9).Round(time.Millisecond), bad.quantile(0.99).Round(time.Millisecond), bad.quantile(1).Round(time.Millisecond))
	for _, p := range []struct {
		name   string
		frames frameCounts
		d      delayStats
	}{{"x", dx, delX}, {"y", dy, delY}} {
		t.Logf("port %s: %d frames delayed, %d dropped, %d at once; delays drawn %v..%v, mean %v; timers fired late by %v on average, %v at most",
			p.name, p.frames.delayed, p.frames.dropped, p.frames.direct, p.d.min, p.d.max, p.d.mean().Round(10*time.Microsecond),
			p.d.meanLate().Round(10*time.Microsecond), p.d.lateMax.Round(10*time.Microsecond))
		if p.frames.direct != 0 {
			t.Errorf("port %s forwarded %d frames at once while impaired, want every frame delayed or dropped", p.name, p.frames.direct)
		}
		if lo, hi := imp.Delay-imp.Jitter, imp.Delay+imp.Jitter; p.d.min < lo || p.d.max > hi {
			t.Errorf("port %s drew delays %v..%v, want within %v..%v", p.name, p.d.min, p.d.max, lo, hi)
		}
		// Uniform on [30 ms, 70 ms]: sd 11.5 ms, so the mean of 900 or
		// more draws is 50 ms within 0.4 ms (one sd).
		if m := p.d.mean(); m < imp.Delay-3*time.Millisecond || m > imp.Delay+3*time.Millisecond {
			t.Errorf("port %s: mean delay drawn %v over %d frames, want about %v", p.name, m, p.d.n, imp.Delay)
		}
	}
	// Every probe x sent was dropped or delayed at x, and every echo that
	// came back was delayed at y (and so drew a delay).
	if got := dx.delayed + dx.dropped; got < uint64(bad.sent) || uint64(delX.n) != dx.delayed {
		t.Errorf("port x: %d frames delayed or dropped (%d delays drawn) for %d probes", got, delX.n, bad.sent)
	}
	if answered := uint64(bad.sent - bad.lost); dy.delayed < answered || uint64(delY.n) != dy.delayed {
		t.Errorf("port y: %d frames delayed (%d delays drawn) for %d echoes that came back", dy.delayed, delY.n, answered)
	}
	// 1000 probes at p = 0.0975: the mean is 97.5 losses, sd 9.4.
	if bad.lost < 50 || bad.lost > 150 {
		t.Errorf("round-trip loss %d of %d, want 50..150", bad.lost, bad.sent)
	}
	// The floor is exact: each way waits for its timer, and a timer never
	// fires early. (Above it, a timer or a reader may wait for a CPU on a
	// loaded machine: the lateness logged above.)
	if floor := 2 * (imp.Delay - imp.Jitter); bad.quantile(0) < floor {
		t.Errorf("shortest round trip %v, want at least %v (two delays of at least %v)", bad.quantile(0), floor, imp.Delay-imp.Jitter)
	}

	sw.impair("y", impairment{Down: true})
	x0 = countFrames(px)
	if down := probe(t, client, echoAddr, 50, time.Millisecond, 100*time.Millisecond); down.lost != down.sent {
		t.Errorf("port down: %d of %d probes answered, want none", down.sent-down.lost, down.sent)
	} else if d := countFrames(px).since(x0); d.dropped < uint64(down.sent) {
		t.Errorf("port down: %d of x's frames dropped for %d probes", d.dropped, down.sent)
	}
	sw.impair("", impairment{})
	if up := probe(t, client, echoAddr, 50, time.Millisecond, 5*time.Second); up.lost != 0 {
		t.Errorf("port up again: %d of %d lost", up.lost, up.sent)
	}

	// A cut drops the frames between the port and the nodes it names,
	// set on either side, and no other: y cut from a node that is not x
	// passes x's probes.
	for _, c := range []struct {
		port, from string
		cut        bool
	}{{"y", "x", true}, {"x", "y", true}, {"y", "z", false}} {
		sw.impair(c.port, impairment{Cut: []string{c.from}})
		r := probe(t, client, echoAddr, 50, time.Millisecond, 100*time.Millisecond)
		sw.impair("", impairment{})
		if ok := c.cut && r.lost == r.sent || !c.cut && r.lost == 0; !ok {
			t.Errorf("%s cut from %s: %d of %d probes answered, want %s", c.port, c.from, r.sent-r.lost, r.sent, map[bool]string{true: "none", false: "all"}[c.cut])
		}
	}
	if up := probe(t, client, echoAddr, 50, time.Millisecond, 5*time.Second); up.lost != 0 {
		t.Errorf("cuts cleared: %d of %d lost", up.lost, up.sent)
	}
}

// newTestNet makes a network whose nodes are the names, with addresses
// <prefix>.<i+1>/24, removed at t's cleanup.
func newTestNet(t *testing.T, prefix string, names ...string) (*vswitch, map[string]*netns) {
	t.Helper()
	nw, err := newNetwork(prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nw.close)
	for _, name := range names {
		if _, err := nw.add(name); err != nil {
			t.Fatal(err)
		}
	}
	return nw.sw, nw.nodes
}
