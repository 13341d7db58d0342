package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nodeld/nodeld/internal/activity"
	"github.com/nodeld/nodeld/internal/table"
	"github.com/nodeld/nodeld/internal/usage"
)

func TestPerfRecorder(t *testing.T) {
	var pr perfRecorder
	if _, ok := pr.stats(instanceID{base: "a"}, 1); ok {
		t.Fatal("stats with no samples")
	}
	for i := range 5 {
		pr.record(instanceID{base: "a"}, time.Duration(i+1)*time.Millisecond, float64(10*(i+1)))
	}
	pr.record(instanceID{base: "a"}, 3*time.Millisecond, 0) // no token count
	got, ok := pr.stats(instanceID{base: "a"}, 5)
	want := RolePerf{TTFB: 3 * time.Millisecond, TTFBSamples: 6, TokensPerSecond: 30, TokensSamples: 5}
	if !ok || got != want {
		t.Errorf("stats = %+v, %v; want %+v", got, ok, want)
	}
	// Below the minimum: counts without a median.
	got, _ = pr.stats(instanceID{base: "a"}, 6)
	if want := (RolePerf{TTFB: 3 * time.Millisecond, TTFBSamples: 6, TokensSamples: 5}); got != want {
		t.Errorf("stats(min 6) = %+v, want %+v", got, want)
	}
	if _, ok := pr.stats(instanceID{base: "b"}, 1); ok {
		t.Error("samples of instance a reported for instance b")
	}
	// Another instance starts afresh.
	pr.record(instanceID{base: "b"}, time.Second, 0)
	if got, _ := pr.stats(instanceID{base: "b"}, 1); got.TTFBSamples != 1 || got.TTFB != time.Second || got.TokensSamples != 0 {
		t.Errorf("after the instance changed: %+v", got)
	}
}

// perfUpstream answers completions with a usage report, streamed when
// asked; "fail" in the body gets a 500. A stream's first event is sent
// alone; the rest waits for a receive on release (the client has read the
// first event, so the proxy has forwarded it), then 15ms of generation:
// however late a loaded machine lets the proxy read the first event, the
// generation window it measures is at least 15ms.
func perfUpstream(t *testing.T, tokens int, release <-chan struct{}) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body bytes.Buffer
		_, _ = body.ReadFrom(r.Body)
		usage := fmt.Sprintf(`"usage":{"prompt_tokens":3,"completion_tokens":%d,"total_tokens":%d}`, tokens, tokens+3)
		switch {
		case r.URL.Path == "/v1/models":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"object":"list","data":[]}`))
		case strings.Contains(body.String(), "fail"):
			http.Error(w, "boom", http.StatusInternalServerError)
		case strings.Contains(body.String(), `"stream":true`):
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n"))
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
			time.Sleep(15 * time.Millisecond) // generation time between first and last byte
			_, _ = w.Write([]byte("data: {\"choices\":[]," + usage + "}\n\ndata: [DONE]\n\n"))
		default:
			time.Sleep(15 * time.Millisecond) // generation time before the first byte
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"choices":[{"message":{"content":"a"}}],` + usage + `}`))
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestLocalPerf(t *testing.T) {
	h := startProxy(t, Config{Roles: []RoleConfig{{Name: "chat", Listen: "127.0.0.1:0"}, {Name: "embed", Listen: "127.0.0.1:0"}}}, Deps{})
	release := make(chan struct{})
	up := perfUpstream(t, 64, release)
	h.resolver.set("chat", table.Target{Kind: table.TargetLocal, Base: up.URL, Model: "m"})
	if got := h.p.LocalPerf(1); len(got) != 0 {
		t.Fatalf("LocalPerf before any request = %+v", got)
	}
	for i := range 4 {
		if code := postStream(t, h, release); code != 200 {
			t.Fatalf("stream %d: %d", i, code)
		}
		if res, _ := h.post("chat", "/v1/completions", `{"model":"m"}`); res.StatusCode != 200 {
			t.Fatalf("one-shot %d: %d", i, res.StatusCode)
		}
	}
	// Not measured: reads, failures, and requests without usage.
	h.get("chat", "/v1/models")
	h.post("chat", "/v1/chat/completions", `{"model":"m","fail":1}`)
	if res, _ := h.post("chat", "/v1/embeddings", `{"model":"m","input":"x"}`); res.StatusCode != 200 {
		t.Fatalf("embeddings: %d", res.StatusCode)
	}

	got := h.p.LocalPerf(4)
	if len(got) != 1 || got[0].Role != "chat" {
		t.Fatalf("LocalPerf = %+v, want chat only", got)
	}
	rp := got[0]
	// Embeddings count for time to first byte; their usage is not read.
	if rp.TTFBSamples != 9 || rp.TokensSamples != 8 {
		t.Errorf("samples: ttfb %d tokens %d, want 9 and 8", rp.TTFBSamples, rp.TokensSamples)
	}
	if rp.TTFB <= 0 || rp.TTFB > testDeadline {
		t.Errorf("median TTFB %s", rp.TTFB)
	}
	// 64 tokens in at least 15ms: at most about 4267 tokens per second.
	if rp.TokensPerSecond <= 0 || rp.TokensPerSecond > 64/0.015+1 {
		t.Errorf("median tokens per second %v", rp.TokensPerSecond)
	}
	if got := h.p.LocalPerf(10); got[0].TTFB != 0 || got[0].TokensPerSecond != 0 || got[0].TTFBSamples != 9 {
		t.Errorf("below the minimum: %+v", got[0])
	}

	// A role now served by a peer has no local performance; a new local
	// instance starts afresh.
	h.resolver.set("chat", table.Target{Kind: table.TargetRemote, NodeID: "n-1"})
	if got := h.p.LocalPerf(1); len(got) != 0 {
		t.Errorf("LocalPerf for a remote role = %+v", got)
	}
	h.resolver.set("chat", table.Target{Kind: table.TargetLocal, Base: up.URL, Model: "other"})
	if got := h.p.LocalPerf(1); len(got) != 0 {
		t.Errorf("LocalPerf of a new instance before its first request = %+v", got)
	}
	h.post("chat", "/v1/completions", `{"model":"other"}`)
	got = h.p.LocalPerf(1)
	if diff := cmp.Diff([]string{"chat"}, roles(got)); diff != "" || got[0].TTFBSamples != 1 {
		t.Errorf("after the new instance's first request: %+v", got)
	}
}

