package main

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// maxBody bounds a request body.
const maxBody = 8 << 20

// embeddingDims is the length of every embedding vector.
const embeddingDims = 8

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "echo-llm:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("echo-llm", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8080", "loopback address to serve on")
	model := fs.String("model", "echo-1", "model name to report")
	delay := fs.Duration("chunk-delay", 0, "pause between streamed chunks")
	loadDelay := fs.Duration("load-delay", 0, "how long it 'loads its model': /health and /v1 answer 503 until then, the port open at once")
	readyFile := fs.String("ready-file", "", "write the moment it became ready (RFC 3339, nanoseconds) to this file")
	healthFile := fs.String("health-file", "", "write the moment it first answered GET /health 200 (RFC 3339, nanoseconds) to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *loadDelay < 0 {
		return fmt.Errorf("--load-delay %s is negative", *loadDelay)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	s := &server{model: *model, delay: *delay, created: time.Now().Unix(), healthFile: *healthFile}
	srv := &http.Server{Handler: s.routes(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(os.Stderr, "echo-llm: serving %s on http://%s\n", *model, ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	// The model "loads" while the port is already open, as llama-server's
	// does: callers see 503 loading until it is ready.
	load := time.NewTimer(*loadDelay)
	defer load.Stop()
	for loading := true; ; {
		var loaded <-chan time.Time
		if loading {
			loaded = load.C
		}
		select {
		case err := <-errc:
			return err
		case <-loaded:
			loading = false
			// The moment is read before /health turns 200, so it is
			// never later than the first healthy answer.
			at := time.Now()
			s.ready.Store(true)
			fmt.Fprintf(os.Stderr, "echo-llm: ready after %s\n", *loadDelay)
			if *readyFile != "" {
				if err := os.WriteFile(*readyFile, []byte(at.Format(time.RFC3339Nano)), 0o600); err != nil {
					fmt.Fprintln(os.Stderr, "echo-llm: write ready file:", err)
				}
			}
			continue
		case <-ctx.Done():
		}
		break
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

type server struct {
	model   string
	delay   time.Duration
	created int64
	// ready turns true once the load delay has passed.
	ready atomic.Bool
	// healthFile, when set, receives the moment of the first 200 answer
	// to GET /health; healthAnswered turns true with that answer.
	healthFile     string
	healthAnswered atomic.Bool
}

func (s *server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		at := time.Now()
		writeJSON(w, 200, map[string]string{"status": "ok"})
		if s.healthFile != "" && s.healthAnswered.CompareAndSwap(false, true) {
			// Sent first, so the file costs the prober nothing.
			http.NewResponseController(w).Flush()
			if err := os.WriteFile(s.healthFile, []byte(at.Format(time.RFC3339Nano)), 0o600); err != nil {
				fmt.Fprintln(os.Stderr, "echo-llm: write health file:", err)
			}
		}
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, 200, map[string]any{"object": "list", "data": []any{
			map[string]any{"id": s.model, "object": "model", "created": s.created, "owned_by": "echo-llm"},
		}})
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, true) })
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, false) })
	mux.HandleFunc("POST /v1/embeddings", s.embeddings)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.ready.Load() {
			// As llama-server answers while it loads its model.
			if r.URL.Path == "/health" {
				writeJSON(w, 503, map[string]string{"status": "loading"})
			} else {
				writeJSON(w, 503, map[string]any{"error": map[string]any{"message": "Loading model", "type": "unavailable_error", "code": 503}})
			}
			return
		}
		mux.ServeHTTP(w, r)
	})
}

type completionRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Prompt   any    `json:"prompt"`
	Messages []struct {
		Role    string `json:"role"`
		Content any    `json:"content"`
	} `json:"messages"`
}

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		writeError(w, 413, "request body too large or unreadable")
		return false
	}
	if err := json.Unmarshal(body, v); err != nil {
		writeError(w, 400, "invalid JSON body: "+err.Error())
		return false
	}
	return true
}

