package operator

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/plane"
)

// Node ids of the forwarding tests: this node, the leader, a host.
const (
	leaderID = "n-1111111111111111"
	hostID   = "n-2222222222222222"
)

// raftCtl stands for a controller in raft (the real one is tested with
// three controllers over the mesh, cmd/nodeld TestRaftFollowerForwardsWrites):
// its leadership is info; its writes are recorded and answer err (a
// follower's is a NotLeaderError).
type raftCtl struct {
	info plane.LeaderInfo
	err  error
	held []plane.Placement

	mu     sync.Mutex // guards writes
	writes []string
}

func (c *raftCtl) wrote(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes = append(c.writes, what)
}

func (c *raftCtl) Writes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.writes...)
}

func (c *raftCtl) Place(_ context.Context, o plane.Order) (plane.Report, error) {
	c.wrote("place " + o.PackageDir + " pin " + o.Pin)
	return plane.Report{}, c.err
}

func (c *raftCtl) Start(_ context.Context, ref string) (plane.Placement, error) {
	c.wrote("start " + ref)
	return plane.Placement{InstanceID: ref, Node: hostID}, c.err
}

func (c *raftCtl) Stop(_ context.Context, ref string) (plane.Placement, error) {
	c.wrote("stop " + ref)
	return plane.Placement{InstanceID: ref, Node: hostID}, c.err
}

func (c *raftCtl) Unload(_ context.Context, ref string) (plane.Placement, error) {
	c.wrote("unload " + ref)
	return plane.Placement{InstanceID: ref, Node: hostID}, c.err
}

func (c *raftCtl) Placements() []plane.Placement               { return c.held }
func (c *raftCtl) Declarations() []plane.DeclarationView       { return nil }
func (c *raftCtl) NodeViews() []plane.NodeView                 { return nil }
func (c *raftCtl) Recent(string) (plane.Report, bool)          { return plane.Report{}, false }
func (c *raftCtl) RecentIDs() []string                         { return nil }
func (c *raftCtl) Leadership() plane.LeaderInfo                { return c.info }
func (storeByID) Resolve(id, _ string) (string, string, error) { return "/store/" + id, "1.0.0", nil }

// storeByID resolves every package id to a directory under /store.
type storeByID struct{}

// recForwarder records what it is asked to forward and answers resp, err.
type recForwarder struct {
	resp Response
	err  error

	mu   sync.Mutex // guards sent
	sent []Request
}

func (f *recForwarder) Forward(_ context.Context, leader string, req Request) (Response, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if leader != leaderID {
		return Response{}, errors.New("forwarded to " + leader)
	}
	f.sent = append(f.sent, req)
	return f.resp, f.err
}

func (f *recForwarder) Sent() []Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Request(nil), f.sent...)
}

