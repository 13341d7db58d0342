package chain

import (
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// fileMode is the mode of a chain file and of the copies kept beside it.
const fileMode = 0o600

// suffixTimeLayout names torn copies and archived files; it sorts by time
// and has nanoseconds so two recoveries never pick the same name.
const suffixTimeLayout = "20060102T150405.000000000Z"

// Options are the dependencies of a Chain. The zero value is usable.
type Options struct {
	// Now is the clock for entry times; nil means time.Now.
	Now func() time.Time
	// Logger receives open and recovery events; nil means no logging.
	Logger *zap.Logger
	// Registerer receives the chain metrics; nil means no metrics. Close
	// unregisters them, so a chain may be reopened on the same registry.
	Registerer prometheus.Registerer
	// OpenFile opens the chain file at Open and at each recovery; nil
	// means os.OpenFile. It exists so tests can inject write, sync and
	// open failures; the daemon leaves it nil.
	OpenFile OpenFileFunc
}

// OpenReport says what Open found.
type OpenReport struct {
	// Created is true when Open made a new chain with its genesis.
	Created bool
	// Entries is the number of entries after opening.
	Entries uint64
	// Head is the last entry after opening.
	Head Entry
	// Torn is set when a torn last line was cut.
	Torn *TornTail
}

// TornTail describes a torn last line that Open cut.
type TornTail struct {
	// Index is the 0-based line index of the torn line.
	Index uint64
	// Bytes is the length of the torn line that was cut.
	Bytes int64
	// KeptAt is the path of the fsynced copy of the whole original file.
	KeptAt string
}

// Chain is an open chain file that entries are appended to.
type Chain struct {
	path     string
	key      ed25519.PrivateKey
	now      func() time.Time
	log      *zap.Logger
	openFile OpenFileFunc
	m        *metrics

	// appendMu serialises appends, recoveries and Close. It is held across
	// one entry's write and fsync, and across a recovery, deliberately:
	// the log is ordered and each entry links to the one before. Nothing
	// else waits on it.
	appendMu sync.Mutex
	// f is the open file (O_APPEND), or nil once closed or while a
	// recovery is owed: a descriptor that returned a write or sync error
	// is closed at once and never used again. Guarded by appendMu.
	f File
	// size is the byte offset just after the last acknowledged entry's
	// line, where a recovery cuts the file. Guarded by appendMu.
	size int64
	// ident is the chain file as opened at Open, so a recovery never
	// writes to another file that has taken its path. Set by Open.
	ident fs.FileInfo
	// closed is set by Close; guarded by appendMu.
	closed bool
	// buf is the line being written, reused; guarded by appendMu.
	buf []byte

	// mu guards head and health. It is never held across I/O, so Head,
	// Entries and Healthy never wait for a disk.
	mu   sync.Mutex
	head Entry // last acknowledged entry
	// health is nil while writable, a *NotWritableError while appends
	// fail, and ErrClosed after Close. A stored value is never modified,
	// only replaced.
	health error

	// entries mirrors head.Seq for the metrics, read without locks.
	entries atomic.Uint64
}

// Open opens the chain file at path, creating it (mode 0600) with a genesis
// entry signed by key if it does not exist. An existing file is verified in
// full against key's public half. A torn last line is first copied, with
// the whole file, to "<path>.torn-<UTC time>" (fsynced), then cut; the
// report says so. Any other break returns a *VerifyError (matching
// ErrBroken) and opens nothing; Archive moves such a file aside. A genesis
// naming another key than key's is ReasonWrongKey (a rotated node key needs
// a new chain), and a file holding only a torn line is not a chain this
// package wrote (it creates the genesis atomically), so it is refused too.
func Open(path string, key ed25519.PrivateKey, opts Options) (*Chain, *OpenReport, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, nil, fmt.Errorf("open chain %q: private key has %d bytes, want %d", path, len(key), ed25519.PrivateKeySize)
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	openFile := opts.OpenFile
	if openFile == nil {
		openFile = openOSFile
	}
	c := &Chain{path: path, key: key, now: now, log: log, openFile: openFile}
	report := &OpenReport{}

	f, err := openFile(path, os.O_RDWR|os.O_APPEND, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if f, err = c.create(); err != nil {
			return nil, nil, fmt.Errorf("create chain %q: %w", path, err)
		}
		report.Created = true
	case err != nil:
		return nil, nil, fmt.Errorf("open chain %q: %w", path, err)
	default:
		if err := c.verifyOpened(f, report, now()); err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("open chain %q: %w", path, err)
		}
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("open chain %q: %w", path, err)
	}
	c.f, c.ident = f, st

	if opts.Registerer != nil {
		m, err := newMetrics(opts.Registerer, func() float64 { return float64(c.entries.Load()) })
		if err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("open chain %q: %w", path, err)
		}
		c.m = m
	}

	report.Entries, report.Head = c.head.Seq, c.head
	if report.Torn != nil {
		log.Warn("chain torn last line cut",
			zap.String("path", path),
			zap.Uint64("index", report.Torn.Index),
			zap.Int64("bytes", report.Torn.Bytes),
			zap.String("kept_at", report.Torn.KeptAt))
	}
	log.Info("chain open",
		zap.String("path", path),
		zap.Bool("created", report.Created),
		zap.Uint64("entries", report.Entries),
		zap.String("head", report.Head.Hash))
	return c, report, nil
}

