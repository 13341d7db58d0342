package chain

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"
)

// openNew opens a new chain in a temp dir.
func openNew(t *testing.T, opts Options) (*Chain, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "chain.log")
	if opts.Now == nil {
		opts.Now = newFakeClock().Now
	}
	if opts.Logger == nil {
		opts.Logger = zaptest.NewLogger(t)
	}
	c, rep, err := Open(path, testKey(1), opts)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Created || rep.Entries != 1 {
		t.Fatalf("Open report = %+v, want created with 1 entry", rep)
	}
	t.Cleanup(func() { c.Close() })
	return c, path
}

func TestOpenCreatesGenesis(t *testing.T) {
	c, path := openNew(t, Options{})
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600", st.Mode().Perm())
	}
	seq, hash := c.Head()
	res, err := VerifyFile(path, pubOf(testKey(1)))
	if err != nil {
		t.Fatal(err)
	}
	want := Entry{Seq: 1, Source: GenesisSource, Kind: GenesisKind, Prev: zeroHash}
	got := res.Head
	got.Time, got.Payload, got.Hash, got.Sig = "", nil, "", ""
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("genesis (-want +got):\n%s", diff)
	}
	if seq != 1 || hash != res.Head.Hash || c.Entries() != 1 {
		t.Errorf("Head = %d %s, Entries = %d; want 1 %s, 1", seq, hash, c.Entries(), res.Head.Hash)
	}
	if entries, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "*")); len(entries) != 1 {
		t.Errorf("directory holds %v, want only the chain (no temp file left)", entries)
	}
}

