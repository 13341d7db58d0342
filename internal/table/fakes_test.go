package table

import (
	"sync"
	"time"
)

// fakeAdmission admits the nodes set to true.
type fakeAdmission struct {
	mu       sync.Mutex
	admitted map[string]bool
	calls    int
}

func newAdmission(nodes ...string) *fakeAdmission {
	f := &fakeAdmission{admitted: make(map[string]bool)}
	for _, n := range nodes {
		f.admitted[n] = true
	}
	return f
}

func (f *fakeAdmission) IsAdmitted(node string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return f.admitted[node]
}

func (f *fakeAdmission) set(node string, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.admitted[node] = ok
}

// rec is one audit record.
type rec struct {
	Kind    string
	Payload any
}

// fakeAuditor keeps every record; err makes Record fail.
type fakeAuditor struct {
	mu      sync.Mutex
	recs    []rec
	sources []string
	keys    []refusalKey // of the records made through refusal
	err     error
}

// refusalKey is what the table hands Options.RecordRefusal besides the
// payload.
type refusalKey struct{ Sender, Kind, Reason string }

// refusal is an Options.RecordRefusal that keeps its key and a record of
// its kind and payload.
func (f *fakeAuditor) refusal(sender, kind, reason string, payload any) error {
	f.mu.Lock()
	f.keys = append(f.keys, refusalKey{sender, kind, reason})
	f.mu.Unlock()
	return f.Record(AuditSource, kind, payload)
}

// takeKeys returns and clears the refusal keys.
func (f *fakeAuditor) takeKeys() []refusalKey {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := f.keys
	f.keys = nil
	return k
}

func (f *fakeAuditor) Record(source, kind string, payload any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sources = append(f.sources, source)
	f.recs = append(f.recs, rec{kind, payload})
	return f.err
}

// take returns and clears the records.
func (f *fakeAuditor) take() []rec {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.recs
	f.recs = nil
	return r
}

// fakeClock is a manually advanced clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock {
	return &fakeClock{t: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

const self = "n-self"

// env is a table with fake admission, audit and clock.
type env struct {
	t     *Table
	adm   *fakeAdmission
	audit *fakeAuditor
	clock *fakeClock
}

func newEnv(admitted ...string) *env {
	e := &env{adm: newAdmission(admitted...), audit: &fakeAuditor{}, clock: newClock()}
	e.t = New(self, Options{Admission: e.adm, Audit: e.audit, RecordRefusal: e.audit.refusal, Now: e.clock.now})
	return e
}

// ad builds node's advertisement of role with the given metadata pairs.
func ad(role, node string, kv ...string) Advertisement {
	md := map[string]string{MetaRole: role, MetaNodeID: node}
	for i := 0; i+1 < len(kv); i += 2 {
		md[kv[i]] = kv[i+1]
	}
	return Advertisement{
		Name:        ServicePrefix + role,
		NodeID:      node,
		Methods:     []string{"chat.completions", "completions", "embeddings", "models"},
		Version:     "1",
		Metadata:    md,
		LastUpdated: 1,
	}
}
