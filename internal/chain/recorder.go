package chain

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

const (
	// SuppressedSuffix ends the kind of a summary entry: the events of
	// kind K that a Recorder counted instead of chaining are summed up in
	// one entry of kind K+SuppressedSuffix.
	SuppressedSuffix = ".suppressed"
	// OverflowKind is the kind of the summary entry counting the events of
	// keys a Recorder could not track because MaxKeys keys were already
	// tracked in the window.
	OverflowKind = "records.overflow" + SuppressedSuffix
)

// The defaults for the zero fields of RecorderOptions.
const (
	// DefaultRecordWindow is the default RecorderOptions.Window.
	DefaultRecordWindow = time.Minute
	// DefaultRecordsPerKey is the default RecorderOptions.PerKey.
	DefaultRecordsPerKey = 1
	// DefaultRecordMaxKeys is the default RecorderOptions.MaxKeys.
	DefaultRecordMaxKeys = 256
)

// Appender appends one entry to a chain; *Chain implements it.
type Appender interface {
	Append(source, kind string, payload any) (Entry, error)
}

var _ Appender = (*Chain)(nil)

// RecordKey identifies a stream of like events for a Recorder: who
// triggered them, what they are and why.
type RecordKey struct {
	// Sender is the party that triggered the event as the caller
	// authenticated it: a peer's node id or key, or a remote address. The
	// caller must not put a free string chosen by the remote party here:
	// every distinct Sender takes one of the MaxKeys slots of the window,
	// and once they are taken the events of further keys are only counted
	// together (memory and chain growth stay bounded either way). At most
	// MaxRecordKeyBytes.
	Sender string
	// Kind is the kind of the event's chain entry (e.g.
	// "mesh.peer.refused"), from the fixed set in the callers' code. It is
	// also a metric label. The kind of its summaries is Kind +
	// SuppressedSuffix, which must fit MaxIdentBytes.
	Kind string
	// Reason is a stable code from a fixed set (e.g. "unknown_key"), not
	// free text. At most MaxRecordKeyBytes.
	Reason string
}

// RecorderOptions configure a Recorder. The zero value is usable.
type RecorderOptions struct {
	// Window is the length of a counting window; 0 means
	// DefaultRecordWindow. Windows are aligned to multiples of Window
	// (time.Time.Truncate).
	Window time.Duration
	// PerKey is how many events of one key are chained per window; 0
	// means DefaultRecordsPerKey.
	PerKey int
	// MaxKeys is how many distinct keys are tracked per window; 0 means
	// DefaultRecordMaxKeys. Events of further keys are counted together
	// and summed up in one OverflowKind entry.
	MaxKeys int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives summaries that could not be chained; nil means no
	// logging.
	Logger *zap.Logger
	// Registerer receives nodeld_chain_records_suppressed_total; nil means
	// no metrics. Register one Recorder per registry: the daemon shares
	// one Recorder among all components.
	Registerer prometheus.Registerer
}

// SuppressedEvent is the payload of a summary entry: how many events of one
// key a Recorder counted instead of chaining in one window. The overflow
// summary has Overflow set and no Sender, Kind or Reason.
type SuppressedEvent struct {
	// Sender, Kind and Reason are the RecordKey.
	Sender string `json:"sender"`
	Kind   string `json:"kind"`
	Reason string `json:"reason"`
	// Suppressed is the number of events counted and not chained.
	Suppressed uint64 `json:"suppressed"`
	// WindowStart and WindowEnd bound the window, in UTC. WindowEnd is
	// WindowStart+Window, or the time Run stopped for the last window.
	WindowStart time.Time `json:"window_start"`
	WindowEnd   time.Time `json:"window_end"`
	// Overflow marks the summary of the keys beyond MaxKeys.
	Overflow bool `json:"overflow,omitempty"`
}

