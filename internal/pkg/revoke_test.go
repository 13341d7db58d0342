package pkg

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nodeld/nodeld/internal/identity"
)

var testNow = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func fixedClock() time.Time { return testNow }

func openRev(t *testing.T, path string) *Revocations {
	t.Helper()
	r, err := OpenRevocations(path, fixedClock)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRevocationsPersist(t *testing.T) {
	path := filepath.Join(t.TempDir(), RevocationsFile)
	r := openRev(t, path)
	signer := hexOf(pubOf(testKey(t)))
	subjects := []Subject{
		{Kind: SubjectPackage, Value: "echo", Reason: "bad", By: "operator"},
		{Kind: SubjectSigner, Value: signer},
		{Kind: SubjectArtifact, Value: strings.Repeat("ab", 32)},
	}
	for _, s := range subjects {
		if changed, err := r.Revoke(s); err != nil || !changed {
			t.Fatalf("revoke %s = %v, %v", s, changed, err)
		}
	}
	if changed, err := r.Revoke(subjects[0]); err != nil || changed {
		t.Fatalf("second revoke = %v, %v, want unchanged", changed, err)
	}
	if changed, err := r.Unrevoke(SubjectPackage, "absent"); err != nil || changed {
		t.Fatalf("unrevoke of absent = %v, %v, want unchanged", changed, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := st.Mode().Perm(); perm != 0o600 {
		t.Errorf("mode %04o, want 0600", perm)
	}

	want := []Subject{
		{Kind: SubjectArtifact, Value: strings.Repeat("ab", 32), At: testNow},
		{Kind: SubjectPackage, Value: "echo", Reason: "bad", By: "operator", At: testNow},
		{Kind: SubjectSigner, Value: signer, At: testNow},
	}
	reopened := openRev(t, path)
	if diff := cmp.Diff(want, reopened.List()); diff != "" {
		t.Errorf("after reopen (-want +got):\n%s", diff)
	}
	if got := reopened.Generation(); got != 3 {
		t.Errorf("generation %d, want 3", got)
	}
	if _, ok := reopened.IsRevoked(SubjectSigner, signer); !ok {
		t.Error("signer not revoked after reopen")
	}

	if changed, err := reopened.Unrevoke(SubjectPackage, "echo"); err != nil || !changed {
		t.Fatalf("unrevoke = %v, %v", changed, err)
	}
	if diff := cmp.Diff([]Subject{want[0], want[2]}, openRev(t, path).List()); diff != "" {
		t.Errorf("after unrevoke and reopen (-want +got):\n%s", diff)
	}
}

func TestRevocationsConcurrentRevoke(t *testing.T) {
	path := filepath.Join(t.TempDir(), RevocationsFile)
	r := openRev(t, path)
	const n = 32
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := r.Revoke(Subject{Kind: SubjectPackage, Value: fmt.Sprintf("p%02d", i)}); err != nil {
				t.Error(err)
			}
			r.IsRevoked(SubjectPackage, "p00")
		})
	}
	wg.Wait()
	got := openRev(t, path)
	if len(got.List()) != n || got.Generation() != n {
		t.Fatalf("after reopen: %d subjects, generation %d; want %d and %d", len(got.List()), got.Generation(), n, n)
	}
}

