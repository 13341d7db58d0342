package plane

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/ctl"
	"github.com/nodeld/nodeld/internal/pkg"
)

// fakeRevocations is a revocation list of subjects (kind/value).
type fakeRevocations struct {
	mu     sync.Mutex // guards subjects and checks
	subj   map[string]pkg.Subject
	checks int
}

func (f *fakeRevocations) revoke(kind, value string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.subj == nil {
		f.subj = map[string]pkg.Subject{}
	}
	f.subj[kind+"/"+value] = pkg.Subject{Kind: kind, Value: value, Reason: "compromised"}
}

func (f *fakeRevocations) Check(m *pkg.Manifest, manifestHash string, signers ...ed25519.PublicKey) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.checks++
	try := []string{pkg.SubjectPackage + "/" + m.ID, pkg.SubjectArtifact + "/" + manifestHash}
	for _, k := range signers {
		try = append(try, pkg.SubjectSigner+"/"+hex.EncodeToString(k))
	}
	for _, k := range try {
		if s, ok := f.subj[k]; ok {
			return &pkg.VerifyError{Code: pkg.CodeRevoked, Detail: s.String() + " is revoked: " + s.Reason, Subject: &s}
		}
	}
	return nil
}

// refuseFails is an Appender that fails on plane.refuse records.
type refuseFails struct{ Appender }

func (a refuseFails) Append(source, kind string, payload any) (chain.Entry, error) {
	if kind == KindRefuse {
		return chain.Entry{}, errors.New("disk full")
	}
	return a.Appender.Append(source, kind, payload)
}