// raftRouter is a router of c with forwarder f (nil: none); node names
// are "leader", "host" and this node's "self".
func raftRouter(t *testing.T, c *raftCtl, f Forwarder) *Router {
	t.Helper()
	names := map[string]string{"self": selfID, "leader": leaderID, "host": hostID}
	r, err := NewRouter(RouterDeps{Dispatcher: nodeBackend{}, Controller: c, Store: storeByID{}, NodeID: selfID, Forwarder: f,
		ResolveNode: func(ref string) (string, bool) {
			if id, ok := names[ref]; ok {
				return id, true
			}
			for _, id := range names {
				if id == ref {
					return id, true
				}
			}
			return "", false
		},
		PeerNames: func() map[string]string { return map[string]string{leaderID: "leader", hostID: "host"} }})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func follower() *raftCtl {
	return &raftCtl{info: plane.LeaderInfo{Role: plane.RoleFollower, Term: 3, Leader: leaderID},
		err: &plane.NotLeaderError{Leader: leaderID}, held: []plane.Placement{{InstanceID: "i-1", Node: hostID, DecisionID: "d1"}}}
}

// A follower forwards the controller's writes to the leader, with its
// node references as node ids, and says so in the answer; its own
// controller is not asked. A package directory, or a write with no leader
// known, is refused not_leader and forwarded nowhere; the dispatcher's
// verbs (an instance the controller did not place) stay local.
func TestRouterFollowerForwardsWrites(t *testing.T) {
	ctx := callCtx(t)
	c, f := follower(), &recForwarder{resp: Response{OK: true, Class: ClassOK, Node: hostID, DecisionID: "d2"}}
	r := raftRouter(t, c, f)

	reqs := []Request{
		{Verb: VerbPlace, Node: "host", Args: Args{Package: "echo@1.0.0", Prefer: []string{"host"}, Avoid: []string{"self"}}},
		{Verb: VerbStart, Args: Args{Instance: "d1"}},
		{Verb: VerbStop, Node: "host", Args: Args{Instance: "i-1"}},
		{Verb: VerbUnload, Node: "host", Args: Args{Instance: "i-1"}},
	}
	for _, req := range reqs {
		resp := r.Operate(ctx, req)
		if !resp.OK || resp.ForwardedTo != leaderID || resp.DecisionID != "d2" {
			t.Errorf("%s on a follower = %+v, want the leader's answer, forwarded to %s", req.Verb, resp, leaderID)
		}
	}
	want := []Request{
		{Verb: VerbPlace, Node: hostID, Args: Args{Package: "echo@1.0.0", Prefer: []string{hostID}, Avoid: []string{selfID}}},
		{Verb: VerbStart, Args: Args{Instance: "d1"}},
		{Verb: VerbStop, Node: hostID, Args: Args{Instance: "i-1"}},
		{Verb: VerbUnload, Node: hostID, Args: Args{Instance: "i-1"}},
	}
	if diff := cmp.Diff(want, f.Sent()); diff != "" {
		t.Errorf("forwarded (-want +got):\n%s", diff)
	}
	if w := c.Writes(); len(w) != 0 {
		t.Errorf("the follower's controller was asked %v", w)
	}

	// A directory on this node's disk: refused, naming the leader and the way out.
	resp := r.Operate(ctx, Request{Verb: VerbPlace, Args: Args{PackageDir: "/pkgs/echo"}})
	for _, s := range []string{"not the leader", "leader (" + leaderID + ")", "nodeld package add", "package id"} {
		if resp.Class != ClassRefused || resp.Code != CodeNotLeader || !strings.Contains(resp.Reason, s) {
			t.Errorf("dir place on a follower = %+v, want not_leader saying %q", resp, s)
		}
	}
	// An unknown node reference: unreachable here, nothing forwarded.
	if resp := r.Operate(ctx, Request{Verb: VerbPlace, Args: Args{Package: "echo", Avoid: []string{"nowhere"}}}); resp.Class != ClassUnreachable {
		t.Errorf("place --avoid nowhere on a follower = %+v, want unreachable", resp)
	}
	// Not the controller's instance: the dispatcher's stop, as always.
	if resp := r.Operate(ctx, Request{Verb: VerbStop, Node: "self", Args: Args{Instance: "i-9"}}); resp.ForwardedTo != "" || resp.Code != "unknown_instance" {
		t.Errorf("stop of a node's own instance on a follower = %+v, want the dispatcher's answer", resp)
	}
	if n := len(f.Sent()); n != len(reqs) {
		t.Errorf("%d requests forwarded, want %d", n, len(reqs))
	}

	// No leader known: refused, forwarded nowhere.
	c.info.Leader = ""
	if resp := r.Operate(ctx, Request{Verb: VerbStart, Args: Args{Instance: "d1"}}); resp.Code != CodeNotLeader || !strings.Contains(resp.Reason, "no leader is known") {
		t.Errorf("start with no leader = %+v, want not_leader", resp)
	}
	if n := len(f.Sent()); n != len(reqs) {
		t.Errorf("%d requests forwarded, want %d", n, len(reqs))
	}
}

// What became of a forward the leader did not answer: unreachable when
// the request never reached it, indeterminate when it may have acted.
func TestRouterForwardFailures(t *testing.T) {
	ctx := callCtx(t)
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{"not sent", ErrForwardNotSent, ClassUnreachable},
		{"answer lost", errors.New("stream reset"), ClassIndeterminate},
	} {
		r := raftRouter(t, follower(), &recForwarder{err: tt.err})
		resp := r.Operate(ctx, Request{Verb: VerbStop, Node: "host", Args: Args{Instance: "i-1"}})
		if resp.Class != tt.want || resp.ForwardedTo != leaderID || !strings.Contains(resp.Reason, "leader ("+leaderID+")") {
			t.Errorf("%s: %+v, want %s naming the leader", tt.name, resp, tt.want)
		}
	}
	// Without a forwarder a follower refuses, naming the leader.
	r := raftRouter(t, follower(), nil)
	if resp := r.Operate(ctx, Request{Verb: VerbPlace, Args: Args{Package: "echo"}}); resp.Code != CodeNotLeader || !strings.Contains(resp.Reason, leaderID) {
		t.Errorf("place on a follower without a forwarder = %+v", resp)
	}
}