// Recorder chains events that a remote party can trigger (refused
// advertisements, ctl calls, handshakes, notices) without letting a flood
// of them grow the chain without bound. Within a window the first PerKey
// events of each key are appended as given and the rest only counted;
// once the window has closed, one summary entry per key that had events
// counted records how many. Events of one window therefore make at most
// MaxKeys*(PerKey+1)+1 entries, whatever their number: PerKey per tracked
// key while it is open, then one summary per tracked key and one for the
// overflow.
//
// A window closes lazily, when a Record or Flush sees a time past it. Run
// flushes every Window, so the summaries of a flood followed by silence
// still land, at most one Window after its window ended.
//
// It is safe for concurrent use. Its mutex is never held across Append,
// so neither the recorder nor a slow disk under it holds up a suppressed
// event, and the recorder never delays other callers of the chain.
type Recorder struct {
	app     Appender
	window  time.Duration
	perKey  int
	maxKeys int
	now     func() time.Time
	log     *zap.Logger
	m       *recorderMetrics

	// mu guards start, index, keys and overflow.
	mu sync.Mutex
	// start is the start of the open window; zero while none is open.
	start time.Time
	// index maps each key tracked in the open window to its place in keys.
	index map[RecordKey]int
	// keys are the tracked keys in the order first seen, so summaries are
	// appended in a stable order; at most maxKeys.
	keys []keyCount
	// overflow counts the events of keys beyond maxKeys.
	overflow keyCount
}

// keyCount is what a Recorder knows of one key in the open window.
type keyCount struct {
	key        RecordKey
	source     string // source of the key's first event, for its summary
	chained    int    // events handed to Append
	suppressed uint64 // events counted instead
}

// summary is a summary entry to append.
type summary struct {
	source, kind string
	event        SuppressedEvent
}

// NewRecorder returns a Recorder appending to app. It validates opts and
// registers the metrics; it starts nothing (see Run).
func NewRecorder(app Appender, opts RecorderOptions) (*Recorder, error) {
	var errs []error
	if app == nil {
		errs = append(errs, errors.New("appender is nil"))
	}
	if opts.Window < 0 {
		errs = append(errs, fmt.Errorf("window %v is negative", opts.Window))
	}
	if opts.PerKey < 0 {
		errs = append(errs, fmt.Errorf("per-key budget %d is negative", opts.PerKey))
	}
	if opts.MaxKeys < 0 {
		errs = append(errs, fmt.Errorf("max keys %d is negative", opts.MaxKeys))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("new chain recorder: %w", err)
	}
	r := &Recorder{
		app:     app,
		window:  cmp.Or(opts.Window, DefaultRecordWindow),
		perKey:  cmp.Or(opts.PerKey, DefaultRecordsPerKey),
		maxKeys: cmp.Or(opts.MaxKeys, DefaultRecordMaxKeys),
		now:     opts.Now,
		log:     opts.Logger,
		index:   map[RecordKey]int{},
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.log == nil {
		r.log = zap.NewNop()
	}
	if opts.Registerer != nil {
		m, err := newRecorderMetrics(opts.Registerer)
		if err != nil {
			return nil, fmt.Errorf("new chain recorder: %w", err)
		}
		r.m = m
	}
	return r, nil
}

// Record counts one event of key and appends it with source, key.Kind and
// payload if it is within the key's budget for the window. It returns
// whether the event was appended. A suppressed event returns (false, nil):
// it will be counted in the key's summary. An error is ErrInvalidEntry
// for a key or source that cannot be chained (nothing is counted), or the
// error of Append (the event used its budget but is not in the chain).
// If the event falls after the open window, that window's summaries are
// appended first; one that cannot be is logged, not returned.
func (r *Recorder) Record(key RecordKey, source string, payload any) (chained bool, err error) {
	if err := checkRecord(key, source); err != nil {
		return false, err
	}
	now := r.now()
	r.mu.Lock()
	due := r.closeLocked(now, false)
	chain := r.admitLocked(now, key, source)
	r.mu.Unlock()

	if err := r.appendSummaries(due); err != nil {
		r.log.Error("suppressed records summary not chained", zap.Error(err))
	}
	if !chain {
		if r.m != nil {
			r.m.suppressed.WithLabelValues(key.Kind).Inc()
		}
		return false, nil
	}
	if _, err := r.app.Append(source, key.Kind, payload); err != nil {
		return false, fmt.Errorf("record %s from %q: %w", key.Kind, key.Sender, err)
	}
	return true, nil
}

// checkRecord refuses what Append would refuse for the event or its
// summary, before anything is counted.
func checkRecord(key RecordKey, source string) error {
	switch {
	case !validIdent(source):
		return fmt.Errorf("record %s: %w: source %q is not an identifier", key.Kind, ErrInvalidEntry, source)
	case !validIdent(key.Kind + SuppressedSuffix), !validIdent(key.Kind):
		return fmt.Errorf("record %q: %w: kind is not an identifier of at most %d bytes", key.Kind, ErrInvalidEntry, MaxIdentBytes-len(SuppressedSuffix))
	case strings.HasPrefix(key.Kind, reservedKindPrefix):
		return fmt.Errorf("record %s: %w: kind is reserved", key.Kind, ErrInvalidEntry)
	case len(key.Sender) > MaxRecordKeyBytes, len(key.Reason) > MaxRecordKeyBytes:
		return fmt.Errorf("record %s: %w: sender or reason longer than %d bytes", key.Kind, ErrInvalidEntry, MaxRecordKeyBytes)
	}
	return nil
}

// Flush closes the open window if now is outside it (at or after its end,
// or before its start after the clock stepped back) and appends its
// summaries. Run calls it every Window; a caller with its own loop, or a
// test with a fake clock, may call it instead. The error says which
// summaries could not be chained; their counts are lost.
func (r *Recorder) Flush(now time.Time) error {
	r.mu.Lock()
	due := r.closeLocked(now, false)
	r.mu.Unlock()
	return r.appendSummaries(due)
}

// Run flushes every Window until ctx is done, so that the summaries of a
// flood are chained within a Window of its window's end even if no event
// follows. When ctx is done it closes the open window early (its summaries
// end at that time), so a flood just before shutdown is still summed up,
// and returns nil. It runs in the caller's goroutine and starts none;
// failures to chain summaries are logged.
func (r *Recorder) Run(ctx context.Context) error {
	t := time.NewTicker(r.window)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			r.mu.Lock()
			due := r.closeLocked(r.now(), true)
			r.mu.Unlock()
			if err := r.appendSummaries(due); err != nil {
				r.log.Error("suppressed records summary not chained", zap.Error(err))
			}
			return nil
		case <-t.C:
			if err := r.Flush(r.now()); err != nil {
				r.log.Error("suppressed records summary not chained", zap.Error(err))
			}
		}
	}
}

