package ctlraft

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/plane"
)

// BenchmarkSaveCommit is one Save on the leader of a placement's change
// (one placement record of about 500 bytes, as plane's delta puts it)
// until it is committed by a majority and applied: voters=1 is a single
// controller (its BoltDB log fsync), voters=3 three controllers over
// real meshes on 127.0.0.1 (a round trip to a follower and both fsyncs).
func BenchmarkSaveCommit(b *testing.B) {
	data := json.RawMessage(`{"decision_id":"` + strings.Repeat("a", 64) + `","node":"n-afd9d6906cdb1637","variant":"cpu",` +
		`"instance":"svc7-1.0.0-0000020f","placed_at":"2026-03-01T12:00:00Z","life":"placed","host_state":"running",` +
		`"order":{"name":"svc-527","package_dir":"/pkg/svc7","start":true},"attempts":1,"was_running":true,"reserved":[1073741824,0]}`)
	for _, voters := range []int{1, 3} {
		b.Run(fmt.Sprintf("voters=%d", voters), func(b *testing.B) {
			h := newHarness(b, voters, 1)
			h.start()
			lead := h.waitLeader()
			ctx := context.Background()
			if err := lead.store.Save(ctx, plane.StateChange{Packages: []plane.StateEntry{rec(pkey(1), "", 1)},
				Placements: []plane.StateEntry{{Key: dkey(0), Ref: pkey(1), Data: data}}}); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				ch := plane.StateChange{Placements: []plane.StateEntry{{Key: dkey(i % 1000), Ref: pkey(1), Data: data}}}
				if err := lead.store.Save(ctx, ch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFailover kills the leader of three controllers (as kill -9:
// its socket first) b.N times and reports the time to a new leader that
// leads (raft's election, the Barrier, the rebuild from the replica and
// a first tick: it places from then): median and max. The killed one is
// restarted and caught up, untimed, before the next kill. Run it with
// -benchtime 20x.
func BenchmarkFailover(b *testing.B) {
	h := newHarness(b, 3, 3)
	h.start()
	h.waitLeader()
	h.place("warm")
	var took []time.Duration
	b.ResetTimer()
	for i := range b.N {
		lead := h.waitLeader()
		killed := time.Now()
		lead.kill()
		h.waitLeader()
		took = append(took, time.Since(killed))
		b.StopTimer()
		lead.restart()
		want := h.place(fmt.Sprintf("p%d", i))
		waitFor(b, lead.Name+" to catch up", func() bool { return lead.ids()[want] })
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(took[len(took)/2].Seconds(), "median-s")
	b.ReportMetric(took[len(took)-1].Seconds(), "max-s")
}

// BenchmarkSoloStart is a single controller's start read (New: the
// newest snapshot and the log after it, solo.go) with placements in its
// state: all of them in a snapshot and 1,000 single-placement deltas in
// the log after it, as a busy controller's state is between snapshots.
func BenchmarkSoloStart(b *testing.B) {
	data := func(i int) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`{"decision_id":"%064x","node":"n-afd9d6906cdb1637","variant":"cpu","instance":"svc-%08x",`+
			`"placed_at":"2026-03-01T12:00:00Z","life":"placed","order":{"name":"svc-%d","package_dir":"/pkg/svc7","start":true},`+
			`"attempts":1,"reserved":[1073741824,0]}`, i, i, i))
	}
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("placements=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			so := mustSoloTB(b, dir, nil)
			so.run()
			all := plane.StateChange{Reset: true, Packages: []plane.StateEntry{rec(pkey(1), "", 1)}}
			for i := range n {
				all.Placements = append(all.Placements, plane.StateEntry{Key: dkey(i), Ref: pkey(1), Data: data(i)})
			}
			so.save(all)
			if err := so.s.r.Load().Snapshot().Error(); err != nil {
				b.Fatal(err)
			}
			for i := range 1000 {
				so.save(plane.StateChange{Placements: []plane.StateEntry{{Key: dkey(i), Ref: pkey(1), Data: data(i + n)}}})
			}
			so.stop()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				s := mustSoloTB(b, dir, nil)
				b.StopTimer()
				if st, _ := s.s.Load(context.Background()); len(st.Placements) != n {
					b.Fatalf("%d placements read, want %d", len(st.Placements), n)
				}
				b.StartTimer()
			}
		})
	}
}
