package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/proxy/proxytest"
	"github.com/nodeld/nodeld/internal/table"
)

// expectAll is a Holds that expects every role, for maxWait.
type expectAll struct {
	maxWait time.Duration
	mu      sync.Mutex // guards wants
	wants   int
}

func (e *expectAll) Expect(string) (time.Duration, bool) { return e.maxWait, true }
func (e *expectAll) Want(string) {
	e.mu.Lock()
	e.wants++
	e.mu.Unlock()
}

// watchResolver is fakeResolver with the table's generation and change
// wake-ups, for remote targets (which the table only learns from peers'
// signed adverts).
type watchResolver struct {
	*fakeResolver
	mu   sync.Mutex // guards gen, subs
	gen  uint64
	subs []chan struct{}
}

func (w *watchResolver) Generation() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gen
}

func (w *watchResolver) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	w.subs = append(w.subs, ch)
	w.mu.Unlock()
	return ch, func() {}
}

// route sets role's target (none when t is the zero Target) and wakes
// subscribers, as a table change does.
func (w *watchResolver) route(role string, t table.Target) {
	w.fakeResolver.mu.Lock()
	if t == (table.Target{}) {
		delete(w.fakeResolver.targets, role)
	} else {
		w.fakeResolver.targets[role] = t
	}
	w.fakeResolver.mu.Unlock()
	w.mu.Lock()
	w.gen++
	subs := w.subs
	w.mu.Unlock()
	for _, ch := range subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// holdHarness is a proxy over a real table with role "chat".
type holdHarness struct {
	*harness
	tb *table.Table
}

func startHeld(t *testing.T, hc HoldConfig, deps Deps) *holdHarness {
	t.Helper()
	tb := table.New("n-self", table.Options{})
	if deps.Resolver == nil {
		deps.Resolver = tb
	}
	h := startProxy(t, Config{Hold: hc, Roles: []RoleConfig{{Name: "chat", Listen: "127.0.0.1:0"}, {Name: "other", Listen: "127.0.0.1:0"}}}, deps)
	return &holdHarness{harness: h, tb: tb}
}

// depth is the hold queue depth gauge of role.
func (h *harness) depth(role string) float64 {
	v, _ := metricValue(h.t, h.reg, "nodeld_proxy_hold_queue_depth", map[string]string{"role": role})
	return v
}

func (h *harness) waitDepth(role string, n int) {
	h.t.Helper()
	meshtest.WaitFor(h.t, fmt.Sprintf("%d requests held for %s", n, role), func() bool { return h.depth(role) == float64(n) })
}

// serveThenLose registers an instance of chat, waits until the proxy saw
// it live, and releases it: chat is then expected back.
func (h *holdHarness) serveThenLose() {
	h.t.Helper()
	up := proxytest.New(h.t, proxytest.Options{})
	slot, err := h.tb.RegisterLocal(table.OriginPlaced, "chat", up.URL, "", "openai", "openai")
	if err != nil {
		h.t.Fatal(err)
	}
	meshtest.WaitFor(h.t, "chat seen live", func() bool { return h.p.recent.Live("chat") })
	slot.Release()
	if _, ok := h.tb.Resolve("chat"); ok {
		h.t.Fatal("chat still resolves after its release")
	}
}

func numberedBody(i int) string {
	return `{"model":"m","messages":[{"role":"user","content":"` + fmt.Sprint(i) + `"}]}`
}

// TestHoldAnswersOnceTheRouteAppears: 50 requests arriving while a role
// served here lately has no route are held, then all answered by the one
// instance registered after them, released in arrival order.
func TestHoldAnswersOnceTheRouteAppears(t *testing.T) {
	h := startHeld(t, HoldConfig{MaxWait: testDeadline}, Deps{})
	var mu sync.Mutex
	var order []string
	h.p.onHoldRelease = func(role string, body []byte) {
		mu.Lock()
		order = append(order, string(body))
		mu.Unlock()
	}
	h.serveThenLose()
	const n = 50
	status := make(chan int, n)
	for i := range n {
		go func() {
			res, err := h.client.Post(h.url("chat")+"/v1/chat/completions", "application/json", strings.NewReader(numberedBody(i)))
			if err != nil {
				status <- -1
				return
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			status <- res.StatusCode
		}()
		h.waitDepth("chat", i+1) // arrival order is send order
	}
	up := proxytest.New(t, proxytest.Options{})
	if _, err := h.tb.RegisterLocal(table.OriginPlaced, "chat", up.URL, "", "openai", "openai"); err != nil {
		t.Fatal(err)
	}
	for range n {
		if s := wait(t, status, "a held request's answer"); s != http.StatusOK {
			t.Fatalf("held request answered %d, want 200", s)
		}
	}
	if got := up.Count(); got != n {
		t.Errorf("upstream saw %d requests, want %d", got, n)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, b := range order {
		if b != numberedBody(i) {
			t.Fatalf("release %d was request %s, want arrival order", i, b)
		}
	}
	if len(order) != n {
		t.Errorf("%d releases, want %d", len(order), n)
	}
	if h.depth("chat") != 0 {
		t.Errorf("queue depth %v after all answered, want 0", h.depth("chat"))
	}
	if v, _ := metricValue(t, h.reg, "nodeld_proxy_held_requests_total", map[string]string{"role": "chat"}); v != n {
		t.Errorf("held requests counted %v, want %d", v, n)
	}
}

// TestHoldRefusals: past max wait 503 model_loading with Retry-After;
// past the queue bound 503 queue_full at once; a client that goes away
// leaves the queue and is never forwarded.
func TestHoldRefusals(t *testing.T) {
	t.Run("max wait", func(t *testing.T) {
		h := startHeld(t, HoldConfig{MaxWait: 100 * time.Millisecond}, Deps{Holds: &expectAll{maxWait: 100 * time.Millisecond}})
		res, body := h.post("chat", "/v1/chat/completions", chatBody(false))
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" {
			t.Fatalf("past max wait: %d Retry-After %q, want 503 with Retry-After", res.StatusCode, res.Header.Get("Retry-After"))
		}
		if e := apiError(t, res, body); e.Code != CodeModelLoading {
			t.Errorf("code %q, want %q", e.Code, CodeModelLoading)
		}
		if v, _ := metricValue(t, h.reg, "nodeld_proxy_hold_refused_total", map[string]string{"role": "chat", "reason": "max_wait"}); v != 1 {
			t.Errorf("refused for wait counted %v, want 1", v)
		}
	})
	t.Run("queue full and client gone", func(t *testing.T) {
		holds := &expectAll{maxWait: testDeadline}
		h := startHeld(t, HoldConfig{MaxWait: testDeadline, Queue: 1}, Deps{Holds: holds})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		gone := make(chan error, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.url("chat")+"/v1/chat/completions", strings.NewReader(chatBody(false)))
			res, err := h.client.Do(req)
			if err == nil {
				res.Body.Close()
			}
			gone <- err
		}()
		h.waitDepth("chat", 1)
		start := time.Now()
		res, body := h.post("chat", "/v1/chat/completions", chatBody(false))
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" {
			t.Fatalf("past the queue bound: %d Retry-After %q, want 503 with Retry-After", res.StatusCode, res.Header.Get("Retry-After"))
		}
		if e := apiError(t, res, body); e.Code != CodeQueueFull {
			t.Errorf("code %q, want %q", e.Code, CodeQueueFull)
		}
		if d := time.Since(start); d > testDeadline/2 {
			t.Errorf("queue_full took %s, want at once", d)
		}
		cancel()
		if err := wait(t, gone, "the gone client's request"); !errors.Is(err, context.Canceled) {
			t.Errorf("gone client: %v, want canceled", err)
		}
		h.waitDepth("chat", 0)
		up := proxytest.New(t, proxytest.Options{})
		if _, err := h.tb.RegisterLocal(table.OriginPlaced, "chat", up.URL, "", "openai", "openai"); err != nil {
			t.Fatal(err)
		}
		if res, body := h.post("chat", "/v1/chat/completions", chatBody(false)); res.StatusCode != http.StatusOK {
			t.Fatalf("after the route appeared: %d %s", res.StatusCode, body)
		}
		if up.Count() != 1 {
			t.Errorf("upstream saw %d requests, want 1 (the gone client's never)", up.Count())
		}
		holds.mu.Lock()
		defer holds.mu.Unlock()
		if holds.wants != 1 {
			t.Errorf("Want called %d times, want 1 (one request held)", holds.wants)
		}
	})
}

