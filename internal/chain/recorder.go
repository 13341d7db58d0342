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
	// keys a Recorder could not track because its class's budget of keys
	// was already taken in the window.
	OverflowKind = "records.overflow" + SuppressedSuffix
)

// RecordClass says what bounds the senders of a RecordKey. Each class has
// its own budget of tracked keys and its own overflow, so a flood of one
// class (handshakes from ever new addresses, say) cannot take the keys of
// another: the refusals of admitted peers and the evidence of an attack
// are still chained one by one while it lasts.
type RecordClass uint8

const (
	// ClassPeer (the zero value): Sender is a party the node knows and
	// the configuration bounds, an admitted peer's node id (authenticated
	// by its mesh link) or a configured peer's address. Budget MaxKeys.
	ClassPeer RecordClass = iota
	// ClassSource: Sender is what a party the node does not know chose,
	// such as the remote address of a refused handshake, so their number
	// is bounded by nothing but the recorder. Budget MaxSourceKeys.
	ClassSource
	// ClassSecurity: the event is evidence the operator must see whoever
	// sent it, such as a key that differs from the one pinned for an
	// address, a notice from an untrusted signer or a request with a bad
	// signature. Its Sender must be bounded by the configuration (a
	// configured address, an admitted peer). Budget MaxSecurityKeys.
	ClassSecurity
	// numClasses is the number of classes.
	numClasses
)

