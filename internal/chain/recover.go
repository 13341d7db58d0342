package chain

import (
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"
)

// Recovery results, the values of the result label of
// nodeld_chain_recoveries_total.
const (
	recoveryOK     = "ok"
	recoveryFailed = "failed"
)

// recoverFile makes the file hold exactly the acknowledged entries again after
// a write or sync error: it closes the descriptor that failed (if still
// open), opens the chain file again, checks it is the file opened at Open
// and at least as long as the acknowledged entries, truncates it to c.size
// and fsyncs the truncation through the new descriptor. On success c.f is
// the new descriptor; on failure c.f is nil and the next Append retries.
// The failed descriptor is never synced again. Called with appendMu held.
func (c *Chain) recoverFile() error {
	err := c.reopenTruncated()
	if c.m != nil {
		result := recoveryOK
		if err != nil {
			result = recoveryFailed
		}
		c.m.recoveries.WithLabelValues(result).Inc()
	}
	if err != nil {
		return fmt.Errorf("recover chain %q: %w", c.path, err)
	}
	return nil
}

func (c *Chain) reopenTruncated() error {
	if c.f != nil {
		c.f.Close() // it already failed; its close error adds nothing
		c.f = nil
	}
	f, err := c.openFile(c.path, os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("reopen: %w", err)
	}
	if err := c.truncate(f); err != nil {
		f.Close()
		return err
	}
	c.f = f
	return nil
}

// truncate cuts f, a fresh descriptor on the chain file, back to c.size and
// fsyncs it.
func (c *Chain) truncate(f File) error {
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	if !os.SameFile(c.ident, st) {
		return fmt.Errorf("%q is no longer the file opened at Open", c.path)
	}
	if st.Size() < c.size {
		return fmt.Errorf("file has %d bytes, fewer than the %d of its acknowledged entries", st.Size(), c.size)
	}
	if err := f.Truncate(c.size); err != nil {
		return fmt.Errorf("truncate to %d bytes: %w", c.size, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync truncation: %w", err)
	}
	return nil
}

// Healthy returns nil while the chain is writable: since Open, or since
// the last Append that wrote its entry. From a write, sync or recovery
// error until an Append succeeds again it returns a *NotWritableError
// (matching ErrWriteFailed) saying since when appends fail, the last error
// and whether the file has been cut back to the last acknowledged entry.
// After Close it returns ErrClosed. It never waits for an append or a
// disk, so a readiness probe may call it freely.
func (c *Chain) Healthy() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.health
}

// Log messages of failures, by what happened.
const (
	msgTruncated    = "chain write failed; truncated to last acknowledged entry"
	msgNotRecovered = "chain write failed; recovery failed"
	msgDeferred     = "chain write failed; recovery left to the next append"
	msgRetryFailed  = "chain recovery failed"
)

// noteFailure records that appends fail with err; recovered says whether
// the file now holds exactly the acknowledged entries behind an open
// descriptor, and msg says what happened. It logs a change of state at
// error level and a repeat at debug level (the metrics count every one).
// Called with appendMu held.
func (c *Chain) noteFailure(err error, recovered bool, msg string) {
	now := c.now()
	c.mu.Lock()
	prev, _ := c.health.(*NotWritableError)
	since := now
	if prev != nil {
		since = prev.Since
	}
	c.health = &NotWritableError{Since: since, Recovered: recovered, Err: err}
	seq := c.head.Seq
	c.mu.Unlock()
	if c.m != nil {
		c.m.writable.Set(0)
	}

	level := zap.ErrorLevel
	if prev != nil && prev.Recovered == recovered {
		level = zap.DebugLevel
	}
	c.log.Log(level, msg,
		zap.String("path", c.path),
		zap.Uint64("head_seq", seq),
		zap.Int64("offset", c.size),
		zap.Time("since", since),
		zap.Error(err))
}

// noteRecovered records that a recovery owed by an earlier failure
// succeeded; the chain stays not writable until an entry is written.
// Called with appendMu held.
func (c *Chain) noteRecovered() {
	c.mu.Lock()
	prev, _ := c.health.(*NotWritableError)
	if prev != nil {
		c.health = &NotWritableError{Since: prev.Since, Recovered: true, Err: prev.Err}
	}
	seq := c.head.Seq
	c.mu.Unlock()
	c.log.Info("chain recovered; truncated to last acknowledged entry",
		zap.String("path", c.path),
		zap.Uint64("head_seq", seq),
		zap.Int64("offset", c.size))
}

// noteWritable records a successful append. Called with appendMu held.
func (c *Chain) noteWritable() {
	c.mu.Lock()
	prev, _ := c.health.(*NotWritableError)
	c.health = nil
	c.mu.Unlock()
	if prev == nil {
		return
	}
	if c.m != nil {
		c.m.writable.Set(1)
	}
	c.log.Info("chain writable again",
		zap.String("path", c.path),
		zap.Time("since", prev.Since),
		zap.Duration("not_writable_for", c.now().Sub(prev.Since)))
}

// NotWritableError is what Healthy returns while appends fail. It matches
// ErrWriteFailed.
type NotWritableError struct {
	// Since is when the first of the consecutive failures happened.
	Since time.Time
	// Recovered says the file was cut back to the last acknowledged entry
	// behind a freshly opened descriptor after the last error, so the next
	// Append writes at once. False means the next Append first retries
	// the recovery.
	Recovered bool
	// Err is the last write, sync or recovery error.
	Err error
}

// Error says since when the chain is not writable, whether it was cut
// back, and why.
func (e *NotWritableError) Error() string {
	state := "recovery failed"
	if e.Recovered {
		state = "truncated to last acknowledged entry"
	}
	return fmt.Sprintf("chain not writable since %s (%s): %v", e.Since.UTC().Format(time.RFC3339Nano), state, e.Err)
}

// Unwrap returns the last error.
func (e *NotWritableError) Unwrap() error { return e.Err }

// Is reports whether target is ErrWriteFailed, which every
// NotWritableError matches.
func (e *NotWritableError) Is(target error) bool { return target == ErrWriteFailed }