// TestHoldStreamKeepalive: a held streaming request gets a 200
// text/event-stream head and SSE comment lines while it waits, then the
// upstream's stream.
func TestHoldStreamKeepalive(t *testing.T) {
	h := startHeld(t, HoldConfig{MaxWait: testDeadline, Keepalive: 5 * time.Millisecond}, Deps{})
	h.serveThenLose()
	res, err := h.client.Post(h.url("chat")+"/v1/chat/completions", "application/json", strings.NewReader(chatBody(true)))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK || !isEventStream(res.Header.Get("Content-Type")) {
		t.Fatalf("held stream: %d %q, want 200 text/event-stream", res.StatusCode, res.Header.Get("Content-Type"))
	}
	br := bufio.NewReader(res.Body)
	for range 2 {
		line, err := br.ReadString('\n')
		if err != nil || line != ": waiting for chat\n" {
			t.Fatalf("keepalive line %q (%v), want the comment", line, err)
		}
		if blank, _ := br.ReadString('\n'); blank != "\n" {
			t.Fatalf("after the comment %q, want a blank line", blank)
		}
	}
	up := proxytest.New(t, proxytest.Options{})
	if _, err := h.tb.RegisterLocal(table.OriginPlaced, "chat", up.URL, "", "openai", "openai"); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	s := string(rest)
	// Comments may still precede the stream; the stream follows whole.
	s = strings.ReplaceAll(s, ": waiting for chat\n\n", "")
	if !strings.HasPrefix(s, "data: {") || !strings.HasSuffix(s, "data: [DONE]\n\n") {
		t.Fatalf("after the route appeared: %q, want the upstream's stream", s)
	}
	if up.Count() != 1 {
		t.Errorf("upstream saw %d requests, want 1", up.Count())
	}
}

