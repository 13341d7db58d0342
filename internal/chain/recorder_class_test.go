package chain

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestRecorderSourceFloodKeepsOtherClasses: 10,000 unauthenticated
// sources, each refused twice, fill their class's budget; a peer's and a
// security event recorded after them are still chained one by one, the
// overflow is summed up per class with its reasons, logged twice (its
// first event and its summary), counted in the metric, and the window
// stays within the bound of all three classes.
func TestRecorderSourceFloodKeepsOtherClasses(t *testing.T) {
	c, path := openNew(t, Options{OpenFile: openNoSync})
	clk := newManualClock()
	reg := prometheus.NewRegistry()
	core, logs := observer.New(zap.DebugLevel)
	r, err := NewRecorder(c, RecorderOptions{Now: clk.Now, Registerer: reg, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	const sources = 10_000
	for round := range 2 {
		for i := range sources {
			key := RecordKey{Class: ClassSource, Sender: fmt.Sprintf("10.0.%d.%d", i/256, i%256), Kind: "mesh.peer.refused", Reason: "key not admitted"}
			if _, err := r.Record(key, "mesh", floodEvent{I: round*sources + i}); err != nil {
				t.Fatal(err)
			}
		}
	}
	security := RecordKey{Class: ClassSecurity, Sender: "127.0.0.9", Kind: "mesh.peer.refused", Reason: "key_differs"}
	peer := RecordKey{Sender: "n-peer", Kind: "ctl.refused", Reason: "unknown_instance"}
	for _, k := range []RecordKey{security, peer} {
		if chained, err := r.Record(k, "mesh", nil); !chained || err != nil {
			t.Errorf("Record(%v) after the flood = %v, %v; want chained", k, chained, err)
		}
	}
	if n := logs.FilterMessage("chain records overflow, further events of the class are counted until the window ends").Len(); n != 1 {
		t.Errorf("logged the overflow's first event %d times, want once per window", n)
	}
	clk.Advance(time.Minute)
	if err := r.Flush(clk.Now()); err != nil {
		t.Fatal(err)
	}
	summed := logs.FilterMessage("chain records overflow summed up")
	if summed.Len() != 1 || summed.All()[0].ContextMap()["class"] != "source" {
		t.Errorf("overflow summaries logged: %v, want one of class source", summed.All())
	}
	if got := testutil.ToFloat64(r.m.overflow.WithLabelValues("source")); got != 2*(sources-DefaultRecordMaxSourceKeys) {
		t.Errorf("nodeld_chain_records_overflow_total{class=source} = %v, want %d", got, 2*(sources-DefaultRecordMaxSourceKeys))
	}
	if got := testutil.ToFloat64(r.m.overflow.WithLabelValues("peer")); got != 0 {
		t.Errorf("nodeld_chain_records_overflow_total{class=peer} = %v, want 0", got)
	}

	if _, err := VerifyFile(path, pubOf(testKey(1))); err != nil {
		t.Fatal(err)
	}
	var chained, counted int
	var overflow []SuppressedEvent
	kinds := map[string]int{}
	for _, line := range splitLines(readFile(t, path))[1:] {
		e := mustParse(t, line)
		kinds[e.Kind]++
		switch e.Kind {
		case OverflowKind, "mesh.peer.refused.suppressed":
			var ev SuppressedEvent
			if err := json.Unmarshal(e.Payload, &ev); err != nil {
				t.Fatal(err)
			}
			counted += int(ev.Suppressed)
			if ev.Overflow {
				overflow = append(overflow, ev)
			}
		default:
			chained++
		}
	}
	if chained+counted != 2*sources+2 {
		t.Errorf("%d events chained and %d counted, want %d in all", chained, counted, 2*sources+2)
	}
	want := []SuppressedEvent{{Class: ClassSource, Suppressed: 2 * (sources - DefaultRecordMaxSourceKeys), Overflow: true,
		WindowStart: base, WindowEnd: base.Add(time.Minute),
		Reasons: []OverflowReason{{Kind: "mesh.peer.refused", Reason: "key not admitted", Suppressed: 2 * (sources - DefaultRecordMaxSourceKeys)}}}}
	if diff := cmp.Diff(want, overflow); diff != "" {
		t.Errorf("overflow summaries (-want +got):\n%s", diff)
	}
	// 64 sources chained once and summed up once, the two others, the
	// overflow.
	if n := len(splitLines(readFile(t, path))) - 1; n != 2*DefaultRecordMaxSourceKeys+2+1 {
		t.Errorf("the window left %d entries, want %d", n, 2*DefaultRecordMaxSourceKeys+3)
	}
}

// TestRecorderBoundAllClasses: floods of every class in one window leave
// at most the documented bound, (256+64+64)*(PerKey+1)+3 entries.
func TestRecorderBoundAllClasses(t *testing.T) {
	app := &fakeAppender{}
	now := base
	r, err := NewRecorder(app, RecorderOptions{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	events := 0
	for c := range numClasses {
		for i := range 1000 {
			for range 3 {
				if _, err := r.Record(RecordKey{Class: c, Sender: fmt.Sprint(i), Kind: "k", Reason: "r"}, "mesh", nil); err != nil {
					t.Fatal(err)
				}
				events++
			}
		}
	}
	now = now.Add(time.Minute)
	if err := r.Flush(now); err != nil {
		t.Fatal(err)
	}
	const bound = (DefaultRecordMaxKeys+DefaultRecordMaxSourceKeys+DefaultRecordMaxSecurityKeys)*(DefaultRecordsPerKey+1) + 3
	got := app.got()
	if len(got) != bound {
		t.Errorf("%d entries for the window, want the bound %d reached", len(got), bound)
	}
	chained, suppressed, _ := suppressedIn(t, got)
	if chained+suppressed != uint64(events) {
		t.Errorf("%d chained and %d counted, want %d", chained, suppressed, events)
	}
}

// TestOverflowReasonsBounded: an overflow counts at most
// MaxOverflowReasons pairs of kind and reason apart; the rest are in its
// total.
func TestOverflowReasonsBounded(t *testing.T) {
	app := &fakeAppender{}
	r, err := NewRecorder(app, RecorderOptions{MaxKeys: 1, Now: func() time.Time { return base }})
	if err != nil {
		t.Fatal(err)
	}
	const reasons = MaxOverflowReasons + 8
	for i := range reasons + 1 {
		if _, err := r.Record(RecordKey{Sender: fmt.Sprint(i), Kind: "k", Reason: fmt.Sprint("r", i)}, "mesh", nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Flush(base.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	_, _, periods := suppressedIn(t, app.got())
	if len(periods) != 1 || periods[0].Suppressed != reasons || len(periods[0].Reasons) != MaxOverflowReasons {
		t.Fatalf("overflow summaries %+v, want one of %d events with %d reasons", periods, reasons, MaxOverflowReasons)
	}
}

func TestRecordClassText(t *testing.T) {
	for c := range numClasses {
		raw, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		var back RecordClass
		if err := json.Unmarshal(raw, &back); err != nil || back != c {
			t.Errorf("class %v: marshalled %s, read back %v, %v", c, raw, back, err)
		}
	}
	var c RecordClass
	if err := json.Unmarshal([]byte(`"admin"`), &c); err == nil {
		t.Error("an unknown class name was accepted")
	}
	if _, err := json.Marshal(numClasses); err == nil {
		t.Error("a class out of range was marshalled")
	}
}
