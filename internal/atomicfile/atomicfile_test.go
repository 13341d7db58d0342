package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// names lists the entries of dir.
func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func TestWriteFileCreatesAndReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	for i, tt := range []struct {
		data string
		perm fs.FileMode
	}{
		{"first\n", 0o600},
		{"second, longer than the first\n", 0o644},
		{"", 0o600},
	} {
		if err := WriteFile(path, []byte(tt.data), tt.perm); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tt.data {
			t.Errorf("write %d: file holds %q, want %q", i, got, tt.data)
		}
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != tt.perm {
			t.Errorf("write %d: mode %v, want %v", i, st.Mode().Perm(), tt.perm)
		}
		if diff := cmp.Diff([]string{"state.json"}, names(t, dir)); diff != "" {
			t.Errorf("write %d: directory (-want +got):\n%s", i, diff)
		}
	}
}

// A write that fails part way leaves the old file as it was and no
// temporary file behind.
func TestFailedWriteKeepsOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("disk full")
	err := writeFile(path, []byte("new content"), 0o644, func(f *os.File, data []byte) error {
		if _, err := f.Write(data[:3]); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), path) {
		t.Fatalf("writeFile = %v, want %v naming the path", err, boom)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "old" {
		t.Fatalf("file holds %q, %v; want the old content", got, err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v changed", st.Mode().Perm())
	}
	if diff := cmp.Diff([]string{"state.json"}, names(t, dir)); diff != "" {
		t.Errorf("directory (-want +got):\n%s", diff)
	}
}

// A rename that fails (the target is a non-empty directory) leaves the
// target and no temporary file.
func TestFailedRenameLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "taken")
	if err := os.MkdirAll(filepath.Join(path, "inside"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("x"), 0o600); err == nil {
		t.Fatal("WriteFile replaced a directory")
	}
	if diff := cmp.Diff([]string{"taken"}, names(t, dir)); diff != "" {
		t.Errorf("directory (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"inside"}, names(t, path)); diff != "" {
		t.Errorf("target directory (-want +got):\n%s", diff)
	}
}

func TestMissingDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "absent", "state.json")
	if err := WriteFile(path, []byte("x"), 0o600); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("WriteFile = %v, want fs.ErrNotExist", err)
	}
}

func TestTempPrefix(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "manifest.json")
	var seen string
	err := writeFile(path, nil, 0o600, func(f *os.File, _ []byte) error {
		seen = filepath.Base(f.Name())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := TempPrefix(path); want != ".manifest.json.tmp-" || !strings.HasPrefix(seen, want) {
		t.Fatalf("temporary file %q, prefix %q", seen, want)
	}
}

// ReadBounded reads a regular file within its bound, and refuses a
// larger one, a directory and a FIFO (which would block a plain read)
// with ErrUnbounded; a missing file is fs.ErrNotExist.
func TestReadBounded(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("12345"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadBounded(path, 5); err != nil || string(got) != "12345" {
		t.Fatalf("within the bound: %q %v", got, err)
	}
	if _, err := ReadBounded(path, 4); !errors.Is(err, ErrUnbounded) {
		t.Fatalf("past the bound: %v", err)
	}
	if _, err := ReadBounded(dir, 1<<20); !errors.Is(err, ErrUnbounded) {
		t.Fatalf("a directory: %v", err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Opened for reading alone a FIFO blocks until a writer comes: the
	// test holds one open (read-write opens at once on Linux).
	w, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := ReadBounded(fifo, 1<<20); !errors.Is(err, ErrUnbounded) {
		t.Fatalf("a FIFO: %v", err)
	}
	if _, err := ReadBounded(filepath.Join(dir, "none"), 1); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
}
