package host

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/atomicfile"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/identity"
)

// TermsFile is the file in the data directory that holds the highest raft
// term this host has seen from each set of its controllers (mode 0600).
// It is what fences a deposed leader across a restart of the host; a
// file that does not decode stops the host at start (see loadTerms).
const TermsFile = "controller_terms.json"

// termsVersion is the version of TermsFile's format.
const termsVersion = 1

// controllerSetDomain prefixes the keys hashed into a controller set's id,
// so the id is never the hash of anything else nodeld signs or stores.
const controllerSetDomain = "nodeld.controller-set.v1"

// ControllerSet is the stable id of a set of controller keys: the lower
// hex SHA-256 of a domain tag, a NUL byte and the distinct keys in byte
// order, so that the order host.controllers lists them in, or a key listed
// twice, does not change it. Empty for no keys.
func ControllerSet(keys []ed25519.PublicKey) string {
	if len(keys) == 0 {
		return ""
	}
	sorted := make([]string, 0, len(keys))
	for _, k := range keys {
		sorted = append(sorted, string(k))
	}
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	h := sha256.New()
	h.Write([]byte(controllerSetDomain))
	h.Write([]byte{0})
	for _, k := range sorted {
		h.Write([]byte(k))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// termSetLabel is a set's label on nodeld_host_controller_term: the
// first 16 hex characters of its id, as the operator sees it.
func termSetLabel(set string) string { return set[:16] }

// termSet is one set's entry in TermsFile.
type termSet struct {
	// Set is the ControllerSet id, 64 lower hex.
	Set string `json:"set"`
	// Term is the highest term seen from the set, at least 1.
	Term uint64 `json:"term"`
}

// termsDoc is TermsFile's content.
type termsDoc struct {
	Version int       `json:"version"`
	Sets    []termSet `json:"sets"`
}

// errTermsMalformed is wrapped by decodeTerms's errors.
var errTermsMalformed = errors.New("malformed controller terms")

// decodeTerms strictly decodes TermsFile's content: the version, at most
// MaxTermSets sets, each a distinct 64 lower-hex id with a term of at
// least 1. Its errors wrap errTermsMalformed.
func decodeTerms(data []byte) ([]termSet, error) {
	if len(data) > maxTermsFileBytes {
		return nil, fmt.Errorf("%w: %d bytes, bound %d", errTermsMalformed, len(data), maxTermsFileBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var doc termsDoc
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%w: %v", errTermsMalformed, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: trailing data", errTermsMalformed)
	}
	if doc.Version != termsVersion {
		return nil, fmt.Errorf("%w: version %d, want %d", errTermsMalformed, doc.Version, termsVersion)
	}
	if len(doc.Sets) > MaxTermSets {
		return nil, fmt.Errorf("%w: %d sets, bound %d", errTermsMalformed, len(doc.Sets), MaxTermSets)
	}
	seen := make(map[string]bool, len(doc.Sets))
	for i, s := range doc.Sets {
		switch {
		case len(s.Set) != sha256.Size*2 || strings.Trim(s.Set, "0123456789abcdef") != "":
			return nil, fmt.Errorf("%w: set %d: id is not 64 lower-case hex", errTermsMalformed, i)
		case seen[s.Set]:
			return nil, fmt.Errorf("%w: set %d: listed twice", errTermsMalformed, i)
		case s.Term == 0:
			return nil, fmt.Errorf("%w: set %d: term 0", errTermsMalformed, i)
		}
		seen[s.Set] = true
	}
	return doc.Sets, nil
}

// readTermsFile reads path, a regular file of at most maxTermsFileBytes;
// a missing file is empty (nil, nil).
func readTermsFile(path string) ([]byte, error) {
	data, err := atomicfile.ReadBounded(path, maxTermsFileBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case errors.Is(err, atomicfile.ErrUnbounded):
		return nil, fmt.Errorf("%w: %w", errTermsMalformed, err)
	}
	return data, err
}

// terms is the highest raft term this host has seen from each controller
// set, kept in TermsFile. A term is raised in memory and written to the
// file before the call that carried it acts.
type terms struct {
	path  string
	gauge *prometheus.GaugeVec
	// write replaces the file (atomicfile.WriteFile; a seam for tests).
	write func(path string, data []byte, perm fs.FileMode) error

	// mu guards sets and dirty. It is held across the file write on
	// purpose: raises are serialised, so the file never goes back to a
	// lower term, and a call waits for its raise to be durable. It is
	// never taken under another of the host's locks.
	mu sync.Mutex
	// sets holds at most MaxTermSets sets, the least recently raised
	// first.
	sets []termSet
	// dirty is set while the file lacks a raise made in memory (its
	// write failed); every observe writes again until one succeeds.
	dirty bool
}

// loadTerms reads path (see TermsFile); a missing file holds no term. A
// file that cannot be read or does not decode is an error: the host does
// not start on it, since a silent reset would let a deposed leader act
// again (the operator's recovery is docs/internals.md, "Fencing").
func loadTerms(path string, gauge *prometheus.GaugeVec) (*terms, error) {
	refuse := func(err error) (*terms, error) {
		return nil, fmt.Errorf("controller terms %q: %w (nodeld never resets this file itself: to recover, see docs/internals.md, internal/host, \"Fencing\")", path, err)
	}
	data, err := readTermsFile(path)
	if err != nil {
		return refuse(err)
	}
	t := &terms{path: path, gauge: gauge, write: atomicfile.WriteFile}
	if data == nil {
		return t, nil
	}
	sets, err := decodeTerms(data)
	if err != nil {
		return refuse(err)
	}
	t.sets = sets
	for _, s := range sets {
		gauge.WithLabelValues(termSetLabel(s.Set)).Set(float64(s.Term))
	}
	return t, nil
}

// observe returns the highest term seen from set before this call, and
// raises it to term when term is higher: in memory, then in the file,
// before it returns. err is the error of a file write that failed: the
// raise then holds in memory only (this process still fences by it) and
// the next observe writes again. set is a ControllerSet id.
func (t *terms) observe(set string, term uint64) (seen uint64, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := slices.IndexFunc(t.sets, func(s termSet) bool { return s.Set == set })
	if i >= 0 {
		seen = t.sets[i].Term
	}
	if term > seen {
		if i >= 0 {
			t.sets = slices.Delete(t.sets, i, i+1)
		}
		t.sets = append(t.sets, termSet{Set: set, Term: term})
		if len(t.sets) > MaxTermSets {
			// The set raised longest ago goes: host.controllers changed
			// MaxTermSets times since it was last heard from.
			t.gauge.DeleteLabelValues(termSetLabel(t.sets[0].Set))
			t.sets = slices.Delete(t.sets, 0, 1)
		}
		t.gauge.WithLabelValues(termSetLabel(set)).Set(float64(term))
		t.dirty = true
	}
	if t.dirty {
		if err := t.persist(); err != nil {
			return seen, err
		}
		t.dirty = false
	}
	return seen, nil
}

// highest returns the highest term seen from set (0: none).
func (t *terms) highest(set string) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.sets {
		if s.Set == set {
			return s.Term
		}
	}
	return 0
}

// persist writes the sets to the file. Called with mu held.
func (t *terms) persist() error {
	data, err := json.Marshal(termsDoc{Version: termsVersion, Sets: t.sets})
	if err != nil {
		return fmt.Errorf("encode controller terms: %w", err)
	}
	if err := t.write(t.path, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("controller terms: %w", err)
	}
	return nil
}

// isControllerID reports whether the node id names one of keys.
func isControllerID(keys []ed25519.PublicKey, id string) bool {
	return slices.ContainsFunc(keys, func(k ed25519.PublicKey) bool { return identity.NodeID(k) == id })
}

// raisesRisk reports whether m adds to what runs on the host (place,
// load, start): these are refused while a raised term cannot be written,
// as they are while the chain cannot; stop, unload and the reads proceed.
func raisesRisk(m ctl.Method) bool {
	return m == ctl.MethodPlace || m == ctl.MethodLoad || m == ctl.MethodStart
}

// fence checks a verified call from one of this host's controllers
// against the highest term the host has seen from its controller set,
// and raises that term, durably, when the call carries a higher one,
// before the call acts. A lower term is refused (stale_term): the caller
// is a deposed leader. A call without a term (an operator's own, or a
// controller older than terms) is refused too once the set has a term,
// unless it only reads: describe, status and logs change nothing, and
// any reader may call them. Calls from keys outside the set are not
// fenced and raise nothing, so a reader cannot lock the controllers out.
//
// The check and the act are not one atomic step: a call that passed
// while a higher term arrived on another stream still acts. What holds
// is that no call acts once the host had seen a higher term when it
// arrived.
func (f *front) fence(req ctl.Request) *ctl.Refusal {
	cfg := f.config()
	if !isControllerID(cfg.Controllers, req.Requester) {
		return nil
	}
	seen, err := f.terms.observe(ControllerSet(cfg.Controllers), req.Term)
	if err != nil {
		f.met.termWriteFailures.Inc()
		f.log.Error("persist controller term", zap.Uint64("term", req.Term), zap.String("method", string(req.Method)), zap.Error(err))
	}
	switch {
	case req.Term == 0 && seen > 0 && ctl.IsMutating(req.Method):
		return ctl.NewRefusal(ctl.CodeStaleTerm, fmt.Sprintf("the call carries no controller term and this host has seen term %d "+
			"from its controllers: only their leader changes it now (place through the controller)", seen))
	case req.Term != 0 && req.Term < seen:
		return ctl.NewRefusal(ctl.CodeStaleTerm,
			fmt.Sprintf("term %d is below term %d, the highest this host has seen from its controllers", req.Term, seen))
	case err != nil && raisesRisk(req.Method):
		return ctl.NewRefusal(ctl.CodeRuntime, "controller term could not be persisted")
	}
	return nil
}
