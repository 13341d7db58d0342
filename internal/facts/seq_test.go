package facts

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
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