// closeLocked closes the open window if now lies outside it, or in any
// case when force is set, and returns its summaries: one per tracked key
// with suppressed events, in the order first seen, then the overflow's.
// Called with mu held.
func (r *Recorder) closeLocked(now time.Time, force bool) []summary {
	if r.start.IsZero() {
		return nil
	}
	end := r.start.Add(r.window)
	inside := !now.Before(r.start) && now.Before(end)
	if inside && !force {
		return nil
	}
	if inside {
		end = now
	}
	var due []summary
	for _, k := range r.keys {
		if k.suppressed == 0 {
			continue
		}
		due = append(due, summary{source: k.source, kind: k.key.Kind + SuppressedSuffix, event: SuppressedEvent{
			Sender: k.key.Sender, Kind: k.key.Kind, Reason: k.key.Reason, Suppressed: k.suppressed,
			WindowStart: r.start.UTC(), WindowEnd: end.UTC(),
		}})
	}
	if r.overflow.suppressed > 0 {
		due = append(due, summary{source: r.overflow.source, kind: OverflowKind, event: SuppressedEvent{
			Suppressed: r.overflow.suppressed, WindowStart: r.start.UTC(), WindowEnd: end.UTC(), Overflow: true,
		}})
	}
	clear(r.index)
	clear(r.keys)
	r.keys = r.keys[:0]
	r.overflow = keyCount{}
	r.start = time.Time{}
	return due
}

// admitLocked counts one event of key at now, opening a window if none is
// open, and reports whether it is within the key's budget. Called with mu
// held.
func (r *Recorder) admitLocked(now time.Time, key RecordKey, source string) bool {
	if r.start.IsZero() {
		r.start = now.Truncate(r.window)
	}
	i, ok := r.index[key]
	if !ok {
		if len(r.keys) >= r.maxKeys {
			if r.overflow.suppressed == 0 {
				r.overflow.source = source
			}
			r.overflow.suppressed++
			return false
		}
		i = len(r.keys)
		r.index[key] = i
		r.keys = append(r.keys, keyCount{key: key, source: source})
	}
	k := &r.keys[i]
	if k.chained < r.perKey {
		k.chained++
		return true
	}
	k.suppressed++
	return false
}

// appendSummaries appends due in order and stops at the first error, which
// it returns with what was lost: once the chain refuses one entry the next
// would most likely fail too, each costing the chain a recovery attempt.
func (r *Recorder) appendSummaries(due []summary) error {
	for i, s := range due {
		if _, err := r.app.Append(s.source, s.kind, s.event); err != nil {
			var lost uint64
			for _, l := range due[i:] {
				lost += l.event.Suppressed
			}
			return fmt.Errorf("summaries of suppressed records: %d of %d not chained, counting %d records: %w", len(due)-i, len(due), lost, err)
		}
	}
	return nil
}