// TestStartRefusesRevoked: the controller's start verb consults its
// revocation list (Deps.Revocations) before anything is sent: a placement
// whose package id or manifest hash is revoked there, or whose package
// directory verifies as revoked (a signer, an artifact), is not started
// (ErrStartRevoked, wrapping the *pkg.VerifyError); the refusal is
// chained as plane.refuse phase start with the subject, and no start
// request is chained or sent; the host keeps it stopped. Nothing revoked,
// it starts. A refusal that cannot be chained is not a start either.
// Without a list, the start goes to the host, whose own list stands.
func TestStartRefusesRevoked(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name    string
		revoke  func(r *rig, rev *fakeRevocations, p Placement)
		subject string // kind/value chained
	}{
		{"package id", func(_ *rig, rev *fakeRevocations, p Placement) { rev.revoke(pkg.SubjectPackage, p.Package) }, pkg.SubjectPackage + "/echo"},
		{"manifest hash", func(_ *rig, rev *fakeRevocations, p Placement) { rev.revoke(pkg.SubjectArtifact, p.ManifestHash) }, pkg.SubjectArtifact + "/"},
		{"signer, by its package directory", func(r *rig, _ *fakeRevocations, p Placement) {
			r.revokeSubject(p.Order.PackageDir, pkg.SubjectSigner, strings.Repeat("ab", 32))
		}, pkg.SubjectSigner + "/" + strings.Repeat("ab", 32)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, hs := newRig(t, 8)
			rev := &fakeRevocations{}
			r.rev = rev
			r.restart()
			r.tick()
			rep := r.place(echo)
			if rep.Placed == nil {
				t.Fatal("not placed")
			}
			if _, err := r.c.Stop(ctx, rep.DecisionID); err != nil {
				t.Fatal(err)
			}
			p := r.c.Placements()[0]
			tc.revoke(r, rev, p)
			instances := len(r.entries(KindInstance))
			r.cl.Mu.Lock()
			calls := len(r.cl.Calls)
			r.cl.Mu.Unlock()

			got, err := r.c.Start(ctx, rep.Placed.InstanceID)
			if !errors.Is(err, ErrStartRevoked) || pkg.ErrorCode(err) != pkg.CodeRevoked ||
				!strings.HasPrefix(err.Error(), "start of "+p.InstanceID+" refused: ") || !strings.Contains(err.Error(), "is revoked: compromised") {
				t.Fatalf("start of a revoked placement: %v", err)
			}
			if got.Node != p.Node || got.DecisionID != p.DecisionID {
				t.Errorf("placement returned with the refusal: %+v", got)
			}
			refusals := r.entries(KindRefuse)
			if len(refusals) != 1 {
				t.Fatalf("%d plane.refuse entries, want 1", len(refusals))
			}
			var rec startRefusal
			if err := json.Unmarshal(refusals[0].Payload, &rec); err != nil {
				t.Fatal(err)
			}
			if rec.Phase != "start" || rec.DecisionID != p.DecisionID || rec.InstanceID != p.InstanceID || rec.Node != p.Node ||
				rec.Workload != p.Workload || !strings.Contains(rec.Reason, "is revoked") || rec.Revoked == nil ||
				!strings.HasPrefix(rec.Revoked.Kind+"/"+rec.Revoked.Value, tc.subject) {
				t.Errorf("refusal chained: %s", refusals[0].Payload)
			}
			// The record's shape, as cmd/nodeld chained it before.
			var keys map[string]any
			if err := json.Unmarshal(refusals[0].Payload, &keys); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"phase", "decision_id", "instance_id", "node", "workload", "reason", "revoked"} {
				if _, ok := keys[k]; !ok || len(keys) != 7 {
					t.Errorf("refusal lacks %s or has more: %s", k, refusals[0].Payload)
				}
			}
			if n := len(r.entries(KindInstance)); n != instances {
				t.Errorf("a start request was chained (%d plane.instance, was %d)", n, instances)
			}
			r.cl.Mu.Lock()
			sent := r.cl.Calls[calls:]
			state := hostOf(hs, p.Node).Instances[p.InstanceID].Lifecycle
			r.cl.Mu.Unlock()
			for _, c := range sent {
				if strings.HasPrefix(c, "start") {
					t.Errorf("start sent: %v", sent)
				}
			}
			if state != ctl.StateStopped {
				t.Errorf("the host has it %s", state)
			}
			if ps := r.c.Placements(); len(ps) != 1 || !ps[0].Stopped {
				t.Errorf("placements after the refusal: %+v", ps)
			}

			// Lifted, the start goes through.
			rev.mu.Lock()
			rev.subj = nil
			rev.mu.Unlock()
			r.cl.Mu.Lock()
			delete(r.cl.Revoked, p.Order.PackageDir)
			r.cl.Mu.Unlock()
			if got, err := r.c.Start(ctx, rep.DecisionID); err != nil || got.Stopped || got.HostState != ctl.StateRunning {
				t.Fatalf("start once lifted: %+v %v", got, err)
			}
		})
	}

	t.Run("refusal not chained", func(t *testing.T) {
		r, _ := newRig(t, 8)
		rev := &fakeRevocations{}
		r.rev = rev
		r.restart()
		r.tick()
		rep := r.place(echo)
		if _, err := r.c.Stop(ctx, rep.DecisionID); err != nil {
			t.Fatal(err)
		}
		rev.revoke(pkg.SubjectPackage, "echo")
		r.app = refuseFails{r.chain}
		r.restart()
		_, err := r.c.Start(ctx, rep.DecisionID)
		if err == nil || errors.Is(err, ErrStartRevoked) || !strings.Contains(err.Error(), "refused, and not chained") {
			t.Fatalf("start with the refusal not chained: %v", err)
		}
		if ps := r.c.Placements(); len(ps) != 1 || !ps[0].Stopped {
			t.Errorf("placements: %+v", ps)
		}
	})

	t.Run("no list", func(t *testing.T) {
		r, _ := newRig(t, 8)
		r.tick()
		rep := r.place(echo)
		if _, err := r.c.Stop(ctx, rep.DecisionID); err != nil {
			t.Fatal(err)
		}
		r.revokeSubject(echo.PackageDir, pkg.SubjectPackage, "echo")
		if _, err := r.c.Start(ctx, rep.DecisionID); err != nil {
			t.Fatalf("start without a list: %v", err)
		}
		if n := len(r.entries(KindRefuse)); n != 0 {
			t.Errorf("%d refusals chained", n)
		}
	})
}
