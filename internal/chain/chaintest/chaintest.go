package chaintest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/chain"
)

// Start is where a Recorded's clock starts: a window boundary of the
// default one-minute window (and of an hour).
var Start = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// Recorded is a real chain with a chain.Recorder on it, on a manual clock.
type Recorded struct {
	// Chain is the open chain; a test appends honest entries to it
	// directly.
	Chain *chain.Chain
	// Recorder is the recorder; Record counts what goes through it.
	Recorder *chain.Recorder
	// Path is the chain file.
	Path string

	pub ed25519.PublicKey

	// mu guards now, step and events.
	mu     sync.Mutex
	now    time.Time
	step   time.Duration
	events map[string]int
}

// New opens a chain in a temporary directory of tb and a Recorder on it
// with opts (its Now is replaced by the manual clock, which starts at
// Start). The chain is closed when the test ends.
func New(tb testing.TB, opts chain.RecorderOptions) *Recorded {
	tb.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	r := &Recorded{Path: filepath.Join(tb.TempDir(), "chain.jsonl"), pub: pub, now: Start, events: map[string]int{}}
	ch, _, err := chain.Open(r.Path, key, chain.Options{Now: r.Now})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = ch.Close() })
	opts.Now = r.Now
	rec, err := chain.NewRecorder(ch, opts)
	if err != nil {
		tb.Fatal(err)
	}
	r.Chain, r.Recorder = ch, rec
	return r
}

// Now is the manual clock of the chain and the recorder.
func (r *Recorded) Now() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.now
}

// Advance moves the clock by d.
func (r *Recorded) Advance(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now = r.now.Add(d)
}

// SetStep makes each later Record move the clock by d once it returns, as
// if the events came d apart; 0 stops that.
func (r *Recorded) SetStep(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.step = d
}

// Record is Recorder.Record, counting the event under key.Kind once it
// has been chained or counted.
func (r *Recorded) Record(key chain.RecordKey, source string, payload any) (bool, error) {
	chained, err := r.Recorder.Record(key, source, payload)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events[key.Kind]++
	r.now = r.now.Add(r.step)
	return chained, err
}

// Events returns how many events of kind Record has taken.
func (r *Recorded) Events(kind string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.events[kind]
}

// Flush flushes the recorder at the clock's time.
func (r *Recorded) Flush(tb testing.TB) {
	tb.Helper()
	if err := r.Recorder.Flush(r.Now()); err != nil {
		tb.Fatal(err)
	}
}

// Entries verifies the chain file and returns its entries, the genesis
// included.
func (r *Recorded) Entries(tb testing.TB) []chain.Entry {
	tb.Helper()
	if _, err := chain.VerifyFile(r.Path, r.pub); err != nil {
		tb.Fatalf("chain does not verify: %v", err)
	}
	data, err := os.ReadFile(r.Path)
	if err != nil {
		tb.Fatal(err)
	}
	var out []chain.Entry
	for _, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		var e chain.Entry
		if err := json.Unmarshal(line, &e); err != nil {
			tb.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// Tally is what a chain holds of one kind of event.
type Tally struct {
	// Chained is the number of entries of the kind.
	Chained int
	// Summaries is the number of summary entries of the kind, and
	// Suppressed the events they count.
	Summaries  int
	Suppressed uint64
	// ByKey sums the summaries' counts by key.
	ByKey map[chain.RecordKey]uint64
}

// Entries is the number of entries of the kind and its summaries.
func (t Tally) Entries() int { return t.Chained + t.Summaries }

// Events is the number of events accounted for: chained or counted.
func (t Tally) Events() uint64 { return uint64(t.Chained) + t.Suppressed }

// Count counts the entries of kind and of its summaries among entries,
// and the events those summaries count.
func Count(tb testing.TB, entries []chain.Entry, kind string) Tally {
	tb.Helper()
	t := Tally{ByKey: map[chain.RecordKey]uint64{}}
	for _, e := range entries {
		switch e.Kind {
		case kind:
			t.Chained++
		case kind + chain.SuppressedSuffix:
			var ev chain.SuppressedEvent
			if err := json.Unmarshal(e.Payload, &ev); err != nil {
				tb.Fatal(err)
			}
			t.Summaries++
			t.Suppressed += ev.Suppressed
			t.ByKey[chain.RecordKey{Class: ev.Class, Sender: ev.Sender, Kind: ev.Kind, Reason: ev.Reason}] += ev.Suppressed
		}
	}
	return t
}

// Tally verifies the chain and counts its entries of kind (see Count).
func (r *Recorded) Tally(tb testing.TB, kind string) Tally {
	tb.Helper()
	return Count(tb, r.Entries(tb), kind)
}

// Between returns the entries whose time lies in [from, to).
func Between(tb testing.TB, entries []chain.Entry, from, to time.Time) []chain.Entry {
	tb.Helper()
	var out []chain.Entry
	for _, e := range entries {
		t, err := time.Parse(time.RFC3339Nano, e.Time)
		if err != nil {
			tb.Fatal(err)
		}
		if !t.Before(from) && t.Before(to) {
			out = append(out, e)
		}
	}
	return out
}

// Has reports whether entries hold one of kind whose payload contains
// fragment, e.g. an honest record appended during a flood.
func Has(entries []chain.Entry, kind, fragment string) bool {
	for _, e := range entries {
		if e.Kind == kind && strings.Contains(string(e.Payload), fragment) {
			return true
		}
	}
	return false
}
