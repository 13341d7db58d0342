package meshproxy

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/nodeld/nodeld/internal/mesh/meshtest"
	"github.com/nodeld/nodeld/internal/proxy"
)

// sawRequest is what a bodyUpstream received of one request.
type sawRequest struct {
	contentLength int64
	chunked       bool
	body          []byte
	readErr       error // reading the body to its end failed: the request never came whole
}

// bodyUpstream is a model server that reads each request body as it
// arrives: it closes progress once every request has sent it at least
// progressAt bytes, records what it got, and answers a small JSON.
type bodyUpstream struct {
	url        string
	progressAt int64
	progress   chan struct{}

	mu   sync.Mutex // guards seen, once
	seen []sawRequest
	once bool
}

func newBodyUpstream(t *testing.T, progressAt int64) *bodyUpstream {
	t.Helper()
	u := &bodyUpstream{progressAt: progressAt, progress: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var buf bytes.Buffer
		_, err := io.CopyN(&buf, r.Body, u.progressAt)
		if err == nil {
			u.mu.Lock()
			if !u.once {
				u.once = true
				close(u.progress)
			}
			u.mu.Unlock()
			_, err = buf.ReadFrom(r.Body)
		}
		u.mu.Lock()
		u.seen = append(u.seen, sawRequest{contentLength: r.ContentLength, chunked: len(r.TransferEncoding) > 0,
			body: buf.Bytes(), readErr: err})
		u.mu.Unlock()
		if err != nil && err != io.EOF {
			http.Error(w, "reading body", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(srv.Close)
	u.url = srv.URL
	return u
}

func (u *bodyUpstream) requests() []sawRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]sawRequest(nil), u.seen...)
}

// streamPair starts consumer a and serving node b (serving "chat" from
// upURL with model served-model), both forwarders with mesh body limit
// limit (the consumer's proxy too), and waits until a resolves chat to b.
func streamPair(t *testing.T, upURL string, aLimit, bLimit int64) (a, b *meshNode) {
	t.Helper()
	nodes := newMeshNodes(t, "a", "b")
	a, b = nodes[0], nodes[1]
	b.serve(upURL, "served-model", a)
	a.Table.AllowRemoteNode("chat", b.ID(), true)
	a.proxyCfg = proxy.Config{MeshMaxBodyBytes: aLimit}
	a.start(Deps{MaxBodyBytes: aLimit}, b)
	b.start(Deps{MaxBodyBytes: bLimit})
	b.admitLater(a)
	a.resolvesTo(b)
	return a, b
}

// chatOfSize is a chat body of exactly size bytes whose "model" member
// comes last, after one long message, as OpenAI's Python client orders
// them.
func chatOfSize(size int, model string) string {
	prefix, suffix := `{"messages":[{"role":"user","content":"`, `"}],"model":"`+model+`"}`
	return prefix + strings.Repeat("x", size-len(prefix)-len(suffix)) + suffix
}

