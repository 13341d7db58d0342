package ctlforward

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nodeld/nodeld/internal/mesh"
	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/operator"
	"github.com/nodeld/nodeld/internal/table"
)

// recBackend stands for the leader's router (operator.Router's
// OperateForwarded is tested in package operator): it records what it
// serves and answers resp.
type recBackend struct {
	resp operator.Response

	mu     sync.Mutex // guards served
	served []string   // from + " " + verb
	reqs   []operator.Request
}

func (b *recBackend) OperateForwarded(_ context.Context, from string, req operator.Request) operator.Response {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.served = append(b.served, from+" "+req.Verb)
	b.reqs = append(b.reqs, req)
	return b.resp
}

func (b *recBackend) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.served)
}

type tnode struct {
	*meshtest.Node[*table.Table]
	fw *Forwarder
}

func admitting(id string, admit *meshtest.Admission) *table.Table {
	return table.New(id, table.Options{Admission: admit})
}

// trio starts a leader and a follower, both controller voters, and an
// outsider peered with both but not a voter; the leader's forwarder
// serves b. Each node's forwarder believes the leader and the follower
// are the voters (the outsider's too: it tries its luck).
func trio(t *testing.T, b Backend) (lead, fol, out *tnode) {
	t.Helper()
	nodes := make([]*tnode, 3)
	for i, name := range []string{"lead", "fol", "out"} {
		nodes[i] = &tnode{Node: meshtest.NewNode(t, name, meshtest.Options{Keepalive: 300 * time.Millisecond}, admitting)}
	}
	voters := []string{nodes[0].ID(), nodes[1].ID()}
	for i, n := range nodes {
		var peers []mesh.PeerConfig
		for j, p := range nodes {
			if j != i {
				peers = append(peers, p.Peer())
			}
		}
		n.Build(peers...)
		deps := Deps{Mesh: n.Mesh, Self: n.ID(), Logger: n.Logger, Registerer: n.Registry}
		if i == 0 {
			deps.Backend = func() Backend { return b }
		}
		fw, err := New(Config{Voters: voters}, deps)
		if err != nil {
			t.Fatal(err)
		}
		n.fw = fw
	}
	for _, n := range nodes {
		n.Run()
	}
	for _, n := range nodes {
		meshtest.WaitFor(t, n.Name+" linked", func() bool {
			return len(n.Mesh.LinkedPeers()) == len(nodes)-1
		})
	}
	return nodes[0], nodes[1], nodes[2]
}