// text flattens a prompt or message content (a string, or a list of
// strings or {"type":"text","text":...} parts).
func text(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []any:
		var parts []string
		for _, p := range x {
			if m, ok := p.(map[string]any); ok {
				if t, ok := m["text"].(string); ok {
					parts = append(parts, t)
				}
				continue
			}
			parts = append(parts, text(p))
		}
		return strings.Join(parts, " ")
	default:
		return ""
	}
}

func (s *server) complete(w http.ResponseWriter, r *http.Request, chat bool) {
	var req completionRequest
	if !readJSON(w, r, &req) {
		return
	}
	var prompt string
	if chat {
		for i := len(req.Messages) - 1; i >= 0; i-- {
			if req.Messages[i].Role == "user" {
				prompt = text(req.Messages[i].Content)
				break
			}
		}
	} else {
		prompt = text(req.Prompt)
	}
	reply := "echo: " + prompt
	id := fmt.Sprintf("cmpl-%x", sha256.Sum256([]byte(reply)))[:21]
	object, chunkObject := "text_completion", "text_completion"
	if chat {
		object, chunkObject = "chat.completion", "chat.completion.chunk"
	}
	usage := map[string]int{"prompt_tokens": len(strings.Fields(prompt)), "completion_tokens": len(strings.Fields(reply)), "total_tokens": len(strings.Fields(prompt)) + len(strings.Fields(reply))}
	if !req.Stream {
		choice := map[string]any{"index": 0, "finish_reason": "stop"}
		if chat {
			choice["message"] = map[string]any{"role": "assistant", "content": reply}
		} else {
			choice["text"] = reply
		}
		writeJSON(w, 200, map[string]any{"id": id, "object": object, "created": time.Now().Unix(), "model": s.model, "choices": []any{choice}, "usage": usage})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(200)
	flusher, _ := w.(http.Flusher)
	words := strings.SplitAfter(reply, " ")
	send := func(choice map[string]any) bool {
		b, _ := json.Marshal(map[string]any{"id": id, "object": chunkObject, "created": time.Now().Unix(), "model": s.model, "choices": []any{choice}})
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	for i, word := range words {
		if i > 0 && s.delay > 0 {
			select {
			case <-time.After(s.delay):
			case <-r.Context().Done():
				return
			}
		}
		choice := map[string]any{"index": 0, "finish_reason": nil}
		if chat {
			delta := map[string]any{"content": word}
			if i == 0 {
				delta["role"] = "assistant"
			}
			choice["delta"] = delta
		} else {
			choice["text"] = word
		}
		if !send(choice) {
			return
		}
	}
	final := map[string]any{"index": 0, "finish_reason": "stop"}
	if chat {
		final["delta"] = map[string]any{}
	} else {
		final["text"] = ""
	}
	if send(final) {
		fmt.Fprint(w, "data: [DONE]\n\n")
		if flusher != nil {
			flusher.Flush()
		}
	}
}

func (s *server) embeddings(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Input          any    `json:"input"`
		EncodingFormat string `json:"encoding_format"`
	}
	if !readJSON(w, r, &req) {
		return
	}
	var inputs []string
	switch x := req.Input.(type) {
	case string:
		inputs = []string{x}
	case []any:
		for _, v := range x {
			inputs = append(inputs, text(v))
		}
	default:
		writeError(w, 400, "input must be a string or a list of strings")
		return
	}
	data := make([]any, len(inputs))
	for i, in := range inputs {
		sum := sha256.Sum256([]byte(in))
		vec := make([]float32, embeddingDims)
		for j := range vec {
			vec[j] = float32(sum[j])/255*2 - 1
		}
		var emb any = vec
		if req.EncodingFormat == "base64" {
			// As OpenAI does: little-endian float32s, base64-encoded.
			raw := make([]byte, 0, 4*len(vec))
			for _, f := range vec {
				raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(f))
			}
			emb = base64.StdEncoding.EncodeToString(raw)
		}
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": emb}
	}
	writeJSON(w, 200, map[string]any{"object": "list", "data": data, "model": s.model, "usage": map[string]int{"prompt_tokens": len(inputs), "total_tokens": len(inputs)}})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error", "code": nil}})
}
