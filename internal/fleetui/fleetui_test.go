package fleetui

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"

	"github.com/nodeld/nodeld/internal/admin"
	"github.com/nodeld/nodeld/internal/operator"
)

const testDeadline = 10 * time.Second

func get(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.Host = "127.0.0.1:9464"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func TestPageShowsNodeFleetActivityAndInstances(t *testing.T) {
	f := newFixture(t, 3, 4, 2)
	w := get(t, f.ui.Handler(), "/ui/")
	if w.Code != 200 {
		t.Fatalf("/ui/ = %d %s", w.Code, w.Body)
	}
	body := w.Body.String()
	for _, want := range []string{
		`<tr data-role="chat">`, `<b class="peer">b</b>`, // chat served by peer b
		`<span class="ok">local</span> <code>http://127.0.0.1:9000</code>`,
		`<span class="warn">starting</span>`, `3 held`, // on demand, its queue
		`seq 17`, `v-test`, // chain head, version
		`<td class="name">a</td>`, `<td class="name">b</td>`, `<td class="name">c</td>`,
		`href="#d-` + decID(1) + `"`, `id="d-` + decID(1) + `"`,
		`588.2`, `12.0 ms`, `peer <b>b</b>`, // activity: tokens/s, first byte, the peer
		`href="#logs-i-000000000001"`,
		`<svg class="chart"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if h := w.Header().Get("Content-Security-Policy"); h != ContentSecurityPolicy {
		t.Errorf("CSP = %q", h)
	}
	// No inline script or style, and nothing off this origin.
	for _, re := range []string{`<script>`, `<script [^>]*>[^<]`, `style=`, `<style`, `https?://(?:[^1"]|1[^2]|12[^7])`} {
		if m := regexp.MustCompile(re).FindString(body); m != "" && !strings.Contains(m, "127.0.0.1") {
			t.Errorf("page has %q (matching %s)", m, re)
		}
	}
}

func TestPageWithoutController(t *testing.T) {
	f := newFixture(t, 3, 4, 2)
	r, err := operator.NewRouter(operator.RouterDeps{Dispatcher: hostBackend{}, NodeID: nodeID(0)})
	if err != nil {
		t.Fatal(err)
	}
	ui, err := New(Deps{Status: func() *operator.StatusDoc { return f.status }, Source: r})
	if err != nil {
		t.Fatal(err)
	}
	w := get(t, ui.Handler(), "/ui/")
	if w.Code != 200 || strings.Contains(w.Body.String(), `id="sec-nodes"`) || !strings.Contains(w.Body.String(), `data-role="chat"`) {
		t.Errorf("/ui/ without a controller = %d, fleet shown or node missing:\n%s", w.Code, w.Body)
	}
	if d := ui.Snapshot(); d.Fleet != nil || d.Activity == nil {
		t.Errorf("snapshot without a controller and activity: fleet %v, activity %v", d.Fleet, d.Activity)
	}
}

// TestPageIsSmall: the page and every asset it loads weigh under 200 KB.
func TestPageIsSmall(t *testing.T) {
	f := newFixture(t, 3, 4, 2)
	h := f.ui.Handler()
	page := get(t, h, "/ui/").Body.String()
	total := len(page)
	refs := regexp.MustCompile(`(?:src|href)="(/ui/assets/[^"]+)"`).FindAllStringSubmatch(page, -1)
	if len(refs) < 3 {
		t.Fatalf("page loads %d assets, want the stylesheet, script and icon: %v", len(refs), refs)
	}
	for _, m := range refs {
		w := get(t, h, m[1])
		if w.Code != 200 {
			t.Fatalf("%s = %d", m[1], w.Code)
		}
		total += w.Body.Len()
	}
	const limit = 200 << 10
	if total >= limit {
		t.Errorf("page and assets weigh %d bytes, want under %d", total, limit)
	}
	t.Logf("page and assets: %d bytes", total)
	if w := get(t, h, "/ui/assets/page.html"); w.Code != 404 {
		t.Errorf("the template is served as an asset: %d", w.Code)
	}
}

func TestDataIsJSON(t *testing.T) {
	f := newFixture(t, 3, 4, 2)
	w := get(t, f.ui.Handler(), "/ui/data")
	var d Data
	if err := json.Unmarshal(w.Body.Bytes(), &d); err != nil || w.Code != 200 {
		t.Fatalf("/ui/data = %d %v", w.Code, err)
	}
	if d.Node.Roles[0].Route != routePeer || d.Node.Roles[0].NodeName != "b" || len(d.Fleet.Nodes) != 3 ||
		len(d.Fleet.Decisions) != 2 || d.Fleet.Decisions[0].ID != decID(1) || len(d.Activity) != 1 {
		t.Errorf("data: %+v", d)
	}
}

func TestDecisionExplained(t *testing.T) {
	f := newFixture(t, 5, 4, 2)
	h := f.ui.Handler()
	w := get(t, h, "/ui/decisions/"+decID(0)[:12])
	body := w.Body.String()
	if w.Code != 200 || !strings.Contains(body, "decision: PLACED on") || !strings.Contains(body, `class="chosen"`) ||
		!strings.Contains(body, "<b>trust</b>") {
		t.Errorf("/ui/decisions = %d:\n%s", w.Code, body)
	}
	for _, bad := range []string{"zz", decID(99)} {
		if w := get(t, h, "/ui/decisions/"+bad); w.Code != 404 {
			t.Errorf("/ui/decisions/%s = %d, want 404", bad, w.Code)
		}
	}
}

func TestLogs(t *testing.T) {
	f := newFixture(t, 3, 4, 2)
	h := f.ui.Handler()
	w := get(t, h, "/ui/logs/i-000000000001")
	if w.Code != 200 || w.Header().Get("Content-Type") != "text/plain; charset=utf-8" ||
		!strings.Contains(w.Body.String(), "hello <b>out</b>") || !strings.Contains(w.Body.String(), "warn") {
		t.Errorf("logs = %d %q %q", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	for _, bad := range []string{"i-unknown", "..%2f..%2fetc", strings.Repeat("x", 300)} {
		if w := get(t, h, "/ui/logs/"+bad); w.Code != 404 {
			t.Errorf("/ui/logs/%s = %d, want 404", bad, w.Code)
		}
	}
}

// serveAdmin runs the admin server with the page until the test ends.
func serveAdmin(t *testing.T, ui *UI) (base string, stop func() time.Duration) {
	t.Helper()
	s, err := admin.New(admin.Config{Listen: "127.0.0.1:0"}, admin.Deps{
		Gatherer: prometheus.NewRegistry(), Status: func() any { return map[string]string{} },
		UI: ui.Handler(), Logger: zaptest.NewLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case <-s.Bound():
	case err := <-done:
		t.Fatalf("admin: %v", err)
	}
	stopped := false
	stop = func() time.Duration {
		if stopped {
			return 0
		}
		stopped = true
		start := time.Now()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("admin Run: %v", err)
			}
		case <-time.After(testDeadline):
			t.Fatal("admin did not stop")
		}
		return time.Since(start)
	}
	t.Cleanup(func() { stop() })
	return "http://" + s.Addr().String(), stop
}

// TestForeignHostOrOriginRefused: every route of the page, its event
// stream included, is behind the admin port's Host and Origin guard.
func TestForeignHostOrOriginRefused(t *testing.T) {
	f := newFixture(t, 3, 4, 2)
	base, _ := serveAdmin(t, f.ui)
	client := &http.Client{Timeout: testDeadline, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer client.CloseIdleConnections()
	do := func(path, host, origin string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		if host != "" {
			req.Host = host
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel() // ends an event stream
		res, err := client.Do(req.WithContext(ctx))
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer res.Body.Close()
		return res.StatusCode
	}
	for _, path := range []string{"/ui/", "/ui/events", "/ui/data", "/ui/logs/i-000000000001", "/ui/decisions/" + decID(0), "/ui/assets/page.js", "/"} {
		if got := do(path, "evil.example:80", ""); got != http.StatusForbidden {
			t.Errorf("%s with a foreign Host = %d, want 403", path, got)
		}
		if got := do(path, "", "http://evil.example"); got != http.StatusForbidden {
			t.Errorf("%s with a foreign Origin = %d, want 403", path, got)
		}
		want := http.StatusOK
		if path == "/" {
			want = http.StatusFound
		}
		if got := do(path, "", "http://"+strings.TrimPrefix(base, "http://")); got != want {
			t.Errorf("%s from its own origin = %d, want %d", path, got, want)
		}
	}
}

// TestEventsStream: the stream sends every section first, then changes,
// and ends when the admin server shuts down (not after its shutdown
// timeout).
func TestEventsStream(t *testing.T) {
	f := newFixture(t, 3, 4, 2)
	base, stop := serveAdmin(t, f.ui)
	res, err := http.Get(base + "/ui/events")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("/ui/events = %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	events := make(chan string, 64)
	readDone := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if name, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				events <- name
			}
		}
		readDone <- sc.Err()
	}()
	seen := map[string]bool{}
	for len(seen) < len(sections) {
		select {
		case name := <-events:
			seen[name] = true
		case <-time.After(testDeadline):
			t.Fatalf("first events: %v, want every section %v", seen, sections)
		}
	}
	if got := testutil.ToFloat64(f.ui.metrics.streams); got != 1 {
		t.Errorf("nodeld_ui_streams = %v with one stream open", got)
	}
	// Nothing changes (the fixture's clock stands still): the node
	// section comes again all the same, at least every MaxQuiet.
	quiet := time.After(testDeadline)
	for got := ""; got != "node"; {
		select {
		case got = <-events:
		case <-quiet:
			t.Fatal("no node event on a quiet stream")
		}
	}
	// A new request shows in the activity section.
	f.activity.Add(f.activity.Recent(1)[0])
	deadline := time.After(testDeadline)
	for got := ""; got != "activity"; {
		select {
		case got = <-events:
		case <-deadline:
			t.Fatal("no activity event after a new request")
		}
	}
	if took := stop(); took > 2*time.Second {
		t.Errorf("admin shutdown took %s with a stream open", took)
	}
	select {
	case err := <-readDone:
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Logf("stream ended with %v", err)
		}
	case <-time.After(testDeadline):
		t.Fatal("the stream did not end at shutdown")
	}
	if got := testutil.ToFloat64(f.ui.metrics.streams); got != 0 {
		t.Errorf("nodeld_ui_streams = %v after the stream ended", got)
	}
}

func TestStreamsAreBounded(t *testing.T) {
	f := newFixture(t, 1, 0, 0)
	f.ui.streams.Store(MaxStreams)
	if w := get(t, f.ui.Handler(), "/ui/events"); w.Code != http.StatusServiceUnavailable {
		t.Errorf("stream %d = %d, want 503", MaxStreams+1, w.Code)
	}
	if got := testutil.ToFloat64(f.ui.metrics.streamsRefused); got != 1 {
		t.Errorf("nodeld_ui_streams_refused_total = %v, want 1", got)
	}
}

func TestNewNeedsItsSources(t *testing.T) {
	if _, err := New(Deps{}); err == nil {
		t.Error("New without Status and Source succeeded")
	}
}
