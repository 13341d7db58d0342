package operator

// A follower controller's writes: the controller's write verbs (place by
// package id, start, stop, unload) given to a follower are forwarded to
// the leader over the mesh (Forwarder, internal/ctlforward), served there
// by OperateForwarded, which never forwards again.

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/nodeld/nodeld/internal/plane"
)

// CodeNotLeader refuses a controller write that this controller cannot
// serve nor forward: it does not lead and no leader is known, the write
// is a place of a package directory (the leader cannot read this node's
// disk), or it was forwarded to a controller that no longer leads (it
// never forwards again).
const CodeNotLeader = "not_leader"

// ErrForwardNotSent is wrapped by a Forwarder's error when the request
// never reached the leader's controller (no link, or the leader refused
// the stream before reading it): nothing was done there.
var ErrForwardNotSent = errors.New("the request did not reach the leader")

// Forwarder sends a controller write to the leader and returns its
// answer (*ctlforward.Forwarder). An error that does not wrap
// ErrForwardNotSent leaves the outcome unknown: the leader may have acted.
type Forwarder interface {
	Forward(ctx context.Context, leader string, req Request) (Response, error)
}

// OperateForwarded serves a request that the follower from forwarded to
// this controller. Only the controller's writes are taken (default deny):
// a place by package id, a start, stop or unload of an instance this
// controller placed; never a package directory (a path on another node's
// disk), never a dispatcher's verb. A controller that does not lead (any
// more) refuses it with CodeNotLeader: a forwarded request goes no further.
func (b *Router) OperateForwarded(ctx context.Context, from string, req Request) Response {
	var resp Response
	switch {
	case b.c == nil:
		resp = Response{Class: ClassError, Code: CodeNoController, Reason: "this node runs no controller"}
	case req.Verb == VerbPlace && (req.Args.PackageDir != "" || req.Args.Package == ""):
		resp = badRequest("a forwarded place names a package id of the leader's store, never a package directory")
	case req.Verb == VerbPlace:
		resp = b.operate(ctx, req, from)
	case req.Verb == VerbStart || req.Verb == VerbStop || req.Verb == VerbUnload:
		if req.Args.Instance == "" {
			resp = badRequest("a forwarded %s names an instance", req.Verb)
			break
		}
		resp = b.operate(ctx, req, from)
	default:
		resp = badRequest("%q is not forwarded: only the controller's writes (place, start, stop, unload) are", req.Verb)
	}
	b.log.Info("forwarded operator request served", zap.String("from", from), zap.String("verb", req.Verb),
		zap.String("class", resp.Class), zap.String("code", resp.Code))
	return resp
}

// toLeader answers a controller write that this controller must not
// serve itself: ok is false when it leads (or runs without raft, or has
// no forwarder: its controller then refuses the write naming the leader).
func (b *Router) toLeader(ctx context.Context, req Request, from string) (Response, bool) {
	info := b.c.Leadership()
	if info.Role == plane.RoleLeader || from == "" && b.fwd == nil {
		return Response{}, false
	}
	return b.redirect(ctx, req, from, info.Leader), true
}

// redirect forwards a write that this controller does not lead for to
// leader, or refuses it with CodeNotLeader: when it was itself forwarded
// (no bouncing), when no leader is known, or when it places a package
// directory.
func (b *Router) redirect(ctx context.Context, req Request, from, leader string) Response {
	who := b.nodeLabel(leader)
	switch {
	case from != "":
		return notLeader("this controller no longer leads (the leader is %s); a forwarded request is not forwarded again: run it again", who)
	case leader == "" || leader == b.nodeID:
		return notLeader("this controller is not the leader, and no leader is known now (an election is under way, or the voters cannot reach each other): try again in a few seconds")
	case b.fwd == nil:
		return notLeader("this controller is not the leader; the leader is %s: run it there", who)
	case req.Verb == VerbPlace && req.Args.PackageDir != "":
		return notLeader("this controller is not the leader; the leader is %s, which cannot read a package directory on this node's disk: "+
			"store the package on the leader (nodeld package add) and place it by package id, or run nodeld ctl place there", who)
	}
	fw := req
	fw.Args.Prefer, fw.Args.Avoid = nil, nil
	// Node references are this node's: the leader gets node ids.
	ref := func(what, r string) (string, error) {
		id, ok := b.resolve(r)
		if !ok {
			return "", fmt.Errorf("%s %q: %w", what, r, ErrUnknownNode)
		}
		return id, nil
	}
	var err error
	if req.Node != "" {
		if fw.Node, err = ref("node", req.Node); err != nil {
			return Response{Class: ClassUnreachable, Reason: err.Error()}
		}
	}
	for _, list := range []struct {
		what string
		in   []string
		out  *[]string
	}{{"--prefer", req.Args.Prefer, &fw.Args.Prefer}, {"--avoid", req.Args.Avoid, &fw.Args.Avoid}} {
		for _, r := range list.in {
			id, err := ref(list.what, r)
			if err != nil {
				return Response{Class: ClassUnreachable, Reason: err.Error()}
			}
			*list.out = append(*list.out, id)
		}
	}
	resp, err := b.fwd.Forward(ctx, leader, fw)
	switch {
	case errors.Is(err, ErrForwardNotSent):
		resp = Response{Class: ClassUnreachable, Reason: fmt.Sprintf("this controller is not the leader, and the leader %s was not reached: %v", who, err)}
	case err != nil:
		resp = Response{Class: ClassIndeterminate, Reason: fmt.Sprintf("forwarded to the leader %s, whose answer was lost (it may have acted; check nodeld ctl placements): %v", who, err)}
	}
	resp.ForwardedTo = leader
	b.log.Info("operator request forwarded to the leader", zap.String("leader", leader), zap.String("verb", req.Verb),
		zap.String("class", resp.Class), zap.String("code", resp.Code))
	return resp
}

func notLeader(format string, args ...any) Response {
	return Response{Class: ClassRefused, Code: CodeNotLeader, Reason: fmt.Sprintf(format, args...)}
}

// nodeLabel is a node id with its configured name, for reasons.
func (b *Router) nodeLabel(id string) string {
	if name := b.nodeName(id); name != "" {
		return name + " (" + id + ")"
	}
	return id
}