// create writes a new chain holding only the genesis to a temporary file,
// fsyncs it and renames it into place, so a crash never leaves a chain
// without its genesis.
func (c *Chain) create() (File, error) {
	payload, err := json.Marshal(genesisPayload{PublicKey: hex.EncodeToString(c.key.Public().(ed25519.PublicKey))})
	if err != nil {
		return nil, err
	}
	g := c.seal(GenesisSource, GenesisKind, payload, Entry{}, c.now())
	dir := filepath.Dir(c.path)
	tmp, err := os.CreateTemp(dir, filepath.Base(c.path)+".new-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name()) // no-op once renamed
	line := appendLine(nil, &g)
	werr := tmp.Chmod(fileMode)
	if werr == nil {
		_, werr = tmp.Write(line)
	}
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return nil, werr
	}
	if err := os.Rename(tmp.Name(), c.path); err != nil {
		return nil, err
	}
	if err := syncDir(dir); err != nil {
		return nil, err
	}
	f, err := c.openFile(c.path, os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		return nil, err
	}
	c.size = int64(len(line))
	c.setHead(g)
	return f, nil
}

// verifyOpened verifies an existing chain file and cuts a torn last line
// after keeping a copy of the whole file.
func (c *Chain) verifyOpened(f File, report *OpenReport, now time.Time) error {
	res, good, err := verifyStream(f, c.key.Public().(ed25519.PublicKey))
	var ve *VerifyError
	if errors.As(err, &ve) && ve.Reason == ReasonTorn && ve.Index > 0 {
		st, err := f.Stat()
		if err != nil {
			return err
		}
		kept, err := keepCopy(f, c.path+".torn-"+now.UTC().Format(suffixTimeLayout))
		if err != nil {
			return fmt.Errorf("keep copy of torn chain: %w", err)
		}
		if err := f.Truncate(good); err != nil {
			return fmt.Errorf("cut torn line: %w", err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("cut torn line: %w", err)
		}
		report.Torn = &TornTail{Index: ve.Index, Bytes: st.Size() - good, KeptAt: kept}
	} else if err != nil {
		return err
	}
	c.size = good
	c.setHead(res.Head)
	return nil
}

// keepCopy copies all of src to a new file at path (mode 0600, never
// overwriting), fsyncs it and its directory, and returns path.
func keepCopy(src io.ReaderAt, path string) (string, error) {
	dst, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fileMode)
	if err != nil {
		return "", err
	}
	_, werr := io.Copy(dst, io.NewSectionReader(src, 0, 1<<62))
	if werr == nil {
		werr = dst.Sync()
	}
	if cerr := dst.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = syncDir(filepath.Dir(path))
	}
	if werr != nil {
		os.Remove(path)
		return "", werr
	}
	return path, nil
}

