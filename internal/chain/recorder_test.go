package chain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

// appended is one entry handed to a fakeAppender, its payload as JSON.
type appended struct {
	Source, Kind, Payload string
}

// fakeAppender keeps what it is given; err, when set, fails every Append.
type fakeAppender struct {
	mu      sync.Mutex
	entries []appended
	calls   int
	err     error
}

func (a *fakeAppender) Append(source, kind string, payload any) (Entry, error) {
	raw, err := json.Marshal(payload)
	if err != nil {
		return Entry{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls++
	if a.err != nil {
		return Entry{}, a.err
	}
	a.entries = append(a.entries, appended{source, kind, string(raw)})
	return Entry{Seq: uint64(len(a.entries))}, nil
}

func (a *fakeAppender) got() []appended {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]appended(nil), a.entries...)
}

func (a *fakeAppender) fail(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.err = err
}

// base is a window boundary for the default one-minute window.
var base = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// summaryJSON renders a summary payload as a Recorder writes it.
func summaryJSON(t *testing.T, ev SuppressedEvent) string {
	t.Helper()
	raw, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// TestRecorderWindows drives a Recorder through scripted events and
// flushes on a fake clock and compares what it appended.
func TestRecorderWindows(t *testing.T) {
	type op struct {
		at          time.Duration // from base
		flush       bool
		sender      string
		kind        string // "" means "mesh.peer.refused"
		reason      string // "" means "unknown_key"
		source      string // "" means "mesh"
		class       RecordClass
		wantChained bool
	}
	rec := func(at time.Duration, sender string, want bool) op {
		return op{at: at, sender: sender, wantChained: want}
	}
	flush := func(at time.Duration) op { return op{at: at, flush: true} }
	ev := func(i int) appended {
		return appended{"mesh", "mesh.peer.refused", fmt.Sprintf(`{"i":%d}`, i)}
	}
	sum := func(sender string, n uint64, from, to time.Duration) SuppressedEvent {
		return SuppressedEvent{Sender: sender, Kind: "mesh.peer.refused", Reason: "unknown_key", Suppressed: n,
			WindowStart: base.Add(from), WindowEnd: base.Add(to)}
	}
	type wantSum struct {
		source, kind string
		ev           SuppressedEvent
	}
	tests := []struct {
		name    string
		opts    RecorderOptions
		ops     []op
		want    []any // appended or wantSum
		wantErr bool
	}{
		{
			name: "first event of a key chained, the rest summed up lazily",
			ops: []op{
				rec(0, "a", true), rec(10*time.Second, "a", false), rec(20*time.Second, "a", false),
				rec(30*time.Second, "b", true), rec(61*time.Second, "c", true),
			},
			want: []any{ev(0), ev(3), wantSum{"mesh", "mesh.peer.refused.suppressed", sum("a", 2, 0, time.Minute)}, ev(4)},
		},
		{
			name: "flush inside the window does nothing, at its end sums up",
			ops:  []op{rec(0, "a", true), rec(time.Second, "a", false), flush(59 * time.Second), flush(time.Minute)},
			want: []any{ev(0), wantSum{"mesh", "mesh.peer.refused.suppressed", sum("a", 1, 0, time.Minute)}},
		},
		{
			name: "per-key budget of two",
			opts: RecorderOptions{PerKey: 2},
			ops: []op{
				rec(0, "a", true), rec(1, "a", true), rec(2, "a", false), rec(3, "a", false), rec(4, "a", false),
				flush(2 * time.Minute),
			},
			want: []any{ev(0), ev(1), wantSum{"mesh", "mesh.peer.refused.suppressed", sum("a", 3, 0, time.Minute)}},
		},
		{
			name: "kind and reason are part of the key; summaries in first-seen order from the first event's source",
			ops: []op{
				{sender: "a", reason: "bad_sig", wantChained: true},
				{sender: "a", kind: "ctl.refused", wantChained: true},
				{sender: "a", kind: "ctl.refused", source: "ctl2"},
				{sender: "a", reason: "bad_sig", source: "late"},
				flush(time.Minute),
			},
			want: []any{
				appended{"mesh", "mesh.peer.refused", `{"i":0}`},
				appended{"mesh", "ctl.refused", `{"i":1}`},
				wantSum{"mesh", "mesh.peer.refused.suppressed", SuppressedEvent{Sender: "a", Kind: "mesh.peer.refused", Reason: "bad_sig", Suppressed: 1, WindowStart: base, WindowEnd: base.Add(time.Minute)}},
				wantSum{"mesh", "ctl.refused.suppressed", SuppressedEvent{Sender: "a", Kind: "ctl.refused", Reason: "unknown_key", Suppressed: 1, WindowStart: base, WindowEnd: base.Add(time.Minute)}},
			},
		},
		{
			name: "keys beyond MaxKeys are counted under the overflow",
			opts: RecorderOptions{MaxKeys: 2},
			ops: []op{
				rec(0, "a", true), rec(0, "b", true),
				{sender: "c", source: "first-overflow"}, rec(0, "d", false), rec(0, "c", false), rec(0, "a", false),
				flush(time.Minute),
			},
			want: []any{
				ev(0), ev(1),
				wantSum{"mesh", "mesh.peer.refused.suppressed", sum("a", 1, 0, time.Minute)},
				wantSum{"first-overflow", OverflowKind, SuppressedEvent{Suppressed: 3, WindowStart: base, WindowEnd: base.Add(time.Minute), Overflow: true,
					Reasons: []OverflowReason{{Kind: "mesh.peer.refused", Reason: "unknown_key", Suppressed: 3}}}},
			},
		},
		{
			name: "each class has its own budget and overflow, counted by kind and reason",
			opts: RecorderOptions{MaxKeys: 1, MaxSourceKeys: 1, MaxSecurityKeys: 1},
			ops: []op{
				{sender: "ip1", class: ClassSource, wantChained: true},
				{sender: "ip2", class: ClassSource, source: "flood"},
				{sender: "ip3", class: ClassSource, reason: "bad_cert"},
				{sender: "ip4", class: ClassSource},
				{sender: "p", wantChained: true},
				{sender: "ip5", class: ClassSecurity, reason: "key_differs", wantChained: true},
				{sender: "ip6", class: ClassSecurity, reason: "key_differs", source: "sec"},
				{sender: "q"},
				flush(time.Minute),
			},
			want: []any{
				ev(0), ev(4), ev(5),
				wantSum{"mesh", OverflowKind, SuppressedEvent{Suppressed: 1, WindowStart: base, WindowEnd: base.Add(time.Minute), Overflow: true,
					Reasons: []OverflowReason{{Kind: "mesh.peer.refused", Reason: "unknown_key", Suppressed: 1}}}},
				wantSum{"flood", OverflowKind, SuppressedEvent{Class: ClassSource, Suppressed: 3, WindowStart: base, WindowEnd: base.Add(time.Minute), Overflow: true,
					Reasons: []OverflowReason{{Kind: "mesh.peer.refused", Reason: "unknown_key", Suppressed: 2}, {Kind: "mesh.peer.refused", Reason: "bad_cert", Suppressed: 1}}}},
				wantSum{"sec", OverflowKind, SuppressedEvent{Class: ClassSecurity, Suppressed: 1, WindowStart: base, WindowEnd: base.Add(time.Minute), Overflow: true,
					Reasons: []OverflowReason{{Kind: "mesh.peer.refused", Reason: "key_differs", Suppressed: 1}}}},
			},
		},
		{
			name: "windows are aligned to multiples of Window",
			ops:  []op{rec(50*time.Second, "a", true), rec(55*time.Second, "a", false), rec(61*time.Second, "a", true)},
			want: []any{ev(0), wantSum{"mesh", "mesh.peer.refused.suppressed", sum("a", 1, 0, time.Minute)}, ev(2)},
		},
		{
			name: "a clock stepping back closes the window",
			ops:  []op{rec(70*time.Second, "a", true), rec(75*time.Second, "a", false), rec(10*time.Second, "a", true)},
			want: []any{ev(0), wantSum{"mesh", "mesh.peer.refused.suppressed", sum("a", 1, time.Minute, 2*time.Minute)}, ev(2)},
		},
		{
			name: "no summary when nothing was suppressed",
			ops:  []op{rec(0, "a", true), rec(0, "b", true), flush(2 * time.Minute), flush(3 * time.Minute)},
			want: []any{ev(0), ev(1)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			app := &fakeAppender{}
			var now time.Time
			opts := tt.opts
			opts.Now = func() time.Time { return now }
			opts.Logger = zaptest.NewLogger(t)
			r, err := NewRecorder(app, opts)
			if err != nil {
				t.Fatal(err)
			}
			for i, o := range tt.ops {
				now = base.Add(o.at)
				if o.flush {
					if err := r.Flush(now); err != nil {
						t.Fatalf("op %d: Flush = %v", i, err)
					}
					continue
				}
				key := RecordKey{Class: o.class, Sender: o.sender, Kind: cmpOr(o.kind, "mesh.peer.refused"), Reason: cmpOr(o.reason, "unknown_key")}
				chained, err := r.Record(key, cmpOr(o.source, "mesh"), map[string]int{"i": i})
				if err != nil || chained != o.wantChained {
					t.Errorf("op %d: Record = %v, %v; want %v, nil", i, chained, err, o.wantChained)
				}
			}
			var want []appended
			for _, w := range tt.want {
				switch w := w.(type) {
				case appended:
					want = append(want, w)
				case wantSum:
					want = append(want, appended{w.source, w.kind, summaryJSON(t, w.ev)})
				}
			}
			if diff := cmp.Diff(want, app.got()); diff != "" {
				t.Errorf("appended (-want +got):\n%s", diff)
			}
		})
	}
}

func cmpOr(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// TestRecorderFlood floods a real chain with 100,000 events from one key
// and from 10,000 keys: the window leaves exactly the stated bound of
// entries at most, the suppressed counts add up to the flood, an honest
// append in the middle lands, and the file verifies.
func TestRecorderFlood(t *testing.T) {
	const events = 100_000
	tests := []struct {
		name        string
		keys        int
		wantEntries int // appended by the recorder for the window
	}{
		{"one key", 1, 2}, // its first event and its summary
		{"10,000 keys", 10_000, DefaultRecordMaxKeys*(DefaultRecordsPerKey+1) + 1}, // the bound, reached
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Real files, but no fsync: this test is about counts, and 513
			// fsyncs would dominate the package's test time.
			c, path := openNew(t, Options{OpenFile: openNoSync})
			clk := newManualClock()
			reg := prometheus.NewRegistry()
			r, err := NewRecorder(c, RecorderOptions{Now: clk.Now, Registerer: reg, Logger: zaptest.NewLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			senders := make([]string, tt.keys)
			for i := range senders {
				senders[i] = fmt.Sprintf("peer-%05d", i)
			}
			chained := 0
			var honest Entry
			for i := range events {
				key := RecordKey{Sender: senders[i%tt.keys], Kind: "mesh.peer.refused", Reason: "unknown_key"}
				ok, err := r.Record(key, "mesh", floodEvent{I: i})
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					chained++
				}
				if i == events/2 {
					if honest, err = c.Append("table", "role.add", nil); err != nil {
						t.Fatalf("honest Append during the flood = %v", err)
					}
				}
				if i%997 == 0 {
					clk.Advance(time.Millisecond) // the flood takes time, within one window
				}
			}
			if limit := DefaultRecordMaxKeys * DefaultRecordsPerKey; chained > limit || int(c.Entries())-2 != chained {
				t.Errorf("%d events chained during the window (chain has %d entries), want at most %d", chained, c.Entries(), limit)
			}

			clk.Advance(time.Minute)
			if err := r.Flush(clk.Now()); err != nil {
				t.Fatal(err)
			}
			if got := int(c.Entries()) - 2; got != tt.wantEntries {
				t.Errorf("recorder appended %d entries for the window, want %d (bound %d)", got, tt.wantEntries, DefaultRecordMaxKeys*(DefaultRecordsPerKey+1)+1)
			}

			res, err := VerifyFile(path, pubOf(testKey(1)))
			if err != nil {
				t.Fatal(err)
			}
			var direct, suppressed uint64
			honestSeen := false
			for _, line := range splitLines(readFile(t, path))[1:] {
				e := mustParse(t, line)
				switch {
				case e.Kind == "mesh.peer.refused":
					direct++
				case e.Kind == "mesh.peer.refused.suppressed" || e.Kind == OverflowKind:
					var ev SuppressedEvent
					if err := json.Unmarshal(e.Payload, &ev); err != nil {
						t.Fatal(err)
					}
					if !ev.WindowStart.Equal(base) || !ev.WindowEnd.Equal(base.Add(time.Minute)) {
						t.Errorf("summary window %v to %v, want %v to %v", ev.WindowStart, ev.WindowEnd, base, base.Add(time.Minute))
					}
					suppressed += ev.Suppressed
				case e.Hash == honest.Hash:
					honestSeen = true
				default:
					t.Errorf("unexpected entry %s/%s", e.Source, e.Kind)
				}
			}
			if direct != uint64(chained) || direct+suppressed != events {
				t.Errorf("chain holds %d events and summaries of %d; want %d chained, %d in all", direct, suppressed, chained, events)
			}
			if !honestSeen || res.Entries != c.Entries() {
				t.Errorf("honest entry in the file: %v; file has %d entries, chain %d", honestSeen, res.Entries, c.Entries())
			}
			if got := testutil.ToFloat64(r.m.suppressed.WithLabelValues("mesh.peer.refused")); got != float64(suppressed) {
				t.Errorf("nodeld_chain_records_suppressed_total = %v, want %d", got, suppressed)
			}
		})
	}
}

// noSyncFile is a chain file whose Sync does nothing.
type noSyncFile struct{ *os.File }

func (noSyncFile) Sync() error { return nil }

func openNoSync(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return noSyncFile{f}, nil
}

// gateAppender blocks every Append until release is closed, after saying
// so on entered.
type gateAppender struct {
	entered chan struct{}
	release chan struct{}
}

func (a *gateAppender) Append(source, kind string, payload any) (Entry, error) {
	a.entered <- struct{}{}
	<-a.release
	return Entry{}, nil
}

// TestRecorderNotHeldAcrossAppend: while an Append of the recorder is
// stuck on the disk, suppressed events and flushes still return.
func TestRecorderNotHeldAcrossAppend(t *testing.T) {
	app := &gateAppender{entered: make(chan struct{}), release: make(chan struct{})}
	r, err := NewRecorder(app, RecorderOptions{Now: func() time.Time { return base }})
	if err != nil {
		t.Fatal(err)
	}
	key := RecordKey{Sender: "a", Kind: "mesh.peer.refused", Reason: "unknown_key"}
	first := make(chan error, 1)
	go func() {
		_, err := r.Record(key, "mesh", nil)
		first <- err
	}()
	<-app.entered

	done := make(chan error, 1)
	go func() {
		chained, err := r.Record(key, "mesh", nil)
		if err == nil && chained {
			err = errors.New("second event chained")
		}
		if err == nil {
			err = r.Flush(base.Add(time.Second))
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Record of a suppressed event waited for another event's Append")
	}
	close(app.release)
	if err := <-first; err != nil {
		t.Error(err)
	}
}

// TestRecorderAppendErrors: an event whose Append fails returns the
// error; summaries that cannot be chained are returned by Flush (stopping
// at the first failure) and logged by a Record that closed their window.
func TestRecorderAppendErrors(t *testing.T) {
	app := &fakeAppender{}
	now := base
	core, logs := observer.New(zap.DebugLevel)
	r, err := NewRecorder(app, RecorderOptions{MaxKeys: 1, Now: func() time.Time { return now }, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	a := RecordKey{Sender: "a", Kind: "mesh.peer.refused", Reason: "unknown_key"}
	b := RecordKey{Sender: "b", Kind: "mesh.peer.refused", Reason: "unknown_key"}
	flood := func() {
		for _, k := range []RecordKey{a, a, a, b, b} {
			if _, err := r.Record(k, "mesh", nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	flood()
	app.fail(fmt.Errorf("append: %w", ErrWriteFailed))
	calls := app.calls
	err = r.Flush(base.Add(time.Minute))
	if !errors.Is(err, ErrWriteFailed) || !strings.Contains(err.Error(), "2 of 2 not chained, counting 4 records") {
		t.Errorf("Flush = %v, want ErrWriteFailed naming 2 summaries of 4 records", err)
	}
	if app.calls != calls+1 {
		t.Errorf("Flush made %d Append calls, want 1: it stops at the first failure", app.calls-calls)
	}

	app.fail(nil)
	now = base.Add(time.Minute)
	flood()
	app.fail(syscall.ENOSPC)
	now = base.Add(2 * time.Minute)
	chained, err := r.Record(a, "mesh", nil)
	if chained || !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("Record with a failing chain = %v, %v; want false, ENOSPC", chained, err)
	}
	if n := logs.FilterMessage("suppressed records summary not chained").Len(); n != 1 {
		t.Errorf("logged %d lost summaries, want 1", n)
	}
}

func TestRecordInvalid(t *testing.T) {
	tests := []struct {
		name   string
		key    RecordKey
		source string
	}{
		{"bad source", RecordKey{Kind: "mesh.peer.refused"}, "me sh"},
		{"empty kind", RecordKey{}, "mesh"},
		{"kind too long for its summary", RecordKey{Kind: strings.Repeat("k", MaxIdentBytes-len(SuppressedSuffix)+1)}, "mesh"},
		{"reserved kind", RecordKey{Kind: "chain.x"}, "mesh"},
		{"long sender", RecordKey{Kind: "k", Sender: strings.Repeat("s", MaxRecordKeyBytes+1)}, "mesh"},
		{"long reason", RecordKey{Kind: "k", Reason: strings.Repeat("r", MaxRecordKeyBytes+1)}, "mesh"},
		{"unknown class", RecordKey{Kind: "k", Class: numClasses}, "mesh"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			app := &fakeAppender{}
			r, err := NewRecorder(app, RecorderOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if chained, err := r.Record(tt.key, tt.source, nil); chained || !errors.Is(err, ErrInvalidEntry) {
				t.Errorf("Record = %v, %v; want false, ErrInvalidEntry", chained, err)
			}
			if err := r.Flush(time.Now().Add(time.Hour)); err != nil || len(app.got()) != 0 {
				t.Errorf("an invalid event was counted or appended: %v %v", err, app.got())
			}
		})
	}
	longest := RecordKey{Kind: strings.Repeat("k", MaxIdentBytes-len(SuppressedSuffix))}
	r, err := NewRecorder(&fakeAppender{}, RecorderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Record(longest, "mesh", nil); err != nil {
		t.Errorf("Record with the longest kind = %v", err)
	}
}

func TestNewRecorderRefuses(t *testing.T) {
	_, err := NewRecorder(nil, RecorderOptions{Window: -1, PerKey: -1, MaxKeys: -1, MaxPeriod: -1})
	if err == nil {
		t.Fatal("NewRecorder accepted a nil appender and negative options")
	}
	for _, want := range []string{"appender is nil", "window", "per-key", "max keys", "max period"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("NewRecorder error %q does not report %q", err, want)
		}
	}
	reg := prometheus.NewRegistry()
	if _, err := NewRecorder(&fakeAppender{}, RecorderOptions{Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := NewRecorder(&fakeAppender{}, RecorderOptions{Registerer: reg}); err == nil {
		t.Error("a second Recorder registered on the same registry")
	}
}

// TestRecorderRun: Run sums up a flood followed by silence within a
// Window, closes the open window when ctx is done, and returns nil.
func TestRecorderRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		app := &fakeAppender{}
		r, err := NewRecorder(app, RecorderOptions{Logger: zaptest.NewLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()

		start := time.Now()
		key := RecordKey{Sender: "a", Kind: "mesh.peer.refused", Reason: "unknown_key"}
		for range 5 {
			if _, err := r.Record(key, "mesh", nil); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(2 * time.Minute) // silence; fake time inside the bubble
		synctest.Wait()
		want := []appended{
			{"mesh", "mesh.peer.refused", "null"},
			{"mesh", "mesh.peer.refused.suppressed", summaryJSON(t, SuppressedEvent{
				Sender: "a", Kind: "mesh.peer.refused", Reason: "unknown_key", Suppressed: 4,
				WindowStart: start.Truncate(time.Minute).UTC(), WindowEnd: start.Truncate(time.Minute).Add(time.Minute).UTC(),
			})},
		}
		if diff := cmp.Diff(want, app.got()); diff != "" {
			t.Errorf("after a silent window (-want +got):\n%s", diff)
		}

		for range 3 {
			if _, err := r.Record(key, "mesh", nil); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(10 * time.Second)
		stop := time.Now()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
		got := app.got()
		if len(got) != 4 {
			t.Fatalf("appended %d entries, want 4: %v", len(got), got)
		}
		wantLast := appended{"mesh", "mesh.peer.refused.suppressed", summaryJSON(t, SuppressedEvent{
			Sender: "a", Kind: "mesh.peer.refused", Reason: "unknown_key", Suppressed: 2,
			WindowStart: stop.Truncate(time.Minute).UTC(), WindowEnd: stop.UTC(),
		})}
		if diff := cmp.Diff(wantLast, got[3]); diff != "" {
			t.Errorf("summary at shutdown (-want +got):\n%s", diff)
		}
	})
}

// floodEvent is the payload of a flood event.
type floodEvent struct {
	I int `json:"i"`
}

// stampAppender keeps the time of every Append on the recorder's clock.
type stampAppender struct {
	now     func() time.Time
	stamps  []time.Time
	entries []appended
}

func (a *stampAppender) Append(source, kind string, payload any) (Entry, error) {
	raw, err := json.Marshal(payload)
	if err != nil {
		return Entry{}, err
	}
	a.stamps = append(a.stamps, a.now())
	a.entries = append(a.entries, appended{source, kind, string(raw)})
	return Entry{Seq: uint64(len(a.entries))}, nil
}

// suppressedIn sums the summaries of kind among entries.
func suppressedIn(t *testing.T, entries []appended) (chained, suppressed uint64, periods []SuppressedEvent) {
	t.Helper()
	for _, e := range entries {
		if !strings.HasSuffix(e.Kind, SuppressedSuffix) {
			chained++
			continue
		}
		var ev SuppressedEvent
		if err := json.Unmarshal([]byte(e.Payload), &ev); err != nil {
			t.Fatal(err)
		}
		suppressed += ev.Suppressed
		periods = append(periods, ev)
	}
	return chained, suppressed, periods
}

// TestRecorderBackoff: a key repeating every 20 s (an honest peer whose
// advertisements are refused, forever) backs off to one period an hour:
// after the ramp it adds two entries an hour, every event is accounted
// for, and a silent period forgets the key.
func TestRecorderBackoff(t *testing.T) {
	now := base
	app := &stampAppender{now: func() time.Time { return now }}
	r, err := NewRecorder(app, RecorderOptions{Now: func() time.Time { return now }, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	key := RecordKey{Sender: "n-b", Kind: "infer.advert.refused", Reason: "not_allowed"}
	const hours = 8
	events := 0
	for ; now.Before(base.Add(hours * time.Hour)); now = now.Add(20 * time.Second) {
		if _, err := r.Record(key, "table", nil); err != nil {
			t.Fatal(err)
		}
		events++
	}
	now = now.Add(time.Hour) // past the end of the last period
	if err := r.Flush(now); err != nil {
		t.Fatal(err)
	}
	chained, suppressed, periods := suppressedIn(t, app.entries)
	if chained+suppressed != uint64(events) {
		t.Errorf("%d chained and %d suppressed, want %d events in all", chained, suppressed, events)
	}
	var got []time.Duration
	for _, p := range periods {
		got = append(got, p.WindowEnd.Sub(p.WindowStart))
		if !p.WindowStart.Equal(p.WindowStart.Truncate(time.Minute)) {
			t.Errorf("period starting %v is not aligned to the window", p.WindowStart)
		}
	}
	m := time.Minute
	want := []time.Duration{m, m, 2 * m, 4 * m, 8 * m, 16 * m, 32 * m} // the ramp: 64 minutes
	for range (hours*60 - 64 + 59) / 60 {
		want = append(want, time.Hour)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("period lengths (-want +got):\n%s", diff)
	}
	// Steady growth: two entries in each hour after the ramp.
	for h := 2; h < hours; h++ {
		from, to := base.Add(time.Duration(h)*time.Hour), base.Add(time.Duration(h+1)*time.Hour)
		n := 0
		for _, s := range app.stamps {
			if !s.Before(from) && s.Before(to) {
				n++
			}
		}
		if n > 2 {
			t.Errorf("hour %d: %d entries appended, want at most 2", h, n)
		}
	}

	// Silence for longer than the key's next period forgets it: it starts
	// again at one Window.
	before := len(app.entries)
	now = now.Add(3 * time.Hour)
	for range 3 {
		if _, err := r.Record(key, "table", nil); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Truncate(time.Minute).Add(time.Minute)
	if err := r.Flush(now); err != nil {
		t.Fatal(err)
	}
	_, _, periods = suppressedIn(t, app.entries[before:])
	if len(periods) != 1 || periods[0].WindowEnd.Sub(periods[0].WindowStart) != time.Minute || periods[0].Suppressed != 2 {
		t.Errorf("after silence: summaries %+v, want one of 2 events over one minute", periods)
	}
}

// TestRecorderBackoffOff: a MaxPeriod below two Windows keeps every
// period one Window long.
func TestRecorderBackoffOff(t *testing.T) {
	now := base
	app := &stampAppender{now: func() time.Time { return now }}
	r, err := NewRecorder(app, RecorderOptions{MaxPeriod: time.Minute + time.Second, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	key := RecordKey{Sender: "n-b", Kind: "infer.advert.refused", Reason: "not_allowed"}
	for ; now.Before(base.Add(time.Hour)); now = now.Add(20 * time.Second) {
		if _, err := r.Record(key, "table", nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Flush(now); err != nil {
		t.Fatal(err)
	}
	_, _, periods := suppressedIn(t, app.entries)
	if len(periods) != 60 {
		t.Errorf("%d summaries in an hour, want 60", len(periods))
	}
	for _, p := range periods {
		if d := p.WindowEnd.Sub(p.WindowStart); d != time.Minute {
			t.Errorf("period of %v, want one minute", d)
		}
	}
}

// TestRecorderBoundWithBackoff drives random events of more keys than
// MaxKeys over many windows, some keys repeating, some not: in every
// Window the recorder appends at most MaxKeys*(PerKey+1)+1 entries, and
// every event is chained or counted in exactly one summary.
func TestRecorderBoundWithBackoff(t *testing.T) {
	for _, perKey := range []int{1, 3} {
		t.Run(fmt.Sprintf("per key %d", perKey), func(t *testing.T) {
			const maxKeys = 4
			now := base
			app := &stampAppender{now: func() time.Time { return now }}
			r, err := NewRecorder(app, RecorderOptions{PerKey: perKey, MaxKeys: maxKeys, MaxPeriod: 8 * time.Minute,
				Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			// A fixed linear congruential sequence: the same run every time.
			seed := uint64(1)
			rnd := func(n int) int {
				seed = seed*6364136223846793005 + 1442695040888963407
				return int(seed>>33) % n
			}
			events := 0
			for range 20_000 {
				now = now.Add(time.Duration(rnd(4000)) * time.Millisecond)
				if rnd(50) == 0 {
					if err := r.Flush(now); err != nil {
						t.Fatal(err)
					}
					continue
				}
				// Keys 0-2 repeat often; keys 3-9 now and then.
				k := rnd(3)
				if rnd(4) == 0 {
					k = 3 + rnd(7)
				}
				key := RecordKey{Sender: fmt.Sprintf("peer-%d", k), Kind: "mesh.peer.refused", Reason: "unknown_key"}
				if _, err := r.Record(key, "mesh", nil); err != nil {
					t.Fatal(err)
				}
				events++
			}
			now = now.Add(time.Hour)
			if err := r.Flush(now); err != nil {
				t.Fatal(err)
			}
			chained, suppressed, _ := suppressedIn(t, app.entries)
			if chained+suppressed != uint64(events) {
				t.Errorf("%d chained and %d suppressed, want %d events in all", chained, suppressed, events)
			}
			perWindow := map[time.Time]int{}
			for _, s := range app.stamps {
				perWindow[s.Truncate(time.Minute)]++
			}
			bound := maxKeys*(perKey+1) + 1
			for w, n := range perWindow {
				if n > bound {
					t.Errorf("window %v: %d entries appended, bound %d", w, n, bound)
				}
			}
			if len(r.index) != 0 || len(r.keys) != 0 || !r.next.IsZero() {
				t.Errorf("after an hour of silence the recorder still tracks %d keys", len(r.keys))
			}
		})
	}
}
