package atomicfile

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// TempPrefix is how the temporary file of a write to path starts:
// "." + the base name + ".tmp-". Code that walks a directory written
// this way uses it to skip a write in progress or left by a crash.
func TempPrefix(path string) string {
	return "." + filepath.Base(path) + ".tmp-"
}

// WriteFile replaces path with data and mode perm, crash-safely: a
// temporary file in path's directory is written, fsynced, chmodded and
// renamed over path, then the directory is fsynced. On an error before the
// rename path is untouched and the temporary file is removed; an error
// after it (fsyncing the directory) means path holds the new data, which
// may not survive a crash yet.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	return writeFile(path, data, perm, func(f *os.File, data []byte) error {
		_, err := f.Write(data)
		return err
	})
}

// writeFile is WriteFile with the write step given, so tests can make it
// fail part way.
func writeFile(path string, data []byte, perm fs.FileMode, write func(*os.File, []byte) error) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, TempPrefix(path)+"*")
	if err != nil {
		return fmt.Errorf("write %q: %w", path, err)
	}
	name := tmp.Name()
	err = tmp.Chmod(perm)
	if err == nil {
		err = write(tmp, data)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(name, path)
	}
	if err != nil {
		_ = os.Remove(name)
		return fmt.Errorf("write %q: %w", path, err)
	}
	if err := SyncDir(dir); err != nil {
		return fmt.Errorf("write %q: sync directory: %w", path, err)
	}
	return nil
}

// SyncDir fsyncs directory dir, so that creations, renames and removals
// in it survive a crash. It is the one home of this step for every
// package but the isolated chain (see its syncDir).
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
