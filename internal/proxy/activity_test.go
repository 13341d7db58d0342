package proxy

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/activity"
	"github.com/nodeld/nodeld/internal/table"
)

// TestActivityRecordsEachForward: every forward that ends is told to the
// activity log once, local or to a peer, with its status, time to first
// byte and, when the answer reported usage, its completion tokens.
func TestActivityRecordsEachForward(t *testing.T) {
	log := activity.New(16, nil)
	remote := remoteFunc(func(ctx context.Context, nodeID, role string, r *http.Request, body []byte, w http.ResponseWriter) error {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":21,"total_tokens":22}}`)
		return nil
	})
	h := startProxy(t, Config{}, Deps{Remote: remote, Activity: log})
	release := make(chan struct{})
	up := perfUpstream(t, 64, release)
	h.resolver.set("chat", table.Target{Kind: table.TargetLocal, Base: up.URL, Model: "m"})
	if code := postStream(t, h, release); code != 200 {
		t.Fatalf("stream: %d", code)
	}
	h.post("chat", "/v1/chat/completions", `{"model":"m","fail":1}`)
	h.resolver.set("chat", table.Target{Kind: table.TargetRemote, NodeID: "node-b"})
	if res, _ := h.post("chat", "/v1/chat/completions", `{"model":"m"}`); res.StatusCode != 200 {
		t.Fatalf("remote: %d", res.StatusCode)
	}

	got := log.Recent(0)
	type entry struct {
		Route, Node string
		Status      int
		Tokens      int
		FirstByte   bool
		Rate        bool
	}
	var short []entry
	for _, r := range got {
		if r.Role != "chat" || r.At.IsZero() || r.Duration <= 0 {
			t.Errorf("entry %+v: want role chat, a time and a duration", r)
		}
		short = append(short, entry{r.Route, r.Node, r.Status, r.Tokens, r.TTFB > 0, r.TokensPerSec > 0})
	}
	want := []entry{
		{Route: activity.RoutePeer, Node: "node-b", Status: 200, Tokens: 21, FirstByte: true, Rate: false /* no 10 ms window */},
		{Route: activity.RouteLocal, Status: 500, FirstByte: true},
		{Route: activity.RouteLocal, Status: 200, Tokens: 64, FirstByte: true, Rate: true},
	}
	if len(short) != len(want) {
		t.Fatalf("activity holds %d requests, want %d: %+v", len(short), len(want), got)
	}
	// A remote answer this fast may or may not span the rate window.
	short[0].Rate = false
	if diff := cmp.Diff(want, short); diff != "" {
		t.Errorf("activity (-want +got):\n%s", diff)
	}
}

// TestActivityCountsAtTheForwardsEnd: a forward is counted in the second
// it ended, as the proxy read it: the log does not read its clock again.
func TestActivityCountsAtTheForwardsEnd(t *testing.T) {
	var reads atomic.Int32
	log := activity.New(16, func() time.Time { reads.Add(1); return time.Now() })
	remote := remoteFunc(func(ctx context.Context, nodeID, role string, r *http.Request, body []byte, w http.ResponseWriter) error {
		_, _ = io.WriteString(w, `{"choices":[]}`)
		return nil
	})
	h := startProxy(t, Config{}, Deps{Remote: remote, Activity: log})
	h.resolver.set("chat", table.Target{Kind: table.TargetRemote, NodeID: "node-b"})
	if res, _ := h.post("chat", "/v1/chat/completions", `{"model":"m"}`); res.StatusCode != 200 {
		t.Fatalf("remote: %d", res.StatusCode)
	}
	if n := reads.Load(); n != 0 {
		t.Errorf("the log read its clock %d times for a forward, want 0", n)
	}
	got := log.Recent(0)
	if len(got) != 1 {
		t.Fatalf("activity holds %d requests, want 1", len(got))
	}
	end := got[0].At.Add(got[0].Duration).Unix()
	counted := 0
	for _, s := range log.Rates() {
		if s.At.Unix() == end {
			counted += s.Requests
		}
	}
	if counted != 1 {
		t.Errorf("the second the forward ended counts %d requests, want 1", counted)
	}
}
