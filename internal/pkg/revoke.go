package pkg

import (
	"cmp"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nodeld/nodeld/internal/atomicfile"
	"github.com/nodeld/nodeld/internal/grammar"
)

// RevocationsFile is the revocation list's file name in the data dir.
const RevocationsFile = "revocations.json"

// revocationsVersion is the file format version.
const revocationsVersion = 1

// Revocation subject kinds.
const (
	// SubjectPackage revokes a package id, every version.
	SubjectPackage = "package"
	// SubjectSigner revokes a publisher key (64 lower-case hex): any
	// package carrying a valid signature by it.
	SubjectSigner = "signer"
	// SubjectArtifact revokes a SHA-256 (64 lower-case hex): a package
	// whose manifest hash or any listed file has it.
	SubjectArtifact = "artifact"
)

// ErrStaleNotice is returned by ApplyNotice for a notice whose sequence
// number is not above the last one applied from its issuer: a replay or a
// reordering, never applied.
var ErrStaleNotice = errors.New("revocation notice is not newer than the last one applied from its controller")

// Subject is one revoked thing.
type Subject struct {
	// Kind is SubjectPackage, SubjectSigner or SubjectArtifact.
	Kind string `json:"kind"`
	// Value is the package id, the hex key or the hex hash.
	Value string `json:"value"`
	// Reason says why, for people; at most MaxReasonLen bytes.
	Reason string `json:"reason,omitempty"`
	// At is when it was revoked.
	At time.Time `json:"at"`
	// By is who revoked it ("operator", "controller n-..."); at most
	// MaxByLen bytes.
	By string `json:"by,omitempty"`
}

// String names the subject the way refusals do: "package 'x'".
func (s Subject) String() string { return s.Kind + " '" + s.Value + "'" }

// Validate checks kind, value and the bounds of reason and by.
func (s Subject) Validate() error {
	switch s.Kind {
	case SubjectPackage:
		if !grammar.ValidName(s.Value) {
			return fmt.Errorf("revocation: %q is not a package id", clip(s.Value))
		}
	case SubjectSigner:
		if !validHex(s.Value, ed25519.PublicKeySize) {
			return fmt.Errorf("revocation: %q is not a 64 lower-case hex public key", clip(s.Value))
		}
	case SubjectArtifact:
		if !validSHA256(s.Value) {
			return fmt.Errorf("revocation: %q is not a 64 lower-case hex SHA-256", clip(s.Value))
		}
	default:
		return fmt.Errorf("revocation: kind %q is not %s, %s or %s", clip(s.Kind), SubjectPackage, SubjectSigner, SubjectArtifact)
	}
	if len(s.Reason) > MaxReasonLen || !utf8.ValidString(s.Reason) {
		return fmt.Errorf("revocation: reason is longer than %d bytes or not UTF-8", MaxReasonLen)
	}
	if len(s.By) > MaxByLen || !utf8.ValidString(s.By) {
		return fmt.Errorf("revocation: by is longer than %d bytes or not UTF-8", MaxByLen)
	}
	return nil
}

type subjectKey struct{ kind, value string }

// revState is one immutable version of the list; mutations build a new
// one.
type revState struct {
	gen      uint64
	subjects map[subjectKey]Subject
	issuers  map[string]uint64 // controller key hex -> last applied notice seq
}

func (s revState) clone() revState {
	return revState{gen: s.gen, subjects: maps.Clone(s.subjects), issuers: maps.Clone(s.issuers)}
}

// revFile is revocations.json.
type revFile struct {
	Version    int               `json:"version"`
	Generation uint64            `json:"generation"`
	Subjects   []Subject         `json:"subjects"`
	Issuers    map[string]uint64 `json:"issuers,omitempty"`
}

// Revocations is the node's persisted revocation list. All methods are
// safe for concurrent use.
type Revocations struct {
	path string
	now  func() time.Time

	// writeMu serialises mutations: each reads the state, writes the file
	// and installs the new state under it, so the file and memory advance
	// in the same order. It is held across the file write; mu is not.
	writeMu sync.Mutex

	mu sync.Mutex
	// state is the current list; guarded by mu.
	state revState
	// subs are the change channels of Subscribe; guarded by mu.
	subs map[int]chan struct{}
	// nextSub numbers subscriptions; guarded by mu.
	nextSub int
}

// OpenRevocations reads the list at path (normally
// <data_dir>/revocations.json). A missing file is an empty list; a file
// that cannot be read or decoded is an error, never an empty list (fail
// closed), as is one writable by group or others. now stamps revocations
// made without a time; nil means time.Now.
func OpenRevocations(path string, now func() time.Time) (*Revocations, error) {
	if now == nil {
		now = time.Now
	}
	r := &Revocations{path: path, now: now, subs: map[int]chan struct{}{}}
	r.state = revState{subjects: map[subjectKey]Subject{}, issuers: map[string]uint64{}}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open revocations %q: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("open revocations %q: %w", path, err)
	}
	if perm := st.Mode().Perm(); perm&0o022 != 0 {
		return nil, fmt.Errorf("open revocations %q: mode %04o is writable by group or others (chmod 600 it)", path, perm)
	}
	data, err := readOpenBounded(f, path, MaxRevocationsFileBytes)
	if err != nil {
		return nil, fmt.Errorf("open revocations %q: %w", path, err)
	}
	state, err := parseRevocations(data)
	if err != nil {
		return nil, fmt.Errorf("open revocations %q: %w", path, err)
	}
	r.state = state
	return r, nil
}