// A body far over MeshBufferedBodyBytes crosses the mesh as the client
// sends it: the instance has its first half before the client sent its
// second, with its model pinned (the model member comes last) and its
// length announced, while neither node holds more than a small buffer
// of it, with the mesh body limit far above its size.
func TestMeshStreamsLargeBodies(t *testing.T) {
	const size = 2 << 20
	up := newBodyUpstream(t, size/4)
	a, b := streamPair(t, up.url, 64<<20, 64<<20)
	body := chatOfSize(size, "client-pick")

	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, a.h.url("chat")+"/v1/chat/completions", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/json")
	type result struct {
		res  *http.Response
		body []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		res, err := a.h.client.Do(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		done <- result{res, b, err}
	}()
	if _, err := io.WriteString(pw, body[:size/2]); err != nil {
		t.Fatal(err)
	}
	wait(t, up.progress, "the instance to receive a quarter of the body before the client sent its second half")
	if _, err := io.WriteString(pw, body[size/2:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	r := wait(t, done, "the response")
	if r.err != nil || r.res.StatusCode != http.StatusOK || string(r.body) != `{"ok":true}` {
		t.Fatalf("response: %v %v %s", r.err, r.res, r.body)
	}
	// The instance's Content-Length came back with its answer.
	if r.res.ContentLength != int64(len(`{"ok":true}`)) || len(r.res.TransferEncoding) != 0 {
		t.Errorf("response length %d, transfer encoding %v; want the instance's Content-Length", r.res.ContentLength, r.res.TransferEncoding)
	}

	seen := up.requests()
	if len(seen) != 1 || seen[0].readErr != nil {
		t.Fatalf("instance saw %d requests: %+v", len(seen), seen)
	}
	got := seen[0]
	want := strings.Replace(body, `"model":"client-pick"`, `"model":"served-model"`, 1)
	if got.chunked || got.contentLength != int64(len(got.body)) || got.contentLength < int64(len(want)) {
		t.Errorf("instance got chunked=%v, Content-Length %d, %d bytes; want a Content-Length and the body", got.chunked, got.contentLength, len(got.body))
	}
	if string(bytes.TrimRight(got.body, " ")) != want {
		t.Errorf("instance got a body of %d bytes ending %q, want %d bytes ending %q", len(got.body), tail(got.body), len(want), tail([]byte(want)))
	}
	const bound = 256 << 10
	for _, n := range []*meshNode{a, b} {
		if peak := n.fwd.peakHeld.Load(); peak > bound || peak == 0 {
			t.Errorf("%s held at most %d body bytes for a %d-byte body; want a buffer of at most %d", n.Name, peak, size, bound)
		}
		if held := n.fwd.held.Load(); held != 0 {
			t.Errorf("%s still holds %d body bytes", n.Name, held)
		}
	}
}

func tail(b []byte) string { return string(b[max(0, len(b)-40):]) }

// Streamed bodies are pinned as held ones are, whatever the client sent
// and however it sent it; small bodies of unknown length are still held
// (the instance gets a Content-Length), large ones stream chunked.
func TestMeshStreamedBodiesArePinned(t *testing.T) {
	const size = 256 << 10
	up := newBodyUpstream(t, 1)
	a, _ := streamPair(t, up.url, 16<<20, 16<<20)
	long := strings.Repeat("y", size)
	tests := []struct {
		name        string
		body        string
		chunked     bool // sent with no Content-Length
		wantChunked bool // reaches the instance chunked
		wantModels  []string
	}{
		{"model missing", `{"input":"` + long + `"}`, false, false, []string{`"served-model"`}},
		{"duplicates", `{"Model":1,"input":"` + long + `","model":"x","MODEL":"y"}`, false, false, []string{`"served-model"`}},
		{"chunked upload", `{"input":"` + long + `","model":"x"}`, true, true, []string{`"served-model"`}},
		{"small chunked upload", `{"input":"hi","model":"x"}`, true, false, []string{`"served-model"`}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rd io.Reader = strings.NewReader(tt.body)
			if tt.chunked {
				rd = io.MultiReader(rd) // hides the length from net/http
			}
			req, err := http.NewRequest(http.MethodPost, a.h.url("chat")+"/v1/embeddings", rd)
			if err != nil {
				t.Fatal(err)
			}
			res, out := a.h.do(req)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", res.StatusCode, out)
			}
			seen := up.requests()
			if len(seen) != i+1 {
				t.Fatalf("instance saw %d requests, want %d", len(seen), i+1)
			}
			got := seen[i]
			if got.readErr != io.EOF && got.readErr != nil || got.chunked != tt.wantChunked {
				t.Fatalf("instance: read error %v, chunked %v; want chunked %v", got.readErr, got.chunked, tt.wantChunked)
			}
			rest, models := membersBut(t, got.body)
			wantRest, _ := membersBut(t, []byte(tt.body))
			if diff := cmpStrings(wantRest, rest); diff != "" {
				t.Errorf("other members differ: %s", diff)
			}
			if strings.Join(models, ",") != strings.Join(tt.wantModels, ",") {
				t.Errorf("model members %q, want %q", models, tt.wantModels)
			}
		})
	}
}

func cmpStrings(want, got map[string]string) string {
	wb, _ := json.Marshal(want)
	gb, _ := json.Marshal(got)
	if string(wb) == string(gb) {
		return ""
	}
	return string(wb[:min(len(wb), 80)]) + " != " + string(gb[:min(len(gb), 80)])
}

// A streamed body that turns out not to be JSON, or longer than a limit,
// is refused; the instance never gets a whole request.
func TestMeshStreamedBodyRefusals(t *testing.T) {
	up := newBodyUpstream(t, 1)
	const consumerLimit, servingLimit = 1 << 20, 512 << 10
	a, _ := streamPair(t, up.url, consumerLimit, servingLimit)
	tests := []struct {
		name       string
		body       string
		chunked    bool
		wantStatus int
		wantCode   string
	}{
		{"not JSON past the buffered part", `{"input":"` + strings.Repeat("z", 200<<10) + `" "model":"x"}`, false, http.StatusBadRequest, CodePeerBadRequest},
		{"chunked, over the serving node's limit", `{"input":"` + strings.Repeat("z", 600<<10) + `"}`, true, http.StatusRequestEntityTooLarge, proxy.CodeBodyTooLarge},
		{"chunked, over the consumer's limit", `{"input":"` + strings.Repeat("z", 2<<20) + `"}`, true, http.StatusRequestEntityTooLarge, proxy.CodeBodyTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rd io.Reader = strings.NewReader(tt.body)
			if tt.chunked {
				rd = io.MultiReader(rd)
			}
			req, err := http.NewRequest(http.MethodPost, a.h.url("chat")+"/v1/embeddings", rd)
			if err != nil {
				t.Fatal(err)
			}
			res, out := a.h.do(req)
			if res.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tt.wantStatus, out)
			}
			if got := apiError(t, res, out); got.Code != tt.wantCode {
				t.Errorf("code %q, want %q", got.Code, tt.wantCode)
			}
		})
	}
	for _, r := range up.requests() {
		if r.readErr == nil || r.readErr == io.EOF {
			t.Errorf("the instance got a whole request of %d bytes", len(r.body))
		}
	}
}

