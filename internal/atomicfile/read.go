package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrUnbounded is wrapped by ReadBounded's refusal of a file that is not
// a regular file or is larger than its bound.
var ErrUnbounded = errors.New("not a regular file within its size bound")

// ReadBounded reads path, a regular file of at most limit bytes: the read
// side of a file kept whole. A file that is not regular (a directory, a
// device, a FIFO that would block) or is larger than limit is refused
// with ErrUnbounded before it is read; one that grows while it is read
// is read to limit+1 bytes at most and refused too. A missing file's
// error wraps fs.ErrNotExist.
func ReadBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w (%s)", path, ErrUnbounded, st.Mode().Type())
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s: %w (%d bytes, bound %d)", path, ErrUnbounded, st.Size(), limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: %w (grew past %d bytes while read)", path, ErrUnbounded, limit)
	}
	return data, nil
}