// parseRevocations decodes and validates revocations.json.
func parseRevocations(data []byte) (revState, error) {
	if len(data) > MaxRevocationsFileBytes {
		return revState{}, fmt.Errorf("%d bytes, limit %d", len(data), MaxRevocationsFileBytes)
	}
	var f revFile
	if err := decodeStrict(data, &f); err != nil {
		return revState{}, fmt.Errorf("decode: %w", err)
	}
	if f.Version != revocationsVersion {
		return revState{}, fmt.Errorf("version %d is not supported, want %d", f.Version, revocationsVersion)
	}
	if len(f.Subjects) > MaxRevocations {
		return revState{}, fmt.Errorf("%d subjects, limit %d", len(f.Subjects), MaxRevocations)
	}
	if len(f.Issuers) > MaxIssuers {
		return revState{}, fmt.Errorf("%d issuers, limit %d", len(f.Issuers), MaxIssuers)
	}
	st := revState{gen: f.Generation, subjects: make(map[subjectKey]Subject, len(f.Subjects)), issuers: map[string]uint64{}}
	for i, s := range f.Subjects {
		if err := s.Validate(); err != nil {
			return revState{}, fmt.Errorf("subject %d: %w", i, err)
		}
		k := subjectKey{s.Kind, s.Value}
		if _, dup := st.subjects[k]; dup {
			return revState{}, fmt.Errorf("subject %d: duplicate %s", i, s)
		}
		st.subjects[k] = s
	}
	for k, seq := range f.Issuers {
		if !validHex(k, ed25519.PublicKeySize) {
			return revState{}, fmt.Errorf("issuer %q is not a 64 lower-case hex key", clip(k))
		}
		st.issuers[k] = seq
	}
	return st, nil
}

func encodeRevocations(st revState) ([]byte, error) {
	f := revFile{Version: revocationsVersion, Generation: st.gen, Subjects: sortedSubjects(st.subjects)}
	if len(st.issuers) > 0 {
		f.Issuers = st.issuers
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

func sortedSubjects(m map[subjectKey]Subject) []Subject {
	out := slices.Collect(maps.Values(m))
	slices.SortFunc(out, func(a, b Subject) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Value, b.Value))
	})
	if out == nil {
		out = []Subject{}
	}
	return out
}

// Path returns the file the list persists to.
func (r *Revocations) Path() string { return r.path }

// mutate applies fn to a copy of the state and, when fn reports a change,
// persists and installs it. keepOnWriteError installs the new state even
// when the file cannot be written (the caller gets the error): right for
// adding a revocation, which must take effect now, wrong for lifting one.
func (r *Revocations) mutate(keepOnWriteError bool, fn func(*revState) (bool, error)) (bool, error) {
	r.writeMu.Lock()
	defer r.writeMu.Unlock()
	r.mu.Lock()
	next := r.state.clone()
	r.mu.Unlock()
	changed, err := fn(&next)
	if err != nil || !changed {
		return false, err
	}
	next.gen++
	data, err := encodeRevocations(next)
	if err == nil {
		err = atomicfile.WriteFile(r.path, data, 0o600)
	}
	if err != nil && !keepOnWriteError {
		return false, fmt.Errorf("persist revocations: %w", err)
	}
	r.mu.Lock()
	r.state = next
	for _, ch := range r.subs {
		select {
		case ch <- struct{}{}:
		default: // a signal is pending already; it covers this change
		}
	}
	r.mu.Unlock()
	if err != nil {
		return true, fmt.Errorf("persist revocations (in force until restart): %w", err)
	}
	return true, nil
}

// Revoke adds s to the list and persists it. An existing subject is left
// as it is (changed false). A zero At is stamped with the clock. If the
// file cannot be written the revocation still takes effect in memory and
// the error says so: a revocation must never wait for a disk.
func (r *Revocations) Revoke(s Subject) (changed bool, err error) {
	if err := s.Validate(); err != nil {
		return false, err
	}
	if s.At.IsZero() {
		s.At = r.now().UTC()
	}
	return r.mutate(true, func(st *revState) (bool, error) {
		return addSubject(st, s)
	})
}

func addSubject(st *revState, s Subject) (bool, error) {
	k := subjectKey{s.Kind, s.Value}
	if _, ok := st.subjects[k]; ok {
		return false, nil
	}
	if len(st.subjects) >= MaxRevocations {
		return false, fmt.Errorf("revocation list is full (%d subjects)", MaxRevocations)
	}
	st.subjects[k] = s
	return true, nil
}