// String returns the class's name (peer, source or security), as it
// appears in summaries, logs and the class label of
// nodeld_chain_records_overflow_total.
func (c RecordClass) String() string {
	switch c {
	case ClassPeer:
		return "peer"
	case ClassSource:
		return "source"
	case ClassSecurity:
		return "security"
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// MarshalText returns the class's name; a class out of range is an error.
func (c RecordClass) MarshalText() ([]byte, error) {
	if c >= numClasses {
		return nil, fmt.Errorf("record class %d out of range", uint8(c))
	}
	return []byte(c.String()), nil
}

// UnmarshalText parses a class's name.
func (c *RecordClass) UnmarshalText(text []byte) error {
	for i := range numClasses {
		if string(text) == i.String() {
			*c = i
			return nil
		}
	}
	return fmt.Errorf("unknown record class %q", text)
}

// The defaults for the zero fields of RecorderOptions.
const (
	// DefaultRecordWindow is the default RecorderOptions.Window.
	DefaultRecordWindow = time.Minute
	// DefaultRecordsPerKey is the default RecorderOptions.PerKey.
	DefaultRecordsPerKey = 1
	// DefaultRecordMaxKeys is the default RecorderOptions.MaxKeys.
	DefaultRecordMaxKeys = 256
	// DefaultRecordMaxSourceKeys is the default
	// RecorderOptions.MaxSourceKeys.
	DefaultRecordMaxSourceKeys = 64
	// DefaultRecordMaxSecurityKeys is the default
	// RecorderOptions.MaxSecurityKeys.
	DefaultRecordMaxSecurityKeys = 64
	// DefaultRecordMaxPeriod is the default RecorderOptions.MaxPeriod.
	DefaultRecordMaxPeriod = time.Hour
)

// Appender appends one entry to a chain; *Chain implements it.
type Appender interface {
	Append(source, kind string, payload any) (Entry, error)
}

var _ Appender = (*Chain)(nil)

// RecordKey identifies a stream of like events for a Recorder: who
// triggered them, what they are and why, and the class whose budget of
// keys it takes.
type RecordKey struct {
	// Class is the budget the key takes (see RecordClass); the caller
	// classifies, by what it knows of the sender and the reason.
	Class RecordClass
	// Sender is the party that triggered the event as the caller
	// authenticated it: a peer's node id or key, or a remote address. The
	// caller must not put a free string chosen by the remote party here:
	// every distinct Sender takes one of the slots of its class in the
	// window, and once they are taken the events of further keys of the
	// class are only counted together (memory and chain growth stay
	// bounded either way). At most MaxRecordKeyBytes.
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
	// MaxKeys is how many distinct keys of ClassPeer are tracked at
	// once; 0 means DefaultRecordMaxKeys. Events of further keys are
	// counted together and summed up in one OverflowKind entry of the
	// class per window.
	MaxKeys int
	// MaxSourceKeys is MaxKeys for ClassSource; 0 means
	// DefaultRecordMaxSourceKeys.
	MaxSourceKeys int
	// MaxSecurityKeys is MaxKeys for ClassSecurity; 0 means
	// DefaultRecordMaxSecurityKeys.
	MaxSecurityKeys int
	// MaxPeriod is the longest period a key that keeps repeating backs
	// off to; 0 means DefaultRecordMaxPeriod. It is rounded down to a
	// multiple of Window; a value below twice Window turns backoff off
	// (every period is one Window).
	MaxPeriod time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives summaries that could not be chained and, at most
	// twice per class and Window, the overflow (its first event, then its
	// summary); nil means no logging.
	Logger *zap.Logger
	// Registerer receives nodeld_chain_records_suppressed_total and
	// nodeld_chain_records_overflow_total; nil means no metrics. Register one Recorder per registry: the daemon shares
	// one Recorder among all components.
	Registerer prometheus.Registerer
}

// SuppressedEvent is the payload of a summary entry: how many events of one
// key a Recorder counted instead of chaining in one window. An overflow
// summary has Overflow set, its Class, no Sender, Kind or Reason, and its
// count by kind and reason in Reasons.
type SuppressedEvent struct {
	// Class, Sender, Kind and Reason are the RecordKey.
	Class  RecordClass `json:"class"`
	Sender string      `json:"sender"`
	Kind   string      `json:"kind"`
	Reason string      `json:"reason"`
	// Suppressed is the number of events counted and not chained.
	Suppressed uint64 `json:"suppressed"`
	// WindowStart and WindowEnd bound the period counted, in UTC: the
	// key's period (one Window, or longer for a key that kept repeating;
	// see Recorder), or the overflow's Window. WindowEnd is the period's
	// end, or the time Run stopped for the last one.
	WindowStart time.Time `json:"window_start"`
	WindowEnd   time.Time `json:"window_end"`
	// Overflow marks the summary of the keys of Class beyond its budget.
	Overflow bool `json:"overflow,omitempty"`
	// Reasons counts an overflow's events by kind and reason, in the order
	// first seen: at most MaxOverflowReasons pairs; the events of further
	// pairs are in Suppressed only.
	Reasons []OverflowReason `json:"reasons,omitempty"`
}

// OverflowReason is the count of one kind and reason in an overflow
// summary.
type OverflowReason struct {
	Kind       string `json:"kind"`
	Reason     string `json:"reason"`
	Suppressed uint64 `json:"suppressed"`
}

// Recorder chains events that a remote party can trigger (refused
// advertisements, ctl calls, handshakes, notices) without letting a flood
// of them grow the chain without bound, or an honest repeat grow it at a
// steady pace forever.
//
// Each key has a period, aligned to multiples of Window: within it the
// first PerKey events of the key are appended as given and the rest only
// counted; once it has closed, one summary entry records how many were
// counted, if any. A key's first period is one Window. A key that had
// events in a period is watched for the next one; a key that has events
// in period after period backs off: its second period is one Window
// again, and each further period twice as long as the one before, up to
// MaxPeriod. A period without events forgets the key, so its next event
// starts again at one Window.
//
// Keys are tracked per class (RecordClass), each class up to its own
// budget (MaxKeys, MaxSourceKeys, MaxSecurityKeys); the events of further
// keys of a class are counted in that class's overflow, summed up once
// per Window with its count per kind and reason. A class's overflow never
// takes a key of another class.
//
// The bound: the events of one Window, however many, make at most
// K*(PerKey+1)+3 entries, K the sum of the three budgets (771 with the
// defaults), and the recorder appends at most that many in any one
// Window: PerKey per tracked key whose period covers it, one summary per
// tracked key whose period closed, and one per class for the overflow.
// The steady growth: a key repeating more often than its budget lets
// through, forever, adds at most PerKey+1 entries per MaxPeriod once
// backed off: two an hour with the defaults, after a ramp of 64 minutes
// (periods of 1, 1, 2, 4, 8, 16 and 32 minutes, then 60).
//
// A period closes lazily, when a Record or Flush sees a time past it. Run
// flushes every Window, so the summaries of a flood followed by silence
// still land, at most one Window after its period ended.
//
// It is safe for concurrent use. Its mutex is never held across Append
// or a log write, so neither the recorder nor a slow disk under it holds
// up a suppressed event, and the recorder never delays other callers of
// the chain.
type Recorder struct {
	app       Appender
	window    time.Duration
	maxPeriod time.Duration
	perKey    int
	maxKeys   [numClasses]int
	now       func() time.Time
	log       *zap.Logger
	m         *recorderMetrics

	// mu guards index, keys, tracked, next, first and overflow.
	mu sync.Mutex
	// index maps each tracked key to its state in keys.
	index map[RecordKey]*keyState
	// keys are the tracked keys in the order first tracked, so summaries
	// are appended in a stable order; tracked counts them per class, at
	// most maxKeys of each.
	keys    []*keyState
	tracked [numClasses]int
	// next is the earliest end and first the earliest start of the
	// tracked periods and the overflows' windows: nothing closes while
	// now lies in [first, next). Both are zero while nothing is tracked.
	next, first time.Time
	// overflow counts, per class, the events of keys beyond its budget,
	// per Window.
	overflow [numClasses]overflowCount
}

// keyState is what a Recorder knows of one tracked key.
type keyState struct {
	key RecordKey
	// start and end bound the key's current period.
	start, end time.Time
	// repeats is the number of periods in a row, right before this one,
	// in which the key had events; it sets the period's length.
	repeats    int
	source     string // source of the period's first event, for its summary
	chained    int    // events of the period handed to Append
	suppressed uint64 // events of the period counted instead
}

// overflowCount counts the events of one class's untracked keys in one
// Window.
type overflowCount struct {
	start      time.Time // zero while nothing is counted
	source     string    // source of the window's first such event
	suppressed uint64
	// reasons counts them by kind and reason, at most MaxOverflowReasons
	// pairs.
	reasons []OverflowReason
}

// count adds one event of key, by its kind and reason while fewer than
// MaxOverflowReasons pairs are counted or the pair is one of them.
func (o *overflowCount) count(key RecordKey) {
	o.suppressed++
	for i := range o.reasons {
		if r := &o.reasons[i]; r.Kind == key.Kind && r.Reason == key.Reason {
			r.Suppressed++
			return
		}
	}
	if len(o.reasons) < MaxOverflowReasons {
		o.reasons = append(o.reasons, OverflowReason{Kind: key.Kind, Reason: key.Reason, Suppressed: 1})
	}
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
	if opts.MaxKeys < 0 || opts.MaxSourceKeys < 0 || opts.MaxSecurityKeys < 0 {
		errs = append(errs, fmt.Errorf("max keys %d, %d, %d: one is negative", opts.MaxKeys, opts.MaxSourceKeys, opts.MaxSecurityKeys))
	}
	if opts.MaxPeriod < 0 {
		errs = append(errs, fmt.Errorf("max period %v is negative", opts.MaxPeriod))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("new chain recorder: %w", err)
	}
	r := &Recorder{
		app:    app,
		window: cmp.Or(opts.Window, DefaultRecordWindow),
		perKey: cmp.Or(opts.PerKey, DefaultRecordsPerKey),
		maxKeys: [numClasses]int{
			ClassPeer:     cmp.Or(opts.MaxKeys, DefaultRecordMaxKeys),
			ClassSource:   cmp.Or(opts.MaxSourceKeys, DefaultRecordMaxSourceKeys),
			ClassSecurity: cmp.Or(opts.MaxSecurityKeys, DefaultRecordMaxSecurityKeys),
		},
		now:   opts.Now,
		log:   opts.Logger,
		index: map[RecordKey]*keyState{},
	}
	r.maxPeriod = max(cmp.Or(opts.MaxPeriod, DefaultRecordMaxPeriod).Truncate(r.window), r.window)
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
// payload if it is within the key's budget for its period. It returns
// whether the event was appended. A suppressed event returns (false, nil):
// it will be counted in the key's summary, or its class's overflow. An
// error is ErrInvalidEntry for a key or source that cannot be chained
// (nothing is counted), or the error of Append (the event used its budget
// but is not in the chain). The summaries of periods that closed before
// the event are appended first; one that cannot be is logged, not
// returned. The first event of a class's overflow in a Window is logged.
func (r *Recorder) Record(key RecordKey, source string, payload any) (chained bool, err error) {
	if err := checkRecord(key, source); err != nil {
		return false, err
	}
	now := r.now()
	r.mu.Lock()
	due := r.closeLocked(now, false)
	res := r.admitLocked(now, key, source)
	r.mu.Unlock()

	if err := r.appendSummaries(due); err != nil {
		r.log.Error("suppressed records summary not chained", zap.Error(err))
	}
	if res != admitChain {
		if r.m != nil {
			r.m.suppressed.WithLabelValues(key.Kind).Inc()
			if res != admitCounted {
				r.m.overflow.WithLabelValues(key.Class.String()).Inc()
			}
		}
		if res == admitFirstOverflow {
			r.log.Warn("chain records overflow, further events of the class are counted until the window ends",
				zap.Stringer("class", key.Class), zap.String("sender", key.Sender), zap.String("kind", key.Kind),
				zap.String("reason", key.Reason), zap.Int("keys", r.maxKeys[key.Class]))
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
	case key.Class >= numClasses:
		return fmt.Errorf("record %s: %w: %v", key.Kind, ErrInvalidEntry, key.Class)
	}
	return nil
}

// Flush closes the periods that now lies outside of (at or after their
// end, or before their start after the clock stepped back) and appends
// their summaries. Run calls it every Window; a caller with its own loop,
// or a test with a fake clock, may call it instead. The error says which
// summaries could not be chained; their counts are lost.
func (r *Recorder) Flush(now time.Time) error {
	r.mu.Lock()
	due := r.closeLocked(now, false)
	r.mu.Unlock()
	return r.appendSummaries(due)
}

// Run flushes every Window until ctx is done, so that the summaries of a
// flood are chained within a Window of its period's end even if no event
// follows. When ctx is done it closes every open period early (their
// summaries end at that time), so a flood just before shutdown is still
// summed up, and returns nil. It runs in the caller's goroutine and starts none;
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

// closeLocked closes every period that now lies outside of, or every
// period when force is set, and returns their summaries: one per key with
// suppressed events, in the order the keys were first tracked, then the
// overflows', in class order. A closed key that had events gets its next
// period unless force is set or the clock stepped back; one without is
// forgotten. Called with mu held.
func (r *Recorder) closeLocked(now time.Time, force bool) []summary {
	if r.next.IsZero() || !force && now.Before(r.next) && !now.Before(r.first) {
		return nil
	}
	var due []summary
	kept := r.keys[:0]
	r.tracked = [numClasses]int{}
	for _, k := range r.keys {
		back := now.Before(k.start)
		if !force && !back && now.Before(k.end) {
			kept = append(kept, k)
			r.tracked[k.key.Class]++
			continue
		}
		end := k.end
		if force && !back && now.Before(end) {
			end = now
		}
		if k.suppressed > 0 {
			due = append(due, summary{source: k.source, kind: k.key.Kind + SuppressedSuffix, event: SuppressedEvent{
				Class: k.key.Class, Sender: k.key.Sender, Kind: k.key.Kind, Reason: k.key.Reason, Suppressed: k.suppressed,
				WindowStart: k.start.UTC(), WindowEnd: end.UTC(),
			}})
		}
		// The next period starts where this one ended. No event fell in
		// it so far (one would have closed this period), so a next period
		// that has ended too would close empty: forget the key now.
		next := k.end.Add(r.period(k.repeats + 1))
		if force || back || k.chained == 0 && k.suppressed == 0 || !now.Before(next) {
			delete(r.index, k.key)
			continue
		}
		k.repeats++
		k.start, k.end = k.end, next
		k.source, k.chained, k.suppressed = "", 0, 0
		kept = append(kept, k)
		r.tracked[k.key.Class]++
	}
	clear(r.keys[len(kept):])
	r.keys = kept

	for c := range numClasses {
		o := &r.overflow[c]
		if o.start.IsZero() {
			continue
		}
		end := o.start.Add(r.window)
		inside := !now.Before(o.start) && now.Before(end)
		if inside && !force {
			continue
		}
		if inside {
			end = now
		}
		due = append(due, summary{source: o.source, kind: OverflowKind, event: SuppressedEvent{
			Class: c, Suppressed: o.suppressed, WindowStart: o.start.UTC(), WindowEnd: end.UTC(), Overflow: true,
			Reasons: o.reasons,
		}})
		*o = overflowCount{}
	}

	r.next, r.first = time.Time{}, time.Time{}
	for _, k := range r.keys {
		r.extendLocked(k.start, k.end)
	}
	for _, o := range r.overflow {
		if !o.start.IsZero() {
			r.extendLocked(o.start, o.start.Add(r.window))
		}
	}
	return due
}

// period returns the length of a key's period after repeats periods in a
// row with events: one Window for the first two, then doubling up to
// maxPeriod.
func (r *Recorder) period(repeats int) time.Duration {
	d := r.window
	for i := 1; i < repeats && d < r.maxPeriod; i++ {
		d *= 2
	}
	return min(d, r.maxPeriod)
}

// extendLocked widens [first, next) to take in a period from start to end.
// Called with mu held.
func (r *Recorder) extendLocked(start, end time.Time) {
	if r.next.IsZero() || end.Before(r.next) {
		r.next = end
	}
	if r.first.IsZero() || start.Before(r.first) {
		r.first = start
	}
}

// admitResult is what admitLocked did with an event.
type admitResult int

const (
	admitChain         admitResult = iota // within its key's budget: chain it
	admitCounted                          // counted for its key's summary
	admitOverflow                         // counted in its class's overflow
	admitFirstOverflow                    // the first such in the overflow's Window
)

// admitLocked counts one event of key at now, tracking the key with a
// period of one Window if it is not tracked yet and its class has room,
// and says what became of it. Called with mu held, after
// closeLocked(now).
func (r *Recorder) admitLocked(now time.Time, key RecordKey, source string) admitResult {
	k, ok := r.index[key]
	if !ok {
		if r.tracked[key.Class] >= r.maxKeys[key.Class] {
			o := &r.overflow[key.Class]
			res := admitOverflow
			if o.start.IsZero() {
				*o = overflowCount{start: now.Truncate(r.window), source: source}
				r.extendLocked(o.start, o.start.Add(r.window))
				res = admitFirstOverflow
			}
			o.count(key)
			return res
		}
		start := now.Truncate(r.window)
		k = &keyState{key: key, start: start, end: start.Add(r.window)}
		r.index[key] = k
		r.keys = append(r.keys, k)
		r.tracked[key.Class]++
		r.extendLocked(k.start, k.end)
	}
	if k.chained == 0 && k.suppressed == 0 {
		k.source = source
	}
	if k.chained < r.perKey {
		k.chained++
		return admitChain
	}
	k.suppressed++
	return admitCounted
}

// appendSummaries appends due in order and stops at the first error, which
// it returns with what was lost: once the chain refuses one entry the next
// would most likely fail too, each costing the chain a recovery attempt.
// An overflow's summary is logged too, so the flood that filled a class
// is seen where an operator looks first.
func (r *Recorder) appendSummaries(due []summary) error {
	for i, s := range due {
		if s.event.Overflow {
			r.log.Warn("chain records overflow summed up", zap.Stringer("class", s.event.Class),
				zap.Uint64("suppressed", s.event.Suppressed), zap.Time("window_start", s.event.WindowStart),
				zap.Time("window_end", s.event.WindowEnd), zap.Any("reasons", s.event.Reasons))
		}
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