func TestRevocationsSubscribe(t *testing.T) {
	r := openRev(t, filepath.Join(t.TempDir(), RevocationsFile))
	ch, cancel := r.Subscribe()
	defer cancel()
	if _, err := r.Revoke(Subject{Kind: SubjectPackage, Value: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Revoke(Subject{Kind: SubjectPackage, Value: "b"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	default:
		t.Fatal("no change signal after revoke")
	}
	select {
	case <-ch:
		t.Fatal("two signals for two changes made before a receive; want them coalesced")
	default:
	}
	if _, err := r.Revoke(Subject{Kind: SubjectPackage, Value: "a"}); err != nil { // no change
		t.Fatal(err)
	}
	select {
	case <-ch:
		t.Fatal("signal without a change")
	default:
	}
	cancel()
	if _, err := r.Unrevoke(SubjectPackage, "a"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
		t.Fatal("signal after cancel")
	default:
	}
}

func TestOpenRevocationsFailsClosed(t *testing.T) {
	tests := []struct {
		name    string
		content string
		mode    os.FileMode
		wantIn  string
	}{
		{"garbage", "not json", 0o600, "decode"},
		{"unknown version", `{"version":2,"generation":0,"subjects":[]}`, 0o600, "version"},
		{"bad subject", `{"version":1,"generation":1,"subjects":[{"kind":"package","value":"A B","at":"2026-01-01T00:00:00Z"}]}`, 0o600, "package id"},
		{"duplicate subject", `{"version":1,"generation":1,"subjects":[{"kind":"package","value":"a","at":"2026-01-01T00:00:00Z"},{"kind":"package","value":"a","at":"2026-01-01T00:00:00Z"}]}`, 0o600, "duplicate"},
		{"world-writable", `{"version":1,"generation":0,"subjects":[]}`, 0o666, "writable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), RevocationsFile)
			if err := os.WriteFile(path, []byte(tt.content), tt.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tt.mode); err != nil {
				t.Fatal(err)
			}
			_, err := OpenRevocations(path, nil)
			if err == nil || !strings.Contains(err.Error(), tt.wantIn) {
				t.Fatalf("err = %v, want one containing %q", err, tt.wantIn)
			}
		})
	}
}

func TestRevokeValidates(t *testing.T) {
	r := openRev(t, filepath.Join(t.TempDir(), RevocationsFile))
	for _, s := range []Subject{
		{Kind: "thing", Value: "a"},
		{Kind: SubjectSigner, Value: "abc"},
		{Kind: SubjectArtifact, Value: strings.Repeat("AB", 32)},
		{Kind: SubjectPackage, Value: "a", Reason: strings.Repeat("r", MaxReasonLen+1)},
	} {
		if _, err := r.Revoke(s); err == nil {
			t.Errorf("Revoke(%+v) accepted an invalid subject", s)
		}
	}
	if n := len(r.List()); n != 0 {
		t.Errorf("%d subjects after invalid revokes, want 0", n)
	}
}

func TestRevokeInForceWhenWriteFails(t *testing.T) {
	dir := t.TempDir()
	r := openRev(t, filepath.Join(dir, "missing-dir", RevocationsFile))
	changed, err := r.Revoke(Subject{Kind: SubjectPackage, Value: "a"})
	if err == nil || !changed {
		t.Fatalf("revoke = %v, %v; want changed with a write error", changed, err)
	}
	if _, ok := r.IsRevoked(SubjectPackage, "a"); !ok {
		t.Fatal("revocation not in force after a failed write")
	}
	if changed, err := r.Unrevoke(SubjectPackage, "a"); err == nil || changed {
		t.Fatalf("unrevoke = %v, %v; want unchanged with a write error", changed, err)
	}
	if _, ok := r.IsRevoked(SubjectPackage, "a"); !ok {
		t.Fatal("revocation lifted although it could not be persisted")
	}
}

func TestApplyNotice(t *testing.T) {
	ctl := testKey(t)
	controllers := []ed25519.PublicKey{pubOf(ctl)}
	path := filepath.Join(t.TempDir(), RevocationsFile)
	r := openRev(t, path)
	notice := func(seq uint64, action string) Notice {
		t.Helper()
		data, err := SignNotice(ctl, Notice{Seq: seq, IssuedAt: testNow, Action: action, Subject: Subject{Kind: SubjectPackage, Value: "echo", Reason: "bad"}})
		if err != nil {
			t.Fatal(err)
		}
		n, err := VerifyNotice(data, controllers)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	revoke1, unrevoke2, revoke3 := notice(1, NoticeRevoke), notice(2, NoticeUnrevoke), notice(3, NoticeRevoke)
	steps := []struct {
		n           Notice
		wantChanged bool
		wantStale   bool
		wantRevoked bool
	}{
		{revoke1, true, false, true},
		{revoke1, false, true, true}, // replay
		{unrevoke2, true, false, false},
		{revoke1, false, true, false}, // old revoke replayed after the lift
		{revoke3, true, false, true},
		{unrevoke2, false, true, true}, // old lift replayed
	}
	for i, s := range steps {
		changed, err := r.ApplyNotice(s.n)
		if got := errors.Is(err, ErrStaleNotice); got != s.wantStale || (err != nil && !got) {
			t.Fatalf("step %d: err = %v, want stale %v", i, err, s.wantStale)
		}
		if changed != s.wantChanged {
			t.Errorf("step %d: changed = %v, want %v", i, changed, s.wantChanged)
		}
		if _, revoked := r.IsRevoked(SubjectPackage, "echo"); revoked != s.wantRevoked {
			t.Errorf("step %d: revoked = %v, want %v", i, revoked, s.wantRevoked)
		}
	}
	// The sequence numbers survive a restart.
	if _, err := openRev(t, path).ApplyNotice(unrevoke2); !errors.Is(err, ErrStaleNotice) {
		t.Fatalf("after reopen: err = %v, want ErrStaleNotice", err)
	}
	s, _ := r.IsRevoked(SubjectPackage, "echo")
	want := Subject{Kind: SubjectPackage, Value: "echo", Reason: "bad", At: testNow, By: "controller " + identity.NodeID(pubOf(ctl))}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("subject (-want +got):\n%s", diff)
	}
}
