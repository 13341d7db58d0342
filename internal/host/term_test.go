package host

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"

	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/pkg"
)

// callTerm sends one call from the caller (a controller) carrying term.
func (c *cluster) callTerm(t testing.TB, method ctl.Method, body any, term uint64) (*ctl.Answer, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	return c.client.CallTerm(ctx, c.opener(), c.target(), method, body, decisionFor(method), term)
}

// callPiped sends one call signed by key over an in-memory pipe to serve,
// which stands for the host's side of a link authenticated with key.
func callPiped(t testing.TB, key ed25519.PrivateKey, target *identity.Identity, serve func(ctx context.Context, s ctl.Stream),
	method ctl.Method, body any, term uint64) (*ctl.Answer, error) {
	t.Helper()
	cl, err := ctl.NewClient(ctl.ClientConfig{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	open := func(ctx context.Context) (ctl.Stream, error) {
		ours, theirs := net.Pipe()
		wg.Go(func() {
			defer theirs.Close()
			serve(ctx, theirs)
		})
		return ours, nil
	}
	return cl.CallTerm(ctx, open, ctl.Target{ID: target.ID(), Key: target.PublicKey()}, method, body, decisionFor(method), term)
}

// callLocal sends one call from this node's own operator (ServeLocal).
func (c *cluster) callLocal(t testing.TB, method ctl.Method, body any, term uint64) (*ctl.Answer, error) {
	t.Helper()
	return callPiped(t, c.hostNode.Ident.PrivateKey(), c.hostNode.Ident,
		func(ctx context.Context, s ctl.Stream) { _ = c.h.ServeLocal(ctx, s, nil) }, method, body, term)
}

func decisionFor(m ctl.Method) string {
	if ctl.IsMutating(m) {
		return newDecision()
	}
	return ""
}

// fileTerms reads TermsFile in dir as set id -> term.
func fileTerms(t testing.TB, dir string) map[string]uint64 {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, TermsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	sets, err := decodeTerms(data)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, s := range sets {
		out[s.Set] = s.Term
	}
	return out
}

var missing = ctl.InstanceParams{InstanceID: "missing"}

// A call with a term below the highest the host has seen from its
// controllers is refused stale_term, whatever its method, and chained; an
// equal or higher term passes the fence (and a higher one is raised,
// durably, by a read as by a mutation); a call without a term is refused
// once the set has one, unless it only reads.
func TestStaleTermRefusedAndChained(t *testing.T) {
	c := newCluster(t, clusterOpts{noFacts: true})
	p := buildEcho(t, c.publisher)
	set := ControllerSet([]ed25519.PublicKey{c.caller.Ident.PublicKey()})
	steps := []struct {
		name     string
		method   ctl.Method
		body     any
		term     uint64
		want     ctl.Code
		wantSeen uint64
	}{
		{"a status raises the first term", ctl.MethodStatus, nil, 5, "", 5},
		{"lower term, status", ctl.MethodStatus, nil, 4, ctl.CodeStaleTerm, 5},
		{"lower term, start", ctl.MethodStart, missing, 4, ctl.CodeStaleTerm, 5},
		{"lower term, place", ctl.MethodPlace, p.params(true), 4, ctl.CodeStaleTerm, 5},
		{"no term, stop", ctl.MethodStop, missing, 0, ctl.CodeStaleTerm, 5},
		{"no term, status (a read)", ctl.MethodStatus, nil, 0, "", 5},
		{"no term, describe (a read)", ctl.MethodDescribe, nil, 0, "", 5},
		{"equal term passes the fence", ctl.MethodStart, missing, 5, ctl.CodeUnknownInstance, 5},
		{"higher term, stop", ctl.MethodStop, missing, 6, ctl.CodeUnknownInstance, 6},
		{"the old leader again", ctl.MethodUnload, missing, 5, ctl.CodeStaleTerm, 6},
	}
	for _, st := range steps {
		_, err := c.callTerm(t, st.method, st.body, st.term)
		if got := refusalCode(err); got != st.want {
			t.Fatalf("%s: refusal %q (%v), want %q", st.name, got, err, st.want)
		}
		if (st.want == ctl.CodeStaleTerm) != errors.Is(err, ctl.ErrStaleTerm) {
			t.Fatalf("%s: errors.Is(%v, ErrStaleTerm) = %v", st.name, err, !(st.want == ctl.CodeStaleTerm))
		}
		if got := fileTerms(t, c.hostNode.Dir)[set]; got != st.wantSeen {
			t.Fatalf("%s: file holds term %d, want %d", st.name, got, st.wantSeen)
		}
		if gotSet, got := c.h.ControllerTerm(); gotSet != set || got != st.wantSeen {
			t.Fatalf("%s: ControllerTerm() = %s, %d; want %s, %d", st.name, gotSet, got, set, st.wantSeen)
		}
	}
	if got := c.h.Status().ControllerTerm; got != 6 {
		t.Errorf("Status().ControllerTerm = %d, want 6", got)
	}
	if v := c.h.Advertisement(time.Now()).Version; v != "2" {
		t.Errorf("advertised version %q, want 2: a host that fences by term", v)
	}
	if got := testutil.ToFloat64(c.h.met.terms.WithLabelValues(set[:16])); got != 6 {
		t.Errorf("nodeld_host_controller_term = %v, want 6", got)
	}

	// The refused place is chained as a controller's refused decision,
	// the others as refusals of their kind, each with its term.
	type chained struct {
		Method string
		Term   any
	}
	stale := func() []chained {
		var got []chained
		for _, kind := range []string{KindPlaceRefused, KindCtlRefused} {
			for _, r := range c.audit.ofKind(kind) {
				if r["code"] == string(ctl.CodeStaleTerm) {
					got = append(got, chained{kind + " " + r["method"].(string), r["term"]})
				}
			}
		}
		return got
	}
	// A refusal is chained once its answer went out: two answered one
	// after the other may be chained in either order.
	ntWait(t, "five refusals chained", func() bool { return len(stale()) == 5 })
	got := stale()
	want := []chained{ // sorted
		{KindCtlRefused + " workload.start", 4.0},
		{KindCtlRefused + " workload.status", 4.0},
		{KindCtlRefused + " workload.stop", nil},
		{KindCtlRefused + " workload.unload", 5.0},
		{KindPlaceRefused + " workload.place", 4.0},
	}
	slices.SortStableFunc(got, func(a, b chained) int { return strings.Compare(a.Method, b.Method) })
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stale_term refusals chained (-want +got):\n%s", diff)
	}
	if got := testutil.ToFloat64(c.h.met.calls.WithLabelValues(string(ctl.MethodStart), string(ctl.CodeStaleTerm))); got != 1 {
		t.Errorf("start calls refused stale_term = %v, want 1", got)
	}
	for _, r := range c.audit.ofKind(KindCtlRefused) {
		if r["method"] == string(ctl.MethodStop) && r["code"] == string(ctl.CodeStaleTerm) && !strings.Contains(r["reason"].(string), "carries no controller term") {
			t.Errorf("a term-less stop refused for %q", r["reason"])
		}
	}
	if place := c.audit.ofKind(KindPlaceRefused); len(place) != 1 || place[0]["package"] != p.m.ID || place[0]["decision_id"] == nil {
		t.Errorf("place refusal chained as %v", place)
	}
	if len(c.audit.ofKind(KindPlaceBegin)) != 0 {
		t.Error("a fenced place began")
	}
}

// beginProbe is an Auditor that reads the terms file when a place begins,
// the host's first step of acting on one.
type beginProbe struct {
	*fakeAudit
	dir string
	t   testing.TB

	mu      sync.Mutex
	atBegin map[string]uint64
}

func (b *beginProbe) Record(source, kind string, payload any) error {
	if kind == KindPlaceBegin {
		terms := fileTerms(b.t, b.dir)
		b.mu.Lock()
		b.atBegin = terms
		b.mu.Unlock()
	}
	return b.fakeAudit.Record(source, kind, payload)
}

// newBareHost builds a host on dir with no mesh, as a node restarted on
// the same data directory would.
func newBareHost(t testing.TB, dir string, self *identity.Identity, controllers ...ed25519.PublicKey) (*Host, error) {
	t.Helper()
	rev, err := pkg.OpenRevocations(filepath.Join(dir, "bare-"+pkg.RevocationsFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	audit := &fakeAudit{}
	return New(Config{Enabled: true, Controllers: controllers, DataDir: dir},
		Deps{Identity: self, Audit: audit, Recorder: passRecorder{audit}, Revocations: rev,
			Logger: zaptest.NewLogger(t).Named("bare"), Registerer: prometheus.NewRegistry()})
}

// A higher term is in the file before the call that carried it acts, and
// a host started again on that file still fences by it.
func TestTermPersistedBeforeActingAndAfterRestart(t *testing.T) {
	probe := &beginProbe{fakeAudit: &fakeAudit{}, t: t}
	c := newCluster(t, clusterOpts{noFacts: true, audit: probe})
	probe.dir = c.hostNode.Dir
	p := buildEcho(t, c.publisher)
	set := ControllerSet([]ed25519.PublicKey{c.caller.Ident.PublicKey()})

	if _, err := c.callTerm(t, ctl.MethodStatus, nil, 3); err != nil {
		t.Fatal(err)
	}
	d := newDecision()
	c.srv.offer(d, p)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := c.client.CallTerm(ctx, c.opener(), c.target(), ctl.MethodLoad, p.params(false), d, 7); err != nil {
		t.Fatalf("load at term 7: %v", err)
	}
	probe.mu.Lock()
	atBegin := probe.atBegin[set]
	probe.mu.Unlock()
	if atBegin != 7 {
		t.Fatalf("the terms file held term %d when the load began, want 7", atBegin)
	}
	if begins := probe.ofKind(KindPlaceBegin); len(begins) != 1 || begins[0]["term"] != 7.0 {
		t.Fatalf("host.place.begin records %v, want one naming term 7", begins)
	}
	if st, err := os.Stat(filepath.Join(c.hostNode.Dir, TermsFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("terms file: %v, %v; want mode 0600", st, err)
	}

	// The node restarts on the same data directory.
	h2, err := newBareHost(t, c.hostNode.Dir, c.hostNode.Ident, c.caller.Ident.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	if _, got := h2.ControllerTerm(); got != 7 {
		t.Fatalf("restarted host's term %d, want 7", got)
	}
	serve := func(ctx context.Context, s ctl.Stream) {
		_ = h2.front.serve(ctx, s, c.caller.Ident.PublicKey(), c.caller.Ident.ID(), nil)
	}
	callerKey := c.caller.Ident.PrivateKey()
	if _, err := callPiped(t, callerKey, c.hostNode.Ident, serve, ctl.MethodStop, missing, 6); !errors.Is(err, ctl.ErrStaleTerm) {
		t.Fatalf("stop at term 6 after the restart: %v, want stale_term", err)
	}
	if _, err := callPiped(t, callerKey, c.hostNode.Ident, serve, ctl.MethodStatus, nil, 7); err != nil {
		t.Fatalf("status at term 7 after the restart: %v", err)
	}
}

// The term is kept per controller set: any controller of the set is fenced
// by a term another one raised; a key outside the set neither raises the
// term nor is fenced; a new set starts afresh while the old one's term is
// kept for when it comes back.
func TestTermPerControllerSet(t *testing.T) {
	c := newCluster(t, clusterOpts{noFacts: true, selfController: true})
	callerPub, selfPub := c.caller.Ident.PublicKey(), c.hostNode.Ident.PublicKey()
	both := ControllerSet([]ed25519.PublicKey{callerPub, selfPub})

	if _, err := c.callTerm(t, ctl.MethodStatus, nil, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := c.callLocal(t, ctl.MethodStart, missing, 2); refusalCode(err) != ctl.CodeStaleTerm {
		t.Fatalf("the other controller at a lower term: %v, want stale_term", err)
	}
	if _, err := c.callLocal(t, ctl.MethodStatus, nil, 0); err != nil {
		t.Fatalf("a term-less read: %v", err)
	}
	if _, err := c.callLocal(t, ctl.MethodStatus, nil, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := c.callTerm(t, ctl.MethodStart, missing, 3); refusalCode(err) != ctl.CodeStaleTerm {
		t.Fatalf("the first controller after the other raised the term: %v, want stale_term", err)
	}

	// The host's own key leaves the set: its term no longer counts, and
	// the caller's set has none yet.
	cfg := c.h.config()
	cfg.Controllers = []ed25519.PublicKey{callerPub}
	if err := c.h.ApplyConfig(cfg); err != nil {
		t.Fatal(err)
	}
	alone := ControllerSet(cfg.Controllers)
	if _, err := c.callLocal(t, ctl.MethodStatus, nil, 100); err != nil {
		t.Fatalf("a reader's call with a term: %v", err)
	}
	if _, err := c.callTerm(t, ctl.MethodStart, missing, 1); refusalCode(err) != ctl.CodeUnknownInstance {
		t.Fatalf("term 1 in a new set: %v, want unknown_instance", err)
	}
	if diff := cmp.Diff(map[string]uint64{both: 4, alone: 1}, fileTerms(t, c.hostNode.Dir)); diff != "" {
		t.Fatalf("terms (-want +got):\n%s", diff)
	}

	// Back to the set of two: its term still fences.
	cfg.Controllers = []ed25519.PublicKey{selfPub, callerPub}
	if err := c.h.ApplyConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := c.callTerm(t, ctl.MethodStart, missing, 3); refusalCode(err) != ctl.CodeStaleTerm {
		t.Fatalf("the set of two again: %v, want stale_term", err)
	}
}

// setWrite replaces the terms file's writer.
func (t *terms) setWrite(w func(path string, data []byte, perm fs.FileMode) error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.write = w
}

// A raised term that cannot be written still fences in memory; place,
// load and start are refused until it is written, stop, unload and the
// reads proceed.
func TestTermWriteFailure(t *testing.T) {
	c := newCluster(t, clusterOpts{noFacts: true})
	terms := c.h.front.terms
	terms.setWrite(func(string, []byte, fs.FileMode) error { return errors.New("disk full") })
	if _, err := c.callTerm(t, ctl.MethodStart, missing, 10); refusalCode(err) != ctl.CodeRuntime {
		t.Fatalf("start with a term not written: %v, want runtime", err)
	}
	p := buildEcho(t, c.publisher)
	if _, err := c.callTerm(t, ctl.MethodLoad, p.params(false), 10); refusalCode(err) != ctl.CodeRuntime {
		t.Fatalf("load with a term not written: %v, want runtime", err)
	}
	if _, err := c.callTerm(t, ctl.MethodStart, missing, 9); refusalCode(err) != ctl.CodeStaleTerm {
		t.Fatalf("term 9 after 10 was raised in memory: %v, want stale_term", err)
	}
	if _, err := c.callTerm(t, ctl.MethodStop, missing, 10); refusalCode(err) != ctl.CodeUnknownInstance {
		t.Fatalf("stop: %v, want unknown_instance (past the fence)", err)
	}
	if _, err := c.callTerm(t, ctl.MethodStatus, nil, 10); err != nil {
		t.Fatalf("status: %v", err)
	}
	if got := testutil.ToFloat64(c.h.met.termWriteFailures); got != 5 {
		t.Errorf("term write failures = %v, want 5", got)
	}
	if fileTerms(t, c.hostNode.Dir) != nil {
		t.Fatal("a terms file was written")
	}
	terms.setWrite(func(path string, data []byte, perm fs.FileMode) error { return os.WriteFile(path, data, perm) })
	if _, err := c.callTerm(t, ctl.MethodStart, missing, 10); refusalCode(err) != ctl.CodeUnknownInstance {
		t.Fatalf("start once the term is written: %v, want unknown_instance", err)
	}
	set := ControllerSet([]ed25519.PublicKey{c.caller.Ident.PublicKey()})
	if got := fileTerms(t, c.hostNode.Dir)[set]; got != 10 {
		t.Fatalf("file holds %d, want 10", got)
	}
}

// A terms file that does not decode stops the host at start, naming the
// file; it is never reset silently.
func TestCorruptTermsFileRefusedAtStart(t *testing.T) {
	set := strings.Repeat("ab", 32)
	tests := []struct {
		name, content string
	}{
		{"not json", "garbage"},
		{"empty", ""},
		{"truncated", `{"version":1,"sets":[{"set":"` + set + `","te`},
		{"unknown field", `{"version":1,"sets":[],"x":1}`},
		{"unknown version", `{"version":2,"sets":[]}`},
		{"term 0", `{"version":1,"sets":[{"set":"` + set + `","term":0}]}`},
		{"negative term", `{"version":1,"sets":[{"set":"` + set + `","term":-1}]}`},
		{"upper-case id", `{"version":1,"sets":[{"set":"` + strings.ToUpper(set) + `","term":3}]}`},
		{"set twice", `{"version":1,"sets":[{"set":"` + set + `","term":3},{"set":"` + set + `","term":4}]}`},
		{"trailing data", `{"version":1,"sets":[]} {}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, TermsFile)
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := newBareHost(t, dir, identityFor(t))
			if !errors.Is(err, errTermsMalformed) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), `"Fencing"`) {
				t.Fatalf("New: %v, want a malformed-terms error naming %s", err, path)
			}
		})
	}
	t.Run("a directory", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, TermsFile), 0o700); err != nil {
			t.Fatal(err)
		}
		if _, err := newBareHost(t, dir, identityFor(t)); err == nil {
			t.Fatal("New accepted a directory as the terms file")
		}
	})
	t.Run("a valid file", func(t *testing.T) {
		dir := t.TempDir()
		content := fmt.Sprintf(`{"version":1,"sets":[{"set":"%s","term":12}]}`, set)
		if err := os.WriteFile(filepath.Join(dir, TermsFile), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		h, err := newBareHost(t, dir, identityFor(t))
		if err != nil {
			t.Fatal(err)
		}
		if got := h.front.terms.highest(set); got != 12 {
			t.Fatalf("term %d, want 12", got)
		}
	})
}

func identityFor(t testing.TB) *identity.Identity {
	t.Helper()
	id, err := identity.New(newKey(t))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestControllerSet(t *testing.T) {
	a, b, c := pubOf(newKey(t)), pubOf(newKey(t)), pubOf(newKey(t))
	ab := ControllerSet([]ed25519.PublicKey{a, b})
	tests := []struct {
		name string
		give []ed25519.PublicKey
		same bool
	}{
		{"the other order", []ed25519.PublicKey{b, a}, true},
		{"a key twice", []ed25519.PublicKey{a, b, a}, true},
		{"one key fewer", []ed25519.PublicKey{a}, false},
		{"one key more", []ed25519.PublicKey{a, b, c}, false},
		{"another key", []ed25519.PublicKey{a, c}, false},
	}
	for _, tt := range tests {
		if got := ControllerSet(tt.give); (got == ab) != tt.same || len(got) != 64 {
			t.Errorf("%s: %s vs %s", tt.name, got, ab)
		}
	}
	if ControllerSet(nil) != "" {
		t.Error("no keys make a set")
	}
}

// At most MaxTermSets sets are kept: the one raised longest ago goes, and
// its gauge with it.
func TestTermSetsBounded(t *testing.T) {
	gauge := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "g"}, []string{"set"})
	ts, err := loadTerms(filepath.Join(t.TempDir(), TermsFile), gauge)
	if err != nil {
		t.Fatal(err)
	}
	setN := func(i int) string { return fmt.Sprintf("%016x", i+1) + strings.Repeat("0", 48) }
	for i := range MaxTermSets + 1 {
		if _, err := ts.observe(setN(i), 2); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			// Raised again: now the most recent.
			continue
		}
		if i == 1 {
			if _, err := ts.observe(setN(0), 3); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(ts.sets) != MaxTermSets || ts.highest(setN(1)) != 0 || ts.highest(setN(0)) != 3 {
		t.Fatalf("%d sets; set 1 at %d, set 0 at %d", len(ts.sets), ts.highest(setN(1)), ts.highest(setN(0)))
	}
	if got := testutil.CollectAndCount(gauge); got != MaxTermSets {
		t.Fatalf("%d gauges, want %d", got, MaxTermSets)
	}
	data, err := os.ReadFile(ts.path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > maxTermsFileBytes {
		t.Fatalf("a full terms file has %d bytes, above the read bound %d", len(data), maxTermsFileBytes)
	}
}

func FuzzDecodeTerms(f *testing.F) {
	set := strings.Repeat("0f", 32)
	f.Add([]byte(`{"version":1,"sets":[{"set":"` + set + `","term":18446744073709551615}]}`))
	f.Add([]byte(`{"version":1,"sets":[]}`))
	f.Add([]byte(`{"version":1,"sets":[{"set":"` + set + `","term":3},{"set":"` + set + `","term":3}]}`))
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		sets, err := decodeTerms(data)
		if err != nil {
			if !errors.Is(err, errTermsMalformed) {
				t.Fatalf("error %v does not wrap errTermsMalformed", err)
			}
			return
		}
		if len(sets) > MaxTermSets {
			t.Fatalf("%d sets", len(sets))
		}
		seen := map[string]bool{}
		for _, s := range sets {
			if s.Term == 0 || len(s.Set) != 64 || seen[s.Set] {
				t.Fatalf("accepted %+v", sets)
			}
			seen[s.Set] = true
		}
		// What decodes encodes back to something that decodes the same.
		again, err := json.Marshal(termsDoc{Version: termsVersion, Sets: sets})
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeTerms(again)
		if err != nil || !cmp.Equal(sets, back) {
			t.Fatalf("round trip: %v, %+v vs %+v", err, back, sets)
		}
	})
}
