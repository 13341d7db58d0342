package proxytest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// maxRecorded bounds the requests an Upstream keeps for inspection.
const maxRecorded = 256

// maxBody bounds a request body the upstream reads.
const maxBody = 64 << 20

// Hooks let a test steer the upstream. Every hook may block; each gets the
// request's context, which is done when the client (the proxy) goes away.
type Hooks struct {
	// OnRequest runs when a request arrives, before its body is read and
	// before any response byte.
	OnRequest func(ctx context.Context, r *http.Request)
	// BeforeChunk runs before streamed chunk i (0-based) is written. If
	// ctx is done when it returns, the stream stops.
	BeforeChunk func(ctx context.Context, i int)
	// AfterChunk runs after streamed chunk i was written and flushed.
	AfterChunk func(ctx context.Context, i int)
}

// Options configure an Upstream.
type Options struct {
	// Model is the model the upstream serves ("test-model" if empty).
	Model string
	// Chunks is the number of content chunks of a streamed completion
	// (3 if 0); the stream then ends with a finish chunk and [DONE].
	Chunks int
	// Hooks steer the upstream.
	Hooks Hooks
	// Header is added to every response head.
	Header http.Header
}

// Request is what the upstream received.
type Request struct {
	Method string
	Path   string
	Query  string
	Host   string
	Header http.Header
	Body   []byte
}

// Upstream is a fake OpenAI-compatible server on 127.0.0.1.
type Upstream struct {
	// URL is the base URL, "http://127.0.0.1:port".
	URL string

	srv   *httptest.Server
	opts  Options
	conns atomic.Int64
	count atomic.Int64

	mu       sync.Mutex // guards requests
	requests []Request
}

// New starts an Upstream that is closed when t's test ends.
func New(t testing.TB, opts Options) *Upstream {
	t.Helper()
	u := NewUnstarted(opts)
	u.Start()
	t.Cleanup(u.Close)
	return u
}

// NewUnstarted builds an Upstream; call Start, and Close when done.
func NewUnstarted(opts Options) *Upstream {
	if opts.Model == "" {
		opts.Model = "test-model"
	}
	if opts.Chunks == 0 {
		opts.Chunks = 3
	}
	u := &Upstream{opts: opts}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(u.serve))
	u.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			u.conns.Add(1)
		}
	}
	return u
}

// Start starts serving.
func (u *Upstream) Start() {
	u.srv.Start()
	u.URL = u.srv.URL
}

// Close stops the upstream, cutting open connections, and waits for its
// handlers.
func (u *Upstream) Close() {
	u.srv.CloseClientConnections()
	u.srv.Close()
}

// Conns returns how many TCP connections the upstream has accepted.
func (u *Upstream) Conns() int { return int(u.conns.Load()) }

// Count returns how many requests the upstream has received.
func (u *Upstream) Count() int { return int(u.count.Load()) }

// Requests returns the first requests received (at most 256).
func (u *Upstream) Requests() []Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]Request(nil), u.requests...)
}

// CountPath returns how many of the first requests received (at most
// 256) were to path.
func (u *Upstream) CountPath(path string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, r := range u.requests {
		if r.Path == path {
			n++
		}
	}
	return n
}

func (u *Upstream) serve(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	u.count.Add(1)
	if h := u.opts.Hooks.OnRequest; h != nil {
		h(ctx, r)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		http.Error(w, "reading body", http.StatusBadRequest)
		return
	}
	u.mu.Lock()
	if len(u.requests) < maxRecorded {
		u.requests = append(u.requests, Request{
			Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Host: r.Host,
			Header: r.Header.Clone(), Body: body,
		})
	}
	u.mu.Unlock()
	for k, vs := range u.opts.Header {
		w.Header()[k] = vs
	}

	switch r.URL.Path {
	case "/v1/chat/completions":
		u.completion(w, r, body, true)
	case "/v1/completions":
		u.completion(w, r, body, false)
	case "/v1/embeddings":
		u.embeddings(w, body)
	case "/v1/models":
		writeJSON(w, map[string]any{"object": "list", "data": []any{
			map[string]any{"id": u.opts.Model, "object": "model", "owned_by": "proxytest"},
		}})
	case "/health":
		writeJSON(w, map[string]any{"status": "ok"})
	case "/api/chat", "/api/generate":
		u.ollamaStream(w, r, body)
	case "/api/version":
		writeJSON(w, map[string]any{"version": "0.0.0-proxytest"})
	case "/api/tags":
		writeJSON(w, map[string]any{"models": []any{map[string]any{"name": u.opts.Model}}})
	default:
		// Echo, so tests can see what was forwarded for other paths.
		writeJSON(w, map[string]any{"method": r.Method, "path": r.URL.Path, "query": r.URL.RawQuery})
	}
}