// TestHoldStreamPastMaxWait: a held stream whose head was sent ends with
// an SSE data: error event.
func TestHoldStreamPastMaxWait(t *testing.T) {
	h := startHeld(t, HoldConfig{MaxWait: 200 * time.Millisecond, Keepalive: 5 * time.Millisecond}, Deps{Holds: &expectAll{maxWait: 200 * time.Millisecond}})
	res, body := h.post("chat", "/v1/chat/completions", chatBody(true))
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200 (the head was sent while waiting)", res.StatusCode)
	}
	s := strings.ReplaceAll(string(body), ": waiting for chat\n\n", "")
	if !strings.HasPrefix(s, `data: {"error":`) || !strings.Contains(s, CodeModelLoading) || !strings.HasSuffix(s, "\n\n") {
		t.Fatalf("stream %q, want one data: error event with %s", s, CodeModelLoading)
	}
}

// TestHoldRemoteFailedBeforeAnswer: a forward to a peer that died before
// answering is held and sent once to the role's next route; a role never
// served keeps the immediate 503 no_instance.
func TestHoldRemoteFailedBeforeAnswer(t *testing.T) {
	res := &watchResolver{fakeResolver: newResolver()}
	res.route("chat", table.Target{Kind: table.TargetRemote, NodeID: "node-b"})
	var mu sync.Mutex
	calls := map[string]int{}
	var bodies []string
	remote := remoteFunc(func(ctx context.Context, nodeID, role string, r *http.Request, body []byte, w http.ResponseWriter) error {
		mu.Lock()
		calls[nodeID]++
		bodies = append(bodies, string(body))
		mu.Unlock()
		if nodeID == "node-b" {
			return fmt.Errorf("%w: link closed", ErrNotAnswered)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"from":"`+nodeID+`"}`)
		return nil
	})
	h := startHeld(t, HoldConfig{MaxWait: testDeadline}, Deps{Resolver: res, Remote: remote})
	meshtest.WaitFor(t, "chat seen live", func() bool { return h.p.recent.Live("chat") })

	start := time.Now()
	r, body := h.post("other", "/v1/chat/completions", chatBody(false))
	if r.StatusCode != http.StatusServiceUnavailable || apiError(t, r, body).Code != CodeNoInstance {
		t.Fatalf("never-served role: %d %s, want 503 no_instance", r.StatusCode, body)
	}
	if d := time.Since(start); d > testDeadline/2 {
		t.Errorf("never-served role answered after %s, want at once", d)
	}

	type answer struct {
		status int
		body   string
		route  string
	}
	got := make(chan answer, 1)
	go func() {
		r, err := h.client.Post(h.url("chat")+"/v1/chat/completions", "application/json", strings.NewReader(chatBody(false)))
		if err != nil {
			got <- answer{status: -1, body: err.Error()}
			return
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		got <- answer{r.StatusCode, string(b), r.Header.Get(RouteHeader)}
	}()
	h.waitDepth("chat", 1)
	res.route("chat", table.Target{}) // the mesh found the peer dead
	res.route("chat", table.Target{Kind: table.TargetRemote, NodeID: "node-c"})
	a := wait(t, got, "the held request's answer")
	if a.status != http.StatusOK || a.body != `{"from":"node-c"}` || a.route != "node-c" {
		t.Fatalf("held request: %+v, want 200 from node-c", a)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls["node-b"] != 1 || calls["node-c"] != 1 {
		t.Errorf("calls %v, want node-b once (failed) and node-c once", calls)
	}
	for _, b := range bodies {
		if b != chatBody(false) {
			t.Errorf("forwarded body %q, want the request's", b)
		}
	}
	if v, _ := metricValue(t, h.reg, "nodeld_proxy_requests_total", map[string]string{"role": "chat", "route": "remote", "code": "200"}); v != 1 {
		t.Errorf("remote 200 counted %v, want 1 (the failed try not counted)", v)
	}
}

// TestHoldOff: max_wait 0 refuses a role served lately at once, 503
// no_instance, as before holding existed; a reload turns holding on.
func TestHoldOff(t *testing.T) {
	h := startHeld(t, HoldConfig{}, Deps{Holds: &expectAll{maxWait: testDeadline}})
	h.serveThenLose()
	r, body := h.post("chat", "/v1/chat/completions", chatBody(false))
	if r.StatusCode != http.StatusServiceUnavailable || apiError(t, r, body).Code != CodeNoInstance {
		t.Fatalf("hold off: %d %s, want 503 no_instance", r.StatusCode, body)
	}
	// A reload turns it on for the next request.
	if err := h.p.ApplyConfig(Config{Hold: HoldConfig{MaxWait: 50 * time.Millisecond},
		Roles: []RoleConfig{{Name: "chat", Listen: "127.0.0.1:0"}, {Name: "other", Listen: "127.0.0.1:0"}}}); err != nil {
		t.Fatal(err)
	}
	r, body = h.post("chat", "/v1/chat/completions", chatBody(false))
	if r.StatusCode != http.StatusServiceUnavailable || apiError(t, r, body).Code != CodeModelLoading {
		t.Fatalf("hold on after a reload: %d %s, want 503 model_loading", r.StatusCode, body)
	}
}