func TestAppendAndReopen(t *testing.T) {
	clk := newFakeClock()
	c, path := openNew(t, Options{Now: clk.Now})
	type ev struct {
		Role string `json:"role"`
		Port int    `json:"port"`
	}
	gives := []struct {
		payload any
		want    string
	}{
		{ev{Role: "chat", Port: 8090}, `{"role":"chat","port":8090}`},
		{map[string]any{"b": 1, "a": "<x>"}, `{"a":"\u003cx\u003e","b":1}`},
		{nil, `{}`},
		{json.RawMessage(`{ "spaced" : true }`), `{"spaced":true}`},
	}
	var last Entry
	for i, g := range gives {
		e, err := c.Append("nodeld", "node.start", g.payload)
		if err != nil {
			t.Fatal(err)
		}
		if string(e.Payload) != g.want || e.Seq != uint64(i+2) {
			t.Errorf("entry %d: seq %d payload %s, want seq %d payload %s", i, e.Seq, e.Payload, i+2, g.want)
		}
		if e.Prev == "" || (last.Hash != "" && e.Prev != last.Hash) {
			t.Errorf("entry %d prev = %q, want %q", i, e.Prev, last.Hash)
		}
		last = e
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	res, err := VerifyFile(path, pubOf(testKey(1)))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(last, res.Head); diff != "" {
		t.Errorf("head on disk (-want +got):\n%s", diff)
	}

	c2, rep, err := Open(path, testKey(1), Options{Now: clk.Now, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if rep.Created || rep.Torn != nil || rep.Entries != 5 || rep.Head.Hash != last.Hash {
		t.Errorf("reopen report = %+v, want 5 entries, head %s", rep, last.Hash)
	}
	if err := c2.Record("table", "role.add", map[string]string{"role": "coder"}); err != nil {
		t.Fatal(err)
	}
	if seq, _ := c2.Head(); seq != 6 {
		t.Errorf("head seq after reopen and append = %d, want 6", seq)
	}
	if _, err := VerifyFile(path, pubOf(testKey(1))); err != nil {
		t.Fatal(err)
	}
}

func TestAppendUsesClock(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 600, time.FixedZone("x", 3600))
	c, _ := openNew(t, Options{Now: func() time.Time { return at }})
	e, err := c.Append("nodeld", "node.start", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := "2030-01-02T02:04:05.0000006Z"; e.Time != want {
		t.Errorf("Time = %q, want %q", e.Time, want)
	}
}

func TestAppendInvalid(t *testing.T) {
	c, _ := openNew(t, Options{})
	tests := []struct {
		name, source, kind string
		payload            any
	}{
		{"empty source", "", "k", nil},
		{"source with quote", `a"b`, "k", nil},
		{"kind with space", "s", "a b", nil},
		{"long kind", "s", strings.Repeat("k", MaxIdentBytes+1), nil},
		{"reserved kind", "s", "chain.genesis", nil},
		{"array payload", "s", "k", []int{1}},
		{"string payload", "s", "k", "x"},
		{"unmarshalable payload", "s", "k", map[string]any{"c": make(chan int)}},
		{"oversized payload", "s", "k", map[string]string{"x": strings.Repeat("a", MaxEntryBytes)}},
		{"line over the bound", "s", "k", map[string]string{"x": strings.Repeat("a", MaxEntryBytes-20)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := c.Append(tt.source, tt.kind, tt.payload); !errors.Is(err, ErrInvalidEntry) {
				t.Errorf("Append = %v, want ErrInvalidEntry", err)
			}
		})
	}
	if _, err := c.Append("s", "k", nil); err != nil {
		t.Errorf("Append after invalid entries = %v, want the chain still usable", err)
	}
	if c.Entries() != 2 {
		t.Errorf("Entries = %d, want 2", c.Entries())
	}
}

// appendN appends n entries and closes the chain, returning its bytes.
func appendN(t *testing.T, c *Chain, path string, n int) []byte {
	t.Helper()
	for i := range n {
		if _, err := c.Append("test", "test.event", map[string]int{"n": i}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	return readFile(t, path)
}

func TestOpenCutsTornTail(t *testing.T) {
	tests := []struct {
		name string
		tail string
	}{
		{"half a line", `{"seq":5,"time":"2025-03-01T12:00:00Z","sou`},
		{"one byte", `{`},
		{"entry without newline", "NEXT"}, // replaced by a complete next line minus its newline
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, path := openNew(t, Options{})
			good := appendN(t, c, path, 3)
			tail := []byte(tt.tail)
			if tt.tail == "NEXT" {
				// A complete, valid 5th entry whose newline never reached the disk.
				c2, _, err := Open(path, testKey(1), Options{})
				if err != nil {
					t.Fatal(err)
				}
				full := appendN(t, c2, path, 1)
				tail = bytes.TrimSuffix(full[len(good):], []byte("\n"))
			}
			original := append(bytes.Clone(good), tail...)
			if err := os.WriteFile(path, original, 0o600); err != nil {
				t.Fatal(err)
			}

			now := time.Date(2025, 4, 5, 6, 7, 8, 9, time.UTC)
			c3, rep, err := Open(path, testKey(1), Options{Now: func() time.Time { return now }, Logger: zaptest.NewLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			defer c3.Close()
			wantTorn := &TornTail{Index: 4, Bytes: int64(len(tail)), KeptAt: path + ".torn-20250405T060708.000000009Z"}
			if diff := cmp.Diff(wantTorn, rep.Torn); diff != "" {
				t.Errorf("torn report (-want +got):\n%s", diff)
			}
			if rep.Entries != 4 {
				t.Errorf("entries after cut = %d, want 4", rep.Entries)
			}
			if diff := cmp.Diff(original, readFile(t, wantTorn.KeptAt)); diff != "" {
				t.Errorf("kept copy (-want +got):\n%s", diff)
			}
			if st, err := os.Stat(wantTorn.KeptAt); err != nil || st.Mode().Perm() != 0o600 {
				t.Errorf("kept copy stat = %v, %v; want mode 0600", st, err)
			}
			if diff := cmp.Diff(good, readFile(t, path)); diff != "" {
				t.Errorf("chain after cut (-want +got):\n%s", diff)
			}
			e, err := c3.Append("test", "test.after", nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := VerifyFile(path, pubOf(testKey(1)))
			if err != nil {
				t.Fatal(err)
			}
			if res.Entries != 5 || res.Head.Hash != e.Hash {
				t.Errorf("after append: %d entries head %s, want 5 head %s", res.Entries, res.Head.Hash, e.Hash)
			}
		})
	}
}

func TestOpenRefusesBroken(t *testing.T) {
	tests := []struct {
		name       string
		damage     func(lines [][]byte) [][]byte
		key        byte
		wantReason Reason
		wantIndex  uint64
	}{
		{
			name: "edited payload",
			damage: func(l [][]byte) [][]byte {
				l[2] = bytes.Replace(l[2], []byte(`"n":1`), []byte(`"n":7`), 1)
				return l
			},
			key: 1, wantReason: ReasonBadHash, wantIndex: 2,
		},
		{
			name:   "deleted entry",
			damage: func(l [][]byte) [][]byte { return append(l[:1], l[2:]...) },
			key:    1, wantReason: ReasonSequenceGap, wantIndex: 1,
		},
		{
			name:   "other node key",
			damage: func(l [][]byte) [][]byte { return l },
			key:    2, wantReason: ReasonWrongKey, wantIndex: 0,
		},
		{
			name:   "only a torn line",
			damage: func(l [][]byte) [][]byte { return nil },
			key:    1, wantReason: ReasonTorn, wantIndex: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, path := openNew(t, Options{})
			data := appendN(t, c, path, 3)
			damaged := joinLines(tt.damage(splitLines(data)))
			if tt.wantReason == ReasonTorn {
				damaged = data[:30]
			}
			if err := os.WriteFile(path, damaged, 0o600); err != nil {
				t.Fatal(err)
			}
			c2, rep, err := Open(path, testKey(tt.key), Options{})
			var ve *VerifyError
			if !errors.As(err, &ve) || !errors.Is(err, ErrBroken) {
				if c2 != nil {
					c2.Close()
				}
				t.Fatalf("Open = %v, %+v, want a *VerifyError", err, rep)
			}
			if ve.Reason != tt.wantReason || ve.Index != tt.wantIndex {
				t.Errorf("Open error = %v, want %v at %d", err, tt.wantReason, tt.wantIndex)
			}
			if c2 != nil || rep != nil {
				t.Errorf("Open returned a chain or report with an error")
			}
			if diff := cmp.Diff(damaged, readFile(t, path)); diff != "" {
				t.Errorf("a refused file was changed (-want +got):\n%s", diff)
			}
			if m, _ := filepath.Glob(path + ".*"); len(m) != 0 {
				t.Errorf("refused open left files %v", m)
			}
		})
	}
}

func TestArchiveThenOpen(t *testing.T) {
	c, path := openNew(t, Options{})
	data := appendN(t, c, path, 2)
	lines := splitLines(data)
	broken := joinLines(append(lines[:1], lines[2:]...))
	if err := os.WriteFile(path, broken, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Open(path, testKey(1), Options{}); !errors.Is(err, ErrBroken) {
		t.Fatalf("Open broken = %v, want ErrBroken", err)
	}

	now := time.Date(2025, 4, 5, 6, 7, 8, 0, time.FixedZone("x", 7200))
	archived, err := Archive(path, now)
	if err != nil {
		t.Fatal(err)
	}
	if want := path + ".broken-20250405T040708.000000000Z"; archived != want {
		t.Errorf("archived path = %q, want %q", archived, want)
	}
	if diff := cmp.Diff(broken, readFile(t, archived)); diff != "" {
		t.Errorf("archived content (-want +got):\n%s", diff)
	}
	if _, err := Archive(path, now); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Archive of a missing file = %v, want ErrNotExist", err)
	}

	c2, rep, err := Open(path, testKey(1), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if !rep.Created || c2.Entries() != 1 {
		t.Errorf("Open after Archive: report %+v, entries %d; want a fresh chain", rep, c2.Entries())
	}
}

func TestArchiveNeverOverwrites(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "chain.log")
	now := time.Date(2025, 4, 5, 6, 7, 8, 0, time.UTC)
	for _, p := range []string{path, path + ".broken-20250405T060708.000000000Z"} {
		if err := os.WriteFile(p, []byte(p), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Archive(path, now); !errors.Is(err, os.ErrExist) {
		t.Errorf("Archive onto an existing archive = %v, want ErrExist", err)
	}
	if got := string(readFile(t, path)); got != path {
		t.Errorf("chain changed to %q", got)
	}
}

func TestConcurrentAppends(t *testing.T) {
	const goroutines, each = 16, 50
	c, path := openNew(t, Options{Now: newFakeClock().Now})
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seqs = map[uint64]int{}
		errs []error
	)
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				e, err := c.Append("test", "test.parallel", map[string]int{"g": g, "i": i})
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				}
				seqs[e.Seq]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("append errors: %v", errs)
	}
	const total = goroutines*each + 1
	for s := uint64(2); s <= total; s++ {
		if seqs[s] != 1 {
			t.Fatalf("seq %d returned %d times, want once", s, seqs[s])
		}
	}
	if c.Entries() != total {
		t.Errorf("Entries = %d, want %d", c.Entries(), total)
	}
	res, err := VerifyFile(path, pubOf(testKey(1)))
	if err != nil {
		t.Fatal(err)
	}
	if seq, hash := c.Head(); res.Entries != total || seq != total || hash != res.Head.Hash {
		t.Errorf("file has %d entries head %s; chain head %d %s; want %d", res.Entries, res.Head.Hash, seq, hash, total)
	}
}

func TestAppendAfterClose(t *testing.T) {
	c, _ := openNew(t, Options{})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Append("s", "k", nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close = %v, want ErrClosed", err)
	}
	if err := c.Record("s", "k", nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Record after Close = %v, want ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	c, path := openNew(t, Options{Registerer: reg})
	for range 3 {
		if _, err := c.Append("s", "k", nil); err != nil {
			t.Fatal(err)
		}
	}
	c.Append("s", "chain.x", nil) // invalid: counted
	want := `
# HELP nodeld_chain_append_errors_total Appends to the audit chain that returned an error (other than after Close).
# TYPE nodeld_chain_append_errors_total counter
nodeld_chain_append_errors_total 1
# HELP nodeld_chain_entries_total Entries in the audit chain, the genesis included.
# TYPE nodeld_chain_entries_total counter
nodeld_chain_entries_total 4
# HELP nodeld_chain_recoveries_total Attempts to cut the audit chain back to its last acknowledged entry after a write or sync error, by result (ok, failed).
# TYPE nodeld_chain_recoveries_total counter
nodeld_chain_recoveries_total{result="failed"} 0
nodeld_chain_recoveries_total{result="ok"} 0
# HELP nodeld_chain_writable 1 while the audit chain is writable, 0 from a write, sync or recovery error until an append succeeds.
# TYPE nodeld_chain_writable gauge
nodeld_chain_writable 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	// Close unregisters, so the same registry takes the reopened chain,
	// whose entry counter starts at the full count.
	c2, _, err := Open(path, testKey(1), Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got := testutil.ToFloat64(c2.m.entries); got != 4 {
		t.Errorf("entries after reopen = %v, want 4", got)
	}
}