// Archive moves the chain file at path aside to "<path>.broken-<UTC time>"
// (never overwriting) and fsyncs the directory, so the next Open starts a
// fresh chain. It is the operator's reset for a broken chain; the old file
// is kept for inspection.
func Archive(path string, now time.Time) (string, error) {
	archived := path + ".broken-" + now.UTC().Format(suffixTimeLayout)
	if _, err := os.Lstat(path); err != nil {
		return "", fmt.Errorf("archive chain: %w", err)
	}
	if _, err := os.Lstat(archived); err == nil {
		return "", fmt.Errorf("archive chain %q: %q: %w", path, archived, fs.ErrExist)
	}
	if err := os.Rename(path, archived); err != nil {
		return "", fmt.Errorf("archive chain: %w", err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return "", fmt.Errorf("archive chain %q: %w", path, err)
	}
	return archived, nil
}

// syncDir fsyncs a directory so renames and creations in it are durable.
// It is atomicfile.SyncDir's twin: chain is isolated (deps_test.go) and
// imports no internal package but the grammar, so it keeps its own five
// lines rather than an arrow to atomicfile.
func syncDir(dir string) error {
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

// seal builds a complete entry following prev (the zero Entry for the
// genesis): seq, time, link, hash and signature.
func (c *Chain) seal(source, kind string, payload []byte, prev Entry, t time.Time) Entry {
	e := Entry{
		Seq:     prev.Seq + 1,
		Time:    formatTime(t),
		Source:  source,
		Kind:    kind,
		Payload: payload,
		Prev:    prev.Hash,
	}
	if e.Prev == "" {
		e.Prev = zeroHash
	}
	sum := hashEntry(&e)
	e.Hash = hexHash(sum)
	e.Sig = hex.EncodeToString(ed25519.Sign(c.key, sum[:]))
	return e
}

// Append signs and writes one entry and returns it once it is fsynced. The
// payload is marshalled with encoding/json and must be a JSON object (nil
// is written as {}). Source and kind are 1 to MaxIdentBytes of ASCII
// letters, digits and . _ - : /, and kind must not start with "chain.".
// It is safe for concurrent callers; entries are ordered by the time they
// take the append lock. After Close it returns ErrClosed.
//
// When the write or the fsync fails, Append closes that descriptor, cuts
// the file back to the last acknowledged entry through a freshly opened
// one, and returns an error matching ErrWriteFailed: the entry is not
// acknowledged and Head does not move. If that recovery fails too, the
// next Append retries it before writing, and refuses with ErrWriteFailed
// while it keeps failing. Each Append makes at most one recovery attempt,
// so an Append whose retried recovery succeeds but whose write fails
// again leaves the recovery to the next Append. Healthy reports the state.
func (c *Chain) Append(source, kind string, payload any) (Entry, error) {
	e, err := c.append(source, kind, payload)
	if err != nil && c.m != nil && !errors.Is(err, ErrClosed) {
		c.m.appendErrors.Inc()
	}
	return e, err
}

func (c *Chain) append(source, kind string, payload any) (Entry, error) {
	if !validIdent(source) || !validIdent(kind) {
		return Entry{}, fmt.Errorf("append %s/%s: %w: source or kind is not an identifier", source, kind, ErrInvalidEntry)
	}
	if strings.HasPrefix(kind, reservedKindPrefix) {
		return Entry{}, fmt.Errorf("append %s/%s: %w: kind is reserved", source, kind, ErrInvalidEntry)
	}
	raw := []byte("{}")
	if payload != nil {
		var err error
		if raw, err = json.Marshal(payload); err != nil {
			return Entry{}, fmt.Errorf("append %s/%s: %w: %w", source, kind, ErrInvalidEntry, err)
		}
		if string(raw) == "null" {
			raw = []byte("{}")
		}
	}
	if raw[0] != '{' {
		return Entry{}, fmt.Errorf("append %s/%s: %w: payload is not a JSON object", source, kind, ErrInvalidEntry)
	}
	if len(raw) > MaxEntryBytes {
		return Entry{}, fmt.Errorf("append %s/%s: %w: payload of %d bytes exceeds %d", source, kind, ErrInvalidEntry, len(raw), MaxEntryBytes)
	}

	c.appendMu.Lock()
	defer c.appendMu.Unlock()
	if c.closed {
		return Entry{}, fmt.Errorf("append %s/%s: %w", source, kind, ErrClosed)
	}
	recovered := false // set once this Append has made its one recovery attempt
	if c.f == nil {
		if err := c.recoverFile(); err != nil {
			c.noteFailure(err, false, msgRetryFailed)
			return Entry{}, fmt.Errorf("append %s/%s: %w: %w", source, kind, ErrWriteFailed, err)
		}
		c.noteRecovered()
		recovered = true
	}
	c.mu.Lock()
	prev := c.head
	c.mu.Unlock()
	e := c.seal(source, kind, raw, prev, c.now())
	c.buf = appendLine(c.buf[:0], &e)
	if len(c.buf) > MaxEntryBytes {
		return Entry{}, fmt.Errorf("append %s/%s: %w: line of %d bytes exceeds %d", source, kind, ErrInvalidEntry, len(c.buf), MaxEntryBytes)
	}
	if err := c.writeLine(); err != nil {
		// Never touch this descriptor again: after a failed fsync the
		// kernel may have dropped the dirty pages and a later fsync on it
		// can report success for data that is gone.
		c.f.Close()
		c.f = nil
		if recovered {
			c.noteFailure(err, false, msgDeferred)
			return Entry{}, fmt.Errorf("append %s/%s: %w: %w", source, kind, ErrWriteFailed, err)
		}
		if rerr := c.recoverFile(); rerr != nil {
			c.noteFailure(fmt.Errorf("%w; %w", err, rerr), false, msgNotRecovered)
			return Entry{}, fmt.Errorf("append %s/%s: %w: %w; %w", source, kind, ErrWriteFailed, err, rerr)
		}
		c.noteFailure(err, true, msgTruncated)
		return Entry{}, fmt.Errorf("append %s/%s: %w: %w", source, kind, ErrWriteFailed, err)
	}
	c.size += int64(len(c.buf))
	c.setHead(e)
	c.noteWritable()
	return e, nil
}

// writeLine writes c.buf to c.f and fsyncs it. Called with appendMu held.
func (c *Chain) writeLine() error {
	n, err := c.f.Write(c.buf)
	if err == nil && n != len(c.buf) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return fmt.Errorf("write %d of %d bytes: %w", n, len(c.buf), err)
	}
	if err := c.f.Sync(); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	return nil
}

// Record appends an entry and drops it: the adapter for components that
// only need to know whether their audit record is durable.
func (c *Chain) Record(source, kind string, payload any) error {
	_, err := c.Append(source, kind, payload)
	return err
}

func (c *Chain) setHead(e Entry) {
	c.mu.Lock()
	c.head = e
	c.mu.Unlock()
	c.entries.Store(e.Seq)
}

// Head returns the seq and hash of the last acknowledged entry.
func (c *Chain) Head() (seq uint64, hash string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.head.Seq, c.head.Hash
}

// Entries returns the number of entries, the genesis included (equal to
// the head's seq).
func (c *Chain) Entries() uint64 { return c.entries.Load() }

// Path returns the path of the chain file.
func (c *Chain) Path() string { return c.path }

// Close waits for an append in progress, closes the file and unregisters
// the metrics. Later appends return ErrClosed, and so does Healthy. Close
// is idempotent.
func (c *Chain) Close() error {
	c.appendMu.Lock()
	defer c.appendMu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var err error
	if c.f != nil {
		err = c.f.Close()
		c.f = nil
	}
	c.mu.Lock()
	c.health = ErrClosed
	c.mu.Unlock()
	if c.m != nil {
		c.m.unregister()
	}
	if err != nil {
		return fmt.Errorf("close chain %q: %w", c.path, err)
	}
	return nil
}
