package chain

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzOpen: the chain file is read back at every start, and a crash, a
// full disk or another party may have left anything in it. Open never
// panics; what it refuses it leaves as it was; a torn last line it cuts
// only after keeping the whole file; and the chain it opens takes an
// append that verifies on top of what was there.
func FuzzOpen(f *testing.F) {
	key := testKey(1)
	valid := buildChain(f, key, 3)
	f.Add(valid)
	f.Add(valid[:len(valid)-17])                     // torn last line
	f.Add(append(bytes.Clone(valid), "{\"seq\""...)) // torn, no newline
	f.Add(buildChain(f, testKey(2), 1))              // another node's chain
	f.Add(bytes.Replace(valid, []byte(`"n":2`), []byte(`"n":3`), 1))
	f.Add(valid[:bytes.IndexByte(valid, '\n')/2]) // only a torn genesis
	f.Add([]byte{})
	f.Add([]byte("\n"))
	now := func() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) }
	path := filepath.Join(fuzzDir(f), "chain.log")
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64<<10 {
			return
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		c, rep, err := Open(path, key, Options{Now: now, OpenFile: openNoSync})
		got, rerr := os.ReadFile(path)
		if rerr != nil {
			t.Fatal(rerr)
		}
		if err != nil {
			if !bytes.Equal(got, data) {
				t.Fatalf("refused chain changed from %d to %d bytes", len(data), len(got))
			}
			return
		}
		defer c.Close()
		want := data
		if rep.Torn != nil {
			want = data[:int64(len(data))-rep.Torn.Bytes]
			kept, err := os.ReadFile(rep.Torn.KeptAt)
			if err != nil || !bytes.Equal(kept, data) {
				t.Fatalf("kept copy of the torn chain: %d bytes of %d, %v", len(kept), len(data), err)
			}
			// The next input's torn copy takes the same name.
			if err := os.Remove(rep.Torn.KeptAt); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(got, want) || rep.Created {
			t.Fatalf("opened chain is %d bytes, want %d (report %+v)", len(got), len(want), rep)
		}
		if _, err := c.Append("test", "test.event", map[string]int{"n": 1}); err != nil {
			t.Fatalf("append to the opened chain: %v", err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		res, err := VerifyFile(path, pubOf(key))
		if err != nil || res.Entries != rep.Entries+1 {
			t.Fatalf("after one append: %d entries of %d+1, %v", res.Entries, rep.Entries, err)
		}
	})
}

// fuzzDir is a directory for a fuzz target's files: on tmpfs where there
// is one (/dev/shm), so that the fsyncs of a torn tail's kept copy cost
// nothing and 3000 inputs take about a second, not five; else a temp dir.
func fuzzDir(f *testing.F) string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if dir, err := os.MkdirTemp("/dev/shm", "nodeld-chain-fuzz-"); err == nil {
			f.Cleanup(func() { _ = os.RemoveAll(dir) })
			return dir
		}
	}
	return f.TempDir()
}
