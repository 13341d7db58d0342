package chain

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// testKey returns a deterministic key; different seeds give different keys.
func testKey(seed byte) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
}

func pubOf(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

// fakeClock returns a new instant, one millisecond later, on every call.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Millisecond)
	return c.t
}

// manualClock stands still until the test moves it.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func newManualClock() *manualClock {
	return &manualClock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}

// buildChain returns the bytes of a valid chain signed by key: the genesis
// and n entries with payload {"n":i}, built in memory without a file.
func buildChain(tb testing.TB, key ed25519.PrivateKey, n int) []byte {
	tb.Helper()
	clk := newFakeClock()
	c := &Chain{key: key, now: clk.Now}
	g := c.seal(GenesisSource, GenesisKind, []byte(`{"public_key":"`+hex.EncodeToString(pubOf(key))+`"}`), Entry{}, clk.Now())
	out := appendLine(nil, &g)
	prev := g
	for i := 1; i <= n; i++ {
		e := c.seal("test", "test.event", []byte(`{"n":`+strconv.Itoa(i)+`}`), prev, clk.Now())
		out = appendLine(out, &e)
		prev = e
	}
	return out
}

// splitLines splits chain bytes into lines without their newlines.
func splitLines(b []byte) [][]byte {
	lines := bytes.SplitAfter(b, []byte("\n"))
	var out [][]byte
	for _, l := range lines {
		if len(l) > 0 {
			out = append(out, bytes.TrimSuffix(l, []byte("\n")))
		}
	}
	return out
}

// joinLines joins lines, each followed by a newline.
func joinLines(lines [][]byte) []byte {
	var out []byte
	for _, l := range lines {
		out = append(out, l...)
		out = append(out, '\n')
	}
	return out
}

// mustParse decodes one canonical line.
func mustParse(tb testing.TB, line []byte) Entry {
	tb.Helper()
	var p lineParser
	e, err := p.parse(line)
	if err != nil {
		tb.Fatalf("parse %s: %v", line, err)
	}
	return e
}

// reseal recomputes the hash of e and signs it with key, returning the line.
func reseal(e Entry, key ed25519.PrivateKey) []byte {
	sum := hashEntry(&e)
	e.Hash = hexHash(sum)
	e.Sig = hex.EncodeToString(ed25519.Sign(key, sum[:]))
	return bytes.TrimSuffix(appendLine(nil, &e), []byte("\n"))
}

// writeFile writes b to name in a new temp dir and returns the path.
func writeFile(tb testing.TB, b []byte) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "chain.log")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

func readFile(tb testing.TB, path string) []byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