// postStream posts a streamed chat completion to the chat role, reads its
// first event, lets the upstream go on (release), and reads the rest.
func postStream(t *testing.T, h *harness, release chan<- struct{}) int {
	t.Helper()
	res, err := http.Post(h.url("chat")+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		return res.StatusCode
	}
	br := bufio.NewReader(res.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first event: %q, %v", line, err)
	}
	release <- struct{}{}
	if _, err := io.Copy(io.Discard, br); err != nil {
		t.Fatal(err)
	}
	return res.StatusCode
}

func roles(rps []RolePerf) []string {
	var out []string
	for _, rp := range rps {
		out = append(out, rp.Role)
	}
	return out
}

// BenchmarkAfterForward is the end of a remote forward answered 200 with
// a usage report: its tokens read, and its entry added to the activity
// log.
func BenchmarkAfterForward(b *testing.B) {
	p, err := New(Config{Roles: []RoleConfig{{Name: "chat", Listen: "127.0.0.1:0"}}},
		Deps{Resolver: newResolver(), Activity: activity.New(0, nil)})
	if err != nil {
		b.Fatal(err)
	}
	rs := p.roles["chat"]
	target := table.Target{Kind: table.TargetRemote, NodeID: "n-b"}
	_, answer, _ := bytes.Cut(localPathAnswer, []byte("\r\n\r\n"))
	w := &discardWriter{h: http.Header{"Content-Type": {"application/json"}}}
	start := time.Now()
	for b.Loop() {
		rec := recorder{ResponseWriter: w, start: start, status: http.StatusOK, firstByte: time.Millisecond, tail: usage.GetTail()}
		rec.tail.Keep(answer)
		p.afterForward(rs, target, &rec, start, 2*time.Millisecond, false)
	}
	if got := p.activity.Recent(1); len(got) != 1 || got[0].Tokens != 9 {
		b.Fatalf("activity %+v, want the answer's 9 tokens", got)
	}
}