func reqs(n *tnode, dir, result string) float64 {
	return testutil.ToFloat64(n.fw.met.WithLabelValues(dir, result))
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), meshtest.WaitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// A follower's request reaches the leader's backend as it was sent, with
// the follower's node id, and the leader's answer comes back as it was;
// both sides count it.
func TestForwardToLeader(t *testing.T) {
	b := &recBackend{resp: operator.Response{OK: true, Class: operator.ClassOK, Node: "n-host", DecisionID: "d1", Result: json.RawMessage(`{"outcome":"placed"}`)}}
	lead, fol, _ := trio(t, b)
	req := operator.Request{Verb: operator.VerbPlace, Node: "n-host", Args: operator.Args{Package: "echo@1.0.0", Prefer: []string{"n-host"}, DryRun: true}}
	resp, err := fol.fw.Forward(ctxT(t), lead.ID(), req)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(b.resp, resp); diff != "" {
		t.Errorf("answer (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]operator.Request{req}, b.reqs); diff != "" {
		t.Errorf("served (-want +got):\n%s", diff)
	}
	if b.served[0] != fol.ID()+" place" {
		t.Errorf("served %v, want from %s", b.served, fol.ID())
	}
	// The leader counts its answer once it is written, which may be after
	// the follower read it.
	meshtest.WaitFor(t, "the leader to count its answer", func() bool { return reqs(lead, dirIn, resultServed) >= 1 })
	if reqs(fol, dirOut, resultAnswered) != 1 || reqs(lead, dirIn, resultServed) != 1 {
		t.Errorf("counted: out answered %v, in served %v", reqs(fol, dirOut, resultAnswered), reqs(lead, dirIn, resultServed))
	}
}

// Only the controller voters are served: a peer the mesh admits but that
// is not a voter is refused before its request is read, counted, and its
// Forward says the request never reached the leader. A forward to a node
// that is not a voter, or to a voter that serves none, is not sent either.
func TestForwardOnlyBetweenVoters(t *testing.T) {
	b := &recBackend{resp: operator.Response{OK: true, Class: operator.ClassOK}}
	lead, fol, out := trio(t, b)
	req := operator.Request{Verb: operator.VerbStop, Node: "n-host", Args: operator.Args{Instance: "i-1"}}
	_, err := out.fw.Forward(ctxT(t), lead.ID(), req)
	if !errors.Is(err, operator.ErrForwardNotSent) {
		t.Fatalf("a non-voter's forward: %v, want ErrForwardNotSent", err)
	}
	if b.count() != 0 || reqs(lead, dirIn, resultNotVoter) != 1 {
		t.Fatalf("served %d, refused %v; want 0 and 1", b.count(), reqs(lead, dirIn, resultNotVoter))
	}
	if _, err := fol.fw.Forward(ctxT(t), out.ID(), req); !errors.Is(err, operator.ErrForwardNotSent) {
		t.Fatalf("a forward to a non-voter: %v, want ErrForwardNotSent", err)
	}
	// The follower registered no handler (no backend): the mesh resets.
	if _, err := lead.fw.Forward(ctxT(t), fol.ID(), req); !errors.Is(err, operator.ErrForwardNotSent) {
		t.Fatalf("a forward to a voter serving none: %v, want ErrForwardNotSent", err)
	}
	if reqs(out, dirOut, resultNotSent) != 1 || reqs(fol, dirOut, resultNotSent) != 1 {
		t.Errorf("not_sent counted: %v, %v", reqs(out, dirOut, resultNotSent), reqs(fol, dirOut, resultNotSent))
	}
}

// Malformed and oversized streams from a voter are reset and change
// nothing: the backend never sees them.
func TestForwardMalformedStreams(t *testing.T) {
	b := &recBackend{resp: operator.Response{OK: true, Class: operator.ClassOK}}
	lead, fol, _ := trio(t, b)
	big := `{"verb":"place","node":"","args":{"package":"` + strings.Repeat("x", MaxRequestBytes) + `"}}`
	for _, tt := range []struct {
		name  string
		typ   mesh.FrameType
		wire  string
		raw   []byte // written as is instead of a frame
		reset mesh.StreamCode
	}{
		{name: "not json", typ: FrameRequest, wire: "place echo", reset: CodeMalformed},
		{name: "unknown field", typ: FrameRequest, wire: `{"verb":"place","node":"","args":{},"sudo":true}`, reset: CodeMalformed},
		{name: "trailing data", typ: FrameRequest, wire: `{"verb":"place","node":"","args":{}} {"verb":"stop"}`, reset: CodeMalformed},
		{name: "no verb", typ: FrameRequest, wire: `{"node":"","args":{}}`, reset: CodeMalformed},
		{name: "answer frame", typ: FrameResponse, wire: `{"verb":"place","node":"","args":{}}`, reset: CodeMalformed},
		{name: "oversized", typ: FrameRequest, wire: big, reset: CodeMalformed},
		{name: "declared too large", raw: []byte{byte(FrameRequest), 0x00, 0x10, 0x00, 0x00}, reset: CodeMalformed},
		{name: "truncated", raw: []byte{byte(FrameRequest), 0, 0, 0, 10, '{'}, reset: CodeMalformed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := ctxT(t)
			st, err := fol.Mesh.OpenStream(ctx, lead.ID(), mesh.KindOperator)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			_ = st.SetDeadline(time.Now().Add(meshtest.WaitTimeout))
			if tt.raw != nil {
				_, err = st.Write(tt.raw)
			} else {
				err = mesh.WriteFrame(st, tt.typ, []byte(tt.wire))
			}
			if err == nil {
				// An oversized request is reset while it is being written.
				_ = st.CloseWrite()
				_, _, err = mesh.ReadFrame(st, MaxResponseBytes)
			}
			if code, ok := mesh.ResetCode(err); !ok || code != tt.reset {
				t.Fatalf("read after %s: %v, want a reset %#x", tt.name, err, uint64(tt.reset))
			}
		})
	}
	if b.count() != 0 {
		t.Fatalf("the backend served %d malformed requests", b.count())
	}
	if got := reqs(lead, dirIn, resultMalformed); got != 8 {
		t.Fatalf("malformed counted %v, want 8", got)
	}
}

// An answer too large for one frame goes back without its result, saying
// so; the outcome (class, decision) is kept.
func TestForwardOversizedAnswer(t *testing.T) {
	huge := json.RawMessage(`"` + strings.Repeat("x", MaxResponseBytes) + `"`)
	b := &recBackend{resp: operator.Response{OK: true, Class: operator.ClassOK, DecisionID: "d1", Result: huge}}
	lead, fol, _ := trio(t, b)
	resp, err := fol.fw.Forward(ctxT(t), lead.ID(), operator.Request{Verb: operator.VerbPlace, Args: operator.Args{Package: "echo"}})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.OK || resp.DecisionID != "d1" || resp.Result != nil || !strings.Contains(resp.Reason, "too large to forward") {
		t.Fatalf("oversized answer = %+v", operator.Response{OK: resp.OK, Class: resp.Class, DecisionID: resp.DecisionID, Reason: resp.Reason})
	}
}

// Strict answers: what decodeResponse refuses.
func TestDecodeResponse(t *testing.T) {
	for _, tt := range []struct {
		wire string
		ok   bool
	}{
		{`{"ok":true,"class":"ok"}`, true},
		{`{"ok":false,"class":"refused","code":"not_leader","reason":"x"}`, true},
		{`{"ok":true,"class":"refused"}`, false},
		{`{"ok":false,"class":"ok"}`, false},
		{`{"ok":false,"class":"maybe"}`, false},
		{`{"ok":true,"class":"ok","extra":1}`, false},
		{`{"ok":true,"class":"ok"} {}`, false},
		{`{"ok":true,"class":"ok","forwarded_to":"n-1"}`, false},
		{``, false},
	} {
		_, err := decodeResponse([]byte(tt.wire))
		if (err == nil) != tt.ok {
			t.Errorf("decodeResponse(%s) = %v, want ok %v", tt.wire, err, tt.ok)
		}
	}
}