// An instance that answers before it read a streamed body (an early
// error, say) is heard: its answer reaches the client, and neither node
// waits for the rest of the body.
func TestMeshStreamedBodyAnsweredEarly(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		_, _ = io.WriteString(w, `{"error":"too long for me"}`)
	}))
	t.Cleanup(srv.Close)
	a, b := streamPair(t, srv.URL, 16<<20, 16<<20)
	res, out := a.h.post("chat", "/v1/chat/completions", chatOfSize(4<<20, "m"))
	if res.StatusCode != http.StatusRequestEntityTooLarge || string(out) != `{"error":"too long for me"}` {
		t.Fatalf("got %d %s, want the instance's early answer", res.StatusCode, out)
	}
	for _, n := range []*meshNode{a, b} {
		meshtest.WaitFor(t, n.Name+" holding no body", func() bool { return n.fwd.held.Load() == 0 })
	}
}

// membersBut decodes the object b into its non-model members (the last
// of duplicate keys wins, as encoding/json decides) and the values of its
// model members, in order, duplicates included.
func membersBut(t *testing.T, b []byte) (map[string]string, []string) {
	t.Helper()
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		t.Fatalf("%q: not an object: %v", b, err)
	}
	rest := map[string]string{}
	for k, v := range keys {
		if !(len(k) == 5 && strings.EqualFold(k, "model")) {
			rest[k] = string(v)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil { // '{'
		t.Fatal(err)
	}
	var models []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		if k := tok.(string); len(k) == 5 && strings.EqualFold(k, "model") {
			models = append(models, string(v))
		}
	}
	return rest, models
}
