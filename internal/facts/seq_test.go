package facts

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
)

func TestSeqStoreMonotonicAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	var last uint64
	// Uses per open straddle the reservation block in different ways.
	for round, uses := range []int{1, seqReserveBlock, seqReserveBlock + 1, 3, 2*seqReserveBlock + 5, 0, 1} {
		s, err := OpenSeqStore(dir)
		if err != nil {
			t.Fatalf("round %d: OpenSeqStore: %v", round, err)
		}
		for range uses {
			v, err := s.Next()
			if err != nil {
				t.Fatalf("round %d: Next: %v", round, err)
			}
			if v <= last {
				t.Fatalf("round %d: Next = %d after %d", round, v, last)
			}
			last = v
		}
	}
	if last == 0 {
		t.Fatal("no seq handed out")
	}
}

func TestSeqStoreFile(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenSeqStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("OpenSeqStore wrote the file before Next: %v", err)
	}
	v, err := s.Next()
	if err != nil {
		t.Fatal(err)
	}
	if v != 1 {
		t.Errorf("first seq = %d, want 1", v)
	}
	st, err := os.Stat(filepath.Join(dir, SeqFileName))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600", st.Mode().Perm())
	}
	data, err := os.ReadFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	// The file must already cover the value handed out.
	if got, err := strconv.ParseUint(string(data[:len(data)-1]), 10, 64); err != nil || got < v {
		t.Errorf("file holds %q, want a reservation of at least %d", data, v)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("data dir holds %d entries, want only %s", len(entries), SeqFileName)
	}
}

func TestSeqStoreConcurrent(t *testing.T) {
	s, err := OpenSeqStore(t.TempDir())
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
				v, err := s.Next()
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
				t.Fatalf("seq %d handed out twice", v)
			}
			seen[v] = true
			if i > 0 && v <= vs[i-1] {
				t.Fatalf("worker %d saw %d after %d", w, v, vs[i-1])
			}
		}
	}
	if len(seen) != workers*each {
		t.Fatalf("%d distinct seqs, want %d", len(seen), workers*each)
	}
}

func TestSeqStoreWriteFailureHandsOutNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "not-yet")
	s, err := OpenSeqStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := s.Next(); err == nil {
		t.Fatalf("Next = %d without a durable reservation", v)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Next(); err != nil || v != 1 {
		t.Fatalf("Next = %d, %v; want 1", v, err)
	}
}

func TestSeqStoreBadFile(t *testing.T) {
	tests := []struct {
		name string
		give string
	}{
		{name: "not a number", give: "seven\n"},
		{name: "negative", give: "-1\n"},
		{name: "empty", give: ""},
		{name: "too large", give: "1" + string(make([]byte, maxSeqFileBytes))},
		{name: "overflow", give: "18446744073709551616\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, SeqFileName), []byte(tt.give), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := OpenSeqStore(dir); err == nil {
				t.Fatal("OpenSeqStore accepted it")
			}
		})
	}
}

func TestSeqStoreExhausted(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, SeqFileName), []byte(strconv.FormatUint(math.MaxUint64-1, 10)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := OpenSeqStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := s.Next(); err != nil || v != math.MaxUint64 {
		t.Fatalf("Next = %d, %v; want MaxUint64", v, err)
	}
	if _, err := s.Next(); !errors.Is(err, ErrSeqExhausted) {
		t.Fatalf("Next error = %v, want ErrSeqExhausted", err)
	}
}