// Unrevoke lifts the revocation of kind and value and persists it;
// changed is false when it was not revoked. If the file cannot be written
// the revocation stays in force.
func (r *Revocations) Unrevoke(kind, value string) (changed bool, err error) {
	return r.mutate(false, func(st *revState) (bool, error) {
		k := subjectKey{kind, value}
		if _, ok := st.subjects[k]; !ok {
			return false, nil
		}
		delete(st.subjects, k)
		return true, nil
	})
}

// ApplyNotice applies a notice that VerifyNotice accepted: a revoke or an
// unrevoke by a controller. Its sequence number must be above the last one
// applied from the same controller (ErrStaleNotice otherwise), so a
// replayed or reordered notice never revives or lifts anything; the
// sequence number is persisted with the list. changed reports whether the
// list of subjects changed.
func (r *Revocations) ApplyNotice(n Notice) (changed bool, err error) {
	issuer := hex.EncodeToString(n.Issuer)
	if len(n.Issuer) != ed25519.PublicKeySize {
		return false, errors.New("revocation notice has no issuer key")
	}
	if err := n.Subject.Validate(); err != nil {
		return false, err
	}
	subjectsChanged := false
	_, err = r.mutate(n.Action == NoticeRevoke, func(st *revState) (bool, error) {
		last, known := st.issuers[issuer]
		if known && n.Seq <= last {
			return false, fmt.Errorf("notice seq %d, last applied %d: %w", n.Seq, last, ErrStaleNotice)
		}
		if !known && len(st.issuers) >= MaxIssuers {
			return false, fmt.Errorf("revocation notices from more than %d controllers", MaxIssuers)
		}
		st.issuers[issuer] = n.Seq
		var err error
		switch n.Action {
		case NoticeRevoke:
			subjectsChanged, err = addSubject(st, n.Subject)
		case NoticeUnrevoke:
			k := subjectKey{n.Subject.Kind, n.Subject.Value}
			if _, ok := st.subjects[k]; ok {
				delete(st.subjects, k)
				subjectsChanged = true
			}
		default:
			err = fmt.Errorf("revocation notice action %q is not %s or %s", clip(n.Action), NoticeRevoke, NoticeUnrevoke)
		}
		return err == nil, err
	})
	return subjectsChanged && (err == nil || n.Action == NoticeRevoke), err
}

// IsRevoked reports whether kind and value are revoked, with the entry.
func (r *Revocations) IsRevoked(kind, value string) (Subject, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.state.subjects[subjectKey{kind, value}]
	return s, ok
}

// Check refuses a package that names a revoked subject: its id, any of
// signers, its manifest hash (if not empty) or any listed file's hash. The
// error is a *VerifyError with CodeRevoked and the Subject.
func (r *Revocations) Check(m *Manifest, manifestHash string, signers ...ed25519.PublicKey) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	hit := func(kind, value string) error {
		s, ok := r.state.subjects[subjectKey{kind, value}]
		if !ok {
			return nil
		}
		detail := s.String() + " is revoked"
		if s.Reason != "" {
			detail += ": " + s.Reason
		}
		return &VerifyError{Code: CodeRevoked, Detail: detail, Subject: &s}
	}
	if m != nil {
		if err := hit(SubjectPackage, m.ID); err != nil {
			return err
		}
	}
	for _, k := range signers {
		if err := hit(SubjectSigner, hex.EncodeToString(k)); err != nil {
			return err
		}
	}
	if manifestHash != "" {
		if err := hit(SubjectArtifact, manifestHash); err != nil {
			return err
		}
	}
	if m != nil {
		for _, f := range m.Files {
			if err := hit(SubjectArtifact, f.SHA256); err != nil {
				return err
			}
		}
	}
	return nil
}

// CheckVerified is Check for a verified package: its id, every key that
// signed it, its manifest hash and its files' hashes. The host calls it
// before fetch, place and start, and for every running instance on each
// change signal from Subscribe.
func (r *Revocations) CheckVerified(v *Verified) error {
	return r.Check(v.Manifest, v.ManifestHash, v.Signers...)
}

// List returns the revoked subjects sorted by kind and value.
func (r *Revocations) List() []Subject {
	r.mu.Lock()
	defer r.mu.Unlock()
	return sortedSubjects(r.state.subjects)
}

// Generation counts the changes ever made to the list; it is persisted.
// A caller that notes it before a long operation and finds it changed
// after re-checks what it did.
func (r *Revocations) Generation() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state.gen
}

// Subscribe returns a channel that receives a value after the list
// changes, and a cancel function that ends the subscription. The channel
// has a buffer of one and signals coalesce: after a receive, the
// subscriber re-reads the list (or re-checks its instances) in full. It is
// never closed.
func (r *Revocations) Subscribe() (changes <-chan struct{}, cancel func()) {
	ch := make(chan struct{}, 1)
	r.mu.Lock()
	id := r.nextSub
	r.nextSub++
	r.subs[id] = ch
	r.mu.Unlock()
	return ch, func() {
		r.mu.Lock()
		delete(r.subs, id)
		r.mu.Unlock()
	}
}