// The leader serves a forwarded write through its controller and nothing
// else: never a directory, never a dispatcher's verb, never an instance
// it did not place; and a controller that does not lead refuses it
// not_leader and never forwards it again (no bouncing).
func TestRouterServesForwarded(t *testing.T) {
	ctx := callCtx(t)
	lead := &raftCtl{info: plane.LeaderInfo{Role: plane.RoleLeader, Term: 3, Leader: selfID},
		held: []plane.Placement{{InstanceID: "i-1", Node: hostID, DecisionID: "d1"}}}
	f := &recForwarder{}
	r := raftRouter(t, lead, f)
	const from = "n-3333333333333333"
	for _, tt := range []struct {
		req       Request
		code      string
		wantWrite string
	}{
		{Request{Verb: VerbPlace, Node: hostID, Args: Args{Package: "echo"}}, CodeUnplaceable, "place /store/echo pin " + hostID},
		{Request{Verb: VerbStop, Node: hostID, Args: Args{Instance: "i-1"}}, "", "stop i-1"},
		{Request{Verb: VerbStart, Args: Args{Instance: "d1"}}, "", "start d1"},
		{Request{Verb: VerbUnload, Node: hostID, Args: Args{Instance: "i-1"}}, "", "unload i-1"},
		{Request{Verb: VerbPlace, Node: hostID, Args: Args{PackageDir: "/etc"}}, CodeBadRequest, ""},
		{Request{Verb: VerbPlace, Args: Args{}}, CodeBadRequest, ""},
		{Request{Verb: VerbDescribe, Node: "self"}, CodeBadRequest, ""},
		{Request{Verb: VerbPlacements}, CodeBadRequest, ""},
		{Request{Verb: VerbRevoke, Node: "self"}, CodeBadRequest, ""},
		{Request{Verb: VerbStop, Node: "self", Args: Args{Instance: "i-9"}}, CodeUnknownPlacement, ""},
		{Request{Verb: VerbStop, Node: hostID}, CodeBadRequest, ""},
	} {
		before := len(lead.Writes())
		resp := r.OperateForwarded(ctx, from, tt.req)
		if resp.Code != tt.code || resp.ForwardedTo != "" {
			t.Errorf("forwarded %s %+v = %+v, want code %q", tt.req.Verb, tt.req.Args, resp, tt.code)
		}
		var got string
		if w := lead.Writes(); len(w) > before {
			got = w[len(w)-1]
		}
		if got != tt.wantWrite {
			t.Errorf("forwarded %s %+v: the controller did %q, want %q", tt.req.Verb, tt.req.Args, got, tt.wantWrite)
		}
	}

	// It lost the lead: refused, not forwarded again (the follower's
	// answer names the new leader), its controller not asked.
	fol := follower()
	r = raftRouter(t, fol, f)
	for _, req := range []Request{{Verb: VerbPlace, Args: Args{Package: "echo"}}, {Verb: VerbStart, Args: Args{Instance: "d1"}}} {
		if resp := r.OperateForwarded(ctx, from, req); resp.Code != CodeNotLeader || !strings.Contains(resp.Reason, "not forwarded again") {
			t.Errorf("forwarded %s to a follower = %+v, want not_leader", req.Verb, resp)
		}
	}
	// Leading in raft, but its controller says otherwise (it lost the
	// lead between the two): refused too.
	fol.info.Role = plane.RoleLeader
	if resp := r.OperateForwarded(ctx, from, Request{Verb: VerbPlace, Args: Args{Package: "echo"}}); resp.Code != CodeNotLeader {
		t.Errorf("forwarded place to a deposed leader = %+v, want not_leader", resp)
	}
	if len(f.Sent()) != 0 {
		t.Errorf("a forwarded request was forwarded again: %+v", f.Sent())
	}
}

// A controller that lost the lead between the router's look and its
// write: the operator's request is forwarded after all.
func TestRouterForwardsAfterLostLead(t *testing.T) {
	c := follower()
	c.info.Role = plane.RoleLeader // raft's view lags the controller's
	f := &recForwarder{resp: Response{OK: true, Class: ClassOK}}
	r := raftRouter(t, c, f)
	resp := r.Operate(callCtx(t), Request{Verb: VerbPlace, Args: Args{Package: "echo"}})
	if !resp.OK || resp.ForwardedTo != leaderID || len(f.Sent()) != 1 || len(c.Writes()) != 1 {
		t.Fatalf("place = %+v; forwarded %+v; controller %v", resp, f.Sent(), c.Writes())
	}
}
