package seqfile

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMonotonicAcrossReopen(t *testing.T) {
	for _, block := range []uint64{1, 2, 64} {
		path := filepath.Join(t.TempDir(), "x.seq")
		var last uint64
		// Uses per open straddle the reservation block in different ways.
		for round, uses := range []int{1, int(block), int(block) + 1, 3, 2*int(block) + 5, 0, 1} {
			c, err := Open(path, block)
			if err != nil {
				t.Fatalf("block %d round %d: Open: %v", block, round, err)
			}
			for range uses {
				v, err := c.Next()
				if err != nil {
					t.Fatalf("block %d round %d: Next: %v", block, round, err)
				}
				if v <= last {
					t.Fatalf("block %d round %d: Next = %d after %d", block, round, v, last)
				}
				last = v
			}
		}
		if last == 0 {
			t.Fatal("nothing handed out")
		}
	}
}

func TestFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.seq")
	c, err := Open(path, 64)
	if err != nil {
		t.Fatal(err)
	}
	if c.Path() != path {
		t.Errorf("Path = %q", c.Path())
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open wrote the file before Next: %v", err)
	}
	v, err := c.Next()
	if err != nil || v != 1 {
		t.Fatalf("first Next = %d, %v; want 1", v, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600", st.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The file covers the value handed out, with the whole block.
	if string(data) != "64\n" {
		t.Errorf("file holds %q, want a reservation of 64", data)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Errorf("directory holds %d entries (%v), want only the counter", len(entries), err)
	}
}

// With a block of 1 every value is written before it is handed out, and a
// floor (a clock) lifts the sequence over a lost or stale file.
func TestFloor(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.seq")
	c, err := Open(path, 1)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for _, floor := range []uint64{0, 1000, 1000, 5, 2000} {
		v, err := c.NextAtLeast(floor)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
		data, err := os.ReadFile(path)
		if err != nil || string(data) != strconv.FormatUint(v, 10)+"\n" {
			t.Fatalf("after %d the file holds %q, %v", v, data, err)
		}
	}
	if diff := cmp.Diff([]uint64{1, 1000, 1001, 1002, 2000}, got); diff != "" {
		t.Errorf("values (-want +got):\n%s", diff)
	}
	again, err := Open(path, 1)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := again.Next(); err != nil || v != 2001 {
		t.Errorf("after reopen Next = %d, %v; want 2001", v, err)
	}
}

func TestConcurrent(t *testing.T) {
	c, err := Open(filepath.Join(t.TempDir(), "x.seq"), 4)
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 40
	results := make([][]uint64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				v, err := c.Next()
				if err != nil {
					t.Error(err)
					return
				}
				results[w] = append(results[w], v)
			}
		}()
	}
	wg.Wait()
	seen := make(map[uint64]bool)
	for w, vs := range results {
		for i, v := range vs {
			if seen[v] {
				t.Fatalf("%d handed out twice", v)
			}
			seen[v] = true
			if i > 0 && v <= vs[i-1] {
				t.Fatalf("worker %d saw %d after %d", w, v, vs[i-1])
			}
		}
	}
	if len(seen) != workers*each {
		t.Fatalf("%d distinct values, want %d", len(seen), workers*each)
	}
}

func TestWriteFailureHandsOutNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "not-yet")
	c, err := Open(filepath.Join(dir, "x.seq"), 64)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := c.Next(); err == nil {
		t.Fatalf("Next = %d without a durable reservation", v)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Next(); err != nil || v != 1 {
		t.Fatalf("Next = %d, %v; want 1", v, err)
	}
}

func TestBadFile(t *testing.T) {
	tests := []struct {
		name string
		give string
	}{
		{name: "not a number", give: "seven\n"},
		{name: "negative", give: "-1\n"},
		{name: "empty", give: ""},
		{name: "too large", give: "1" + string(make([]byte, maxFileBytes))},
		{name: "overflow", give: "18446744073709551616\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.seq")
			if err := os.WriteFile(path, []byte(tt.give), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := Open(path, 1); err == nil {
				t.Fatal("Open accepted it")
			}
		})
	}
	if _, err := Open(filepath.Join(t.TempDir(), "x.seq"), 0); err == nil {
		t.Error("Open accepted a block of 0")
	}
}

func TestExhausted(t *testing.T) {
	for _, block := range []uint64{1, 64} {
		path := filepath.Join(t.TempDir(), "x.seq")
		if err := os.WriteFile(path, []byte(strconv.FormatUint(math.MaxUint64-1, 10)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Open(path, block)
		if err != nil {
			t.Fatal(err)
		}
		if v, err := c.Next(); err != nil || v != math.MaxUint64 {
			t.Fatalf("block %d: Next = %d, %v; want MaxUint64", block, v, err)
		}
		if _, err := c.NextAtLeast(5); !errors.Is(err, ErrExhausted) {
			t.Fatalf("block %d: Next error = %v, want ErrExhausted", block, err)
		}
	}
}
