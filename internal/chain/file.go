package chain

import (
	"io"
	"io/fs"
	"os"
)

// File is what a Chain needs of its open chain file. *os.File implements
// it; Options.OpenFile may supply another implementation, so that tests
// can fail a chosen write, sync, truncation or open.
type File interface {
	io.Reader
	io.ReaderAt
	io.Writer
	// Stat describes the file; os.SameFile must accept its result when
	// it is the same file (a recovery checks that the path still names
	// the file opened at Open).
	Stat() (fs.FileInfo, error)
	Truncate(size int64) error
	Sync() error
	Close() error
}

var _ File = (*os.File)(nil)

// OpenFileFunc opens the chain file, with the meaning of os.OpenFile.
type OpenFileFunc func(name string, flag int, perm fs.FileMode) (File, error)

// openOSFile is the default OpenFileFunc. It returns a nil interface, not a
// nil *os.File, on error.
func openOSFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return f, nil
}
