package dispatch

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap/zaptest"

	"github.com/nodeld/nodeld/internal/chain"
	"github.com/nodeld/nodeld/internal/config"
	"github.com/nodeld/nodeld/internal/identity"
	"github.com/nodeld/nodeld/internal/operator"
	"github.com/nodeld/nodeld/internal/pkg"
)

// noticeChain is a chain that keeps what it is given.
type noticeChain struct {
	mu    sync.Mutex
	kinds []string
}

func (c *noticeChain) Append(_, kind string, _ any) (chain.Entry, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kinds = append(c.kinds, kind)
	return chain.Entry{}, nil
}

// noticeSink verifies and keeps submitted notices.
type noticeSink struct {
	key     ed25519.PublicKey
	notices []pkg.Notice
	err     error
}

func (s *noticeSink) SubmitNotice(_ context.Context, raw []byte) error {
	if s.err != nil {
		return s.err
	}
	n, err := pkg.VerifyNotice(raw, []ed25519.PublicKey{s.key})
	if err != nil {
		return err
	}
	s.notices = append(s.notices, n)
	return nil
}

func TestOperatorRevokeNotify(t *testing.T) {
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	ident, err := identity.New(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rev, err := pkg.OpenRevocations(filepath.Join(dir, pkg.RevocationsFile), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	sink := &noticeSink{key: ident.PublicKey()}
	clock := time.Unix(1_000, 0)
	newD := func() *Dispatcher {
		d, err := New(Deps{Identity: ident, Chain: &noticeChain{}, Revocations: rev, Notices: sink, DataDir: dir,
			Logger: zaptest.NewLogger(t), Now: func() time.Time { return clock }})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	d := newD()
	ctx := context.Background()
	subject := &pkg.Subject{Kind: pkg.SubjectPackage, Value: "echo-llm", Reason: "bad build"}
	for _, verb := range []string{operator.VerbRevoke, operator.VerbUnrevoke, operator.VerbRevoke} {
		resp := d.Operate(ctx, operator.Request{Verb: verb, Node: config.SelfRef, Args: operator.Args{Subject: subject, Notify: true}})
		var res RevokeResult
		if !resp.OK || json.Unmarshal(resp.Result, &res) != nil || res.NoticeSeq == 0 {
			t.Fatalf("%s --notify = %+v", verb, resp)
		}
	}
	if _, ok := rev.IsRevoked(pkg.SubjectPackage, "echo-llm"); ok {
		t.Error("Notify edited the list directly")
	}
	// A restart, with the clock set back: the counter file still rules.
	d = newD()
	clock = time.Unix(10, 0)
	if resp := d.Operate(ctx, operator.Request{Verb: operator.VerbUnrevoke, Node: config.SelfRef, Args: operator.Args{Subject: subject, Notify: true}}); !resp.OK {
		t.Fatalf("unrevoke after restart = %+v", resp)
	}
	var actions []string
	for i, n := range sink.notices {
		actions = append(actions, n.Action)
		if i > 0 && n.Seq <= sink.notices[i-1].Seq {
			t.Errorf("notice %d seq %d not above %d", i, n.Seq, sink.notices[i-1].Seq)
		}
		if n.Subject.Value != "echo-llm" || !n.Issuer.Equal(ident.PublicKey()) {
			t.Errorf("notice %d = %+v", i, n)
		}
	}
	want := []string{pkg.NoticeRevoke, pkg.NoticeUnrevoke, pkg.NoticeRevoke, pkg.NoticeUnrevoke}
	if diff := cmp.Diff(want, actions); diff != "" {
		t.Errorf("actions (-want +got):\n%s", diff)
	}
	fi, err := os.Stat(filepath.Join(dir, NoticeSeqFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("seq file: %v %v", fi, err)
	}

	// A refused submit is an error answer.
	sink.err = errors.New("refused")
	if resp := d.Operate(ctx, operator.Request{Verb: operator.VerbRevoke, Node: config.SelfRef, Args: operator.Args{Subject: subject, Notify: true}}); resp.OK || resp.Code != operator.CodeInternal {
		t.Errorf("refused submit = %+v", resp)
	}
	// Without a notice sink Notify is refused.
	d2, err := New(Deps{Identity: ident, Chain: &noticeChain{}, Revocations: rev})
	if err != nil {
		t.Fatal(err)
	}
	if resp := d2.Operate(ctx, operator.Request{Verb: operator.VerbRevoke, Node: config.SelfRef, Args: operator.Args{Subject: subject, Notify: true}}); resp.OK {
		t.Errorf("notify without host = %+v", resp)
	}
}
