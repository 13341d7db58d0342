package runner

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap/zaptest"

	"github.com/nodeld/nodeld/internal/runner/runnertest"
)

// testClock is a clock the test moves.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// chat sends a client's chat to the daemon as Ollama's clients do: no
// keep_alive, so the model is loaded for Ollama's default five minutes.
func chat(t *testing.T, base, model string) {
	t.Helper()
	resp, err := http.Post(base+"/api/chat", "application/json",
		strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}],"stream":false}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("chat: HTTP %d", resp.StatusCode)
	}
}

// TestOllamaHealthPinsAgainAfterARestart: the daemon restarts and client
// traffic loads the model again with Ollama's default five-minute
// keep_alive; the next health check sees the expiry in /api/ps and pins
// the model again (keep_alive -1), so it is not unloaded five minutes
// later while the instance reports healthy.
func TestOllamaHealthPinsAgainAfterARestart(t *testing.T) {
	clock := &testClock{t: time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)}
	ollama := runnertest.NewOllama(t, clock.now, "llama3.2:1b")
	m, err := NewManaged(Spec{Kind: KindOllama, Model: "llama3.2:1b", URL: ollama.URL},
		ManagedDeps{Logger: zaptest.NewLogger(t), Now: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := m.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer m.Stop(ctx, 0)
	pinnedNow := func() bool {
		exp, ok := ollama.Loaded()["llama3.2:1b"]
		return ok && exp.Sub(clock.now()) > 100*365*24*time.Hour
	}
	if !pinnedNow() {
		t.Fatalf("not pinned after Start: %v", ollama.Loaded())
	}
	if h, err := m.Health(ctx); h != HealthUp {
		t.Fatalf("Health = %s, %v", h, err)
	}

	ollama.Restart()
	chat(t, ollama.URL, "llama3.2:1b")
	if exp := ollama.Loaded()["llama3.2:1b"]; exp.Sub(clock.now()) != runnertest.OllamaDefaultKeepAlive {
		t.Fatalf("after the client's chat the model expires at %s", exp)
	}
	clock.add(time.Minute)
	if h, err := m.Health(ctx); h != HealthUp {
		t.Errorf("Health after the restart = %s, %v", h, err)
	}
	if !pinnedNow() {
		t.Errorf("the pin was not restored: %v", ollama.Loaded())
	}
	clock.add(10 * time.Minute) // past the five minutes the client's load had
	if h, err := m.Health(ctx); h != HealthUp || !pinnedNow() {
		t.Errorf("Health ten minutes on = %s, %v; loaded %v", h, err, ollama.Loaded())
	}
	want := []runnertest.OllamaLoad{
		{Path: "/api/generate", Model: "llama3.2:1b", KeepAlive: "-1"},
		{Path: "/api/chat", Model: "llama3.2:1b"},
		{Path: "/api/generate", Model: "llama3.2:1b", KeepAlive: "-1"},
	}
	if diff := cmp.Diff(want, ollama.Loads()); diff != "" {
		t.Errorf("loads (-want +got):\n%s", diff)
	}
	// The instance pinned it, so it owns the load: Stop unloads it.
	if err := m.Stop(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, ok := ollama.Loaded()["llama3.2:1b"]; ok {
		t.Error("still loaded after Stop")
	}
}

// TestOllamaStartPinsAModelDueToExpire: a model resident only for a
// client's five minutes is pinned by Start (and so owned, unloaded by
// Stop); one pinned by someone else is left alone.
func TestOllamaStartPinsAModelDueToExpire(t *testing.T) {
	ollama := runnertest.NewOllama(t, nil, "a", "b")
	chat(t, ollama.URL, "a")
	ctx := context.Background()
	ma, err := NewManaged(Spec{Kind: KindOllama, Model: "a", URL: ollama.URL}, ManagedDeps{Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := ma.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if exp := ollama.Loaded()["a:latest"]; time.Until(exp) < 100*365*24*time.Hour {
		t.Errorf("a expires at %s after Start, want pinned", exp)
	}
	if err := ma.Stop(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, ok := ollama.Loaded()["a:latest"]; ok {
		t.Error("a still loaded after Stop: the instance pinned it and owns it")
	}

	resp, err := http.Post(ollama.URL+"/api/generate", "application/json", strings.NewReader(`{"model":"b","keep_alive":-1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	mb, err := NewManaged(Spec{Kind: KindOllama, Model: "b", URL: ollama.URL}, ManagedDeps{Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := mb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := mb.Stop(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, ok := ollama.Loaded()["b:latest"]; !ok {
		t.Error("b, pinned by someone else, was unloaded")
	}
}

// TestOllamaStartKeepsTheServersErrorText: a start refused by Ollama says
// what Ollama said, not only the status.
func TestOllamaStartKeepsTheServersErrorText(t *testing.T) {
	ollama := runnertest.NewOllama(t, nil, "llama3.2:1b")
	m, err := NewManaged(Spec{Kind: KindOllama, Model: "qwen3:0.6b", URL: ollama.URL}, ManagedDeps{Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	err = m.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "HTTP 404: model 'qwen3:0.6b' not found") {
		t.Errorf("Start = %v, want Ollama's error text", err)
	}
}

func TestDecodeOllamaPS(t *testing.T) {
	at := time.Date(2026, 12, 5, 12, 5, 0, 123000000, time.FixedZone("", -8*3600))
	tests := []struct {
		name    string
		give    string
		want    []ollamaLoaded
		wantErr bool
	}{
		{name: "ollama's shape", give: `{"models":[{"name":"llama3.2:1b","model":"llama3.2:1b","size":1,"digest":"ab",` +
			`"details":{"format":"gguf"},"expires_at":"2026-12-05T12:05:00.123-08:00","size_vram":0,"context_length":4096}]}`,
			want: []ollamaLoaded{{Name: "llama3.2:1b", ExpiresAt: at}}},
		{name: "model when no name", give: `{"models":[{"model":"m:latest","expires_at":"2318-03-20T01:00:00Z"}]}`,
			want: []ollamaLoaded{{Name: "m:latest", ExpiresAt: time.Date(2318, 3, 20, 1, 0, 0, 0, time.UTC)}}},
		{name: "odd expiry loses only the expiry", give: `{"models":[{"name":"a","expires_at":17},{"name":"b","expires_at":"soon"},{"name":"c"}]}`,
			want: []ollamaLoaded{{Name: "a"}, {Name: "b"}, {Name: "c"}}},
		{name: "bad name skipped", give: `{"models":[{"name":"bad\nname"},{"name":"ok"}]}`, want: []ollamaLoaded{{Name: "ok"}}},
		{name: "null list", give: `{"models":null}`},
		{name: "empty list", give: `{"models":[]}`},
		{name: "no list", give: `{}`, wantErr: true},
		{name: "not an object", give: `[]`, wantErr: true},
		{name: "entry not an object", give: `{"models":[1]}`, wantErr: true},
		{name: "trailing data", give: `{"models":[]} {}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeOllamaPS([]byte(tt.give))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	long := `{"models":[` + strings.Repeat(`{"name":"m"},`, maxListedModels) + `{"name":"m"}]}`
	if _, err := decodeOllamaPS([]byte(long)); err == nil {
		t.Error("a list longer than the bound decoded")
	}
}

func TestServerErrorText(t *testing.T) {
	tests := []struct{ name, give, want string }{
		{"ollama", `{"error":"model 'x' not found"}`, "model 'x' not found"},
		{"openai", `{"error":{"code":404,"message":"model not found","type":"not_found_error"}}`, "model not found"},
		{"message", `{"message":"busy"}`, "busy"},
		{"plain text", "404 page not found\n", "404 page not found"},
		{"empty", "  \n", ""},
		{"control characters", "a\x00b\x1b[31mc\td\n\ne", "a b [31mc d e"},
		{"invalid utf-8", "a\xffb", "a b"},
		{"json without a message", `{"error":{}}`, `{"error":{}}`},
		{"cut on a rune", strings.Repeat("é", 200), strings.Repeat("é", (maxServerErrorTextBytes-3)/2) + "..."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := serverErrorText([]byte(tt.give)); got != tt.want {
				t.Errorf("serverErrorText = %q, want %q", got, tt.want)
			}
		})
	}
}

func FuzzDecodeOllamaPS(f *testing.F) {
	f.Add([]byte(`{"models":[{"name":"llama3.2:1b","model":"llama3.2:1b","expires_at":"2026-12-05T12:05:00.123-08:00"}]}`))
	f.Add([]byte(`{"models":[{"model":"m","expires_at":17}]}`))
	f.Add([]byte(`{"models":null}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := decodeOllamaPS(body)
		if err != nil && got != nil {
			t.Fatal("entries with an error")
		}
		if len(got) > maxListedModels {
			t.Fatalf("%d entries", len(got))
		}
		for _, e := range got {
			if !validModelName(e.Name) {
				t.Fatalf("invalid name %q kept", e.Name)
			}
		}
	})
}

func FuzzServerErrorText(f *testing.F) {
	f.Add([]byte(`{"error":"model 'x' not found"}`))
	f.Add([]byte(`{"error":{"message":"m"}}`))
	f.Add([]byte("a\x00\xff\tb"))
	f.Fuzz(func(t *testing.T, body []byte) {
		s := serverErrorText(body)
		if len(s) > maxServerErrorTextBytes {
			t.Fatalf("%d bytes", len(s))
		}
		if !utf8Printable(s) {
			t.Fatalf("not printable on one line: %q", s)
		}
	})
}

// utf8Printable reports whether s is valid UTF-8 of printable runes only.
func utf8Printable(s string) bool {
	for _, r := range s {
		if r == '\uFFFD' || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