// completionRequest is the part of a (chat) completion request the
// upstream reads.
type completionRequest struct {
	Model  string `json:"model"`
	Stream bool   `json:"stream"`
}

func (u *Upstream) completion(w http.ResponseWriter, r *http.Request, body []byte, chat bool) {
	var req completionRequest
	if len(body) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"error":{"message":"bad json","type":"invalid_request_error","code":"bad_json"}}`)
			return
		}
	}
	model := u.opts.Model
	if !req.Stream {
		if chat {
			writeJSON(w, map[string]any{
				"id": "chatcmpl-test", "object": "chat.completion", "model": model,
				"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
					"message": map[string]any{"role": "assistant", "content": "hello from " + model}}},
			})
			return
		}
		writeJSON(w, map[string]any{
			"id": "cmpl-test", "object": "text_completion", "model": model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "text": "hello from " + model}},
		})
		return
	}
	ctx := r.Context()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	for i := 0; i < u.opts.Chunks; i++ {
		if h := u.opts.Hooks.BeforeChunk; h != nil {
			h(ctx, i)
		}
		if ctx.Err() != nil {
			return
		}
		if _, err := io.WriteString(w, Chunk(model, i, chat)); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		if h := u.opts.Hooks.AfterChunk; h != nil {
			h(ctx, i)
		}
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
	_ = rc.Flush()
}

// ollamaStream answers an Ollama chat or generate request as Ollama does by
// default: newline-delimited JSON objects, chunked (no Content-Length), one
// per chunk, then a final object with "done": true.
func (u *Upstream) ollamaStream(w http.ResponseWriter, r *http.Request, _ []byte) {
	ctx := r.Context()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	for i := 0; i < u.opts.Chunks; i++ {
		if h := u.opts.Hooks.BeforeChunk; h != nil {
			h(ctx, i)
		}
		if ctx.Err() != nil {
			return
		}
		if _, err := io.WriteString(w, NDJSONChunk(u.opts.Model, i)); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		if h := u.opts.Hooks.AfterChunk; h != nil {
			h(ctx, i)
		}
	}
	_, _ = io.WriteString(w, `{"model":"`+u.opts.Model+`","done":true}`+"\n")
	_ = rc.Flush()
}

// NDJSONChunk returns line i of an Ollama stream, newline included.
func NDJSONChunk(model string, i int) string {
	b, _ := json.Marshal(map[string]any{"model": model, "done": false,
		"message": map[string]any{"role": "assistant", "content": fmt.Sprintf("tok%d ", i)}})
	return string(b) + "\n"
}

// Chunk returns the SSE event for content chunk i, as the upstream writes
// it: "data: {...}\n\n" with content "tok<i> ".
func Chunk(model string, i int, chat bool) string {
	var v any
	if chat {
		v = map[string]any{"id": "chatcmpl-test", "object": "chat.completion.chunk", "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": fmt.Sprintf("tok%d ", i)}}}}
	} else {
		v = map[string]any{"id": "cmpl-test", "object": "text_completion", "model": model,
			"choices": []any{map[string]any{"index": 0, "text": fmt.Sprintf("tok%d ", i)}}}
	}
	b, _ := json.Marshal(v) // maps of strings and ints always marshal
	return "data: " + string(b) + "\n\n"
}

// embeddings answers one 4-dimensional vector per input.
func (u *Upstream) embeddings(w http.ResponseWriter, body []byte) {
	var req struct {
		Input json.RawMessage `json:"input"`
	}
	_ = json.Unmarshal(body, &req)
	n := 1
	if in := strings.TrimSpace(string(req.Input)); strings.HasPrefix(in, "[") {
		var list []json.RawMessage
		if json.Unmarshal(req.Input, &list) == nil {
			n = len(list)
		}
	}
	data := make([]any, n)
	for i := range data {
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": []float64{0.1, 0.2, 0.3, float64(i)}}
	}
	writeJSON(w, map[string]any{"object": "list", "model": u.opts.Model, "data": data})
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
