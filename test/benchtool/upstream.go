package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// maxUpstreamBody bounds a request body the upstream reads.
const maxUpstreamBody = 16 << 20

// chatAnswer is the whole answer to a chat completion that is not
// streamed: small, like a short completion, with its usage report.
const chatAnswer = `{"id":"chatcmpl-bench","object":"chat.completion","created":1,"model":"bench",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help you today?"},"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":12,"completion_tokens":9,"total_tokens":21}}`

// listenLoopback listens on addr for cmd, which serves loopback only.
func listenLoopback(cmd, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if !ln.Addr().(*net.TCPAddr).IP.IsLoopback() {
		_ = ln.Close()
		return nil, fmt.Errorf("%s: %s is not a loopback address", cmd, addr)
	}
	return ln, nil
}

// upstream is a fast OpenAI-compatible server: answers are precomputed,
// request bodies are read but only searched, never decoded.
type upstream struct {
	chunks int
	pace   time.Duration
}

func runUpstream(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("upstream", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "loopback address to serve on")
	chunks := fs.Int("chunks", 200, "content chunks of a streamed completion (a body's \"max_tokens\" overrides it)")
	pace := fs.Duration("pace", time.Millisecond, "pause before each streamed chunk")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ln, err := listenLoopback("upstream", *listen)
	if err != nil {
		return err
	}
	u := &upstream{chunks: *chunks, pace: *pace}
	srv := &http.Server{Handler: u, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute}
	fmt.Fprintln(out, "listening", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	_ = srv.Close()
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

var (
	streamKey = []byte(`"stream"`)
	maxTokens = []byte(`"max_tokens":`)
)

// wantsStream reports whether a request body says "stream": true.
func wantsStream(body []byte) bool {
	i := bytes.Index(body, streamKey)
	if i < 0 {
		return false
	}
	rest := bytes.TrimLeft(body[i+len(streamKey):], " \t\r\n")
	if len(rest) == 0 || rest[0] != ':' {
		return false
	}
	return bytes.HasPrefix(bytes.TrimLeft(rest[1:], " \t\r\n"), []byte("true"))
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxUpstreamBody))
	if err != nil {
		http.Error(w, "reading body", http.StatusBadRequest)
		return
	}
	switch r.URL.Path {
	case "/v1/chat/completions", "/v1/completions":
		if wantsStream(body) {
			u.stream(w, r, body)
			return
		}
		h := w.Header()
		h["Content-Type"] = []string{"application/json"}
		h["Content-Length"] = []string{strconv.Itoa(len(chatAnswer))}
		_, _ = io.WriteString(w, chatAnswer)
	case "/v1/models":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"bench","object":"model","owned_by":"benchtool"}]}`)
	case "/health":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`)
	default:
		http.NotFound(w, r)
	}
}

// stream answers a streamed completion: chunks SSE events, each written
// and flushed on its own after the pace, carrying the wall-clock time it
// was written, then a usage event and [DONE].
func (u *upstream) stream(w http.ResponseWriter, r *http.Request, body []byte) {
	n := u.chunks
	if i := bytes.Index(body, maxTokens); i >= 0 {
		rest := bytes.TrimLeft(body[i+len(maxTokens):], " ")
		end := 0
		for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
			end++
		}
		if v, err := strconv.Atoi(string(rest[:end])); err == nil && v > 0 && v <= 100000 {
			n = v
		}
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	buf := make([]byte, 0, 256)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for i := range n {
		if u.pace > 0 {
			timer.Reset(u.pace)
			select {
			case <-timer.C:
			case <-r.Context().Done():
				return
			}
		}
		buf = append(buf[:0], `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","model":"bench","choices":[{"index":0,"delta":{"content":"tok`...)
		buf = strconv.AppendInt(buf, int64(i), 10)
		buf = append(buf, ` "},"finish_reason":null}],"sent_ns":`...)
		buf = strconv.AppendInt(buf, time.Now().UnixNano(), 10)
		buf = append(buf, "}\n\n"...)
		if _, err := w.Write(buf); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
	buf = append(buf[:0], `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","model":"bench","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":`...)
	buf = strconv.AppendInt(buf, int64(n), 10)
	buf = append(buf, ",\"total_tokens\":"...)
	buf = strconv.AppendInt(buf, int64(n+12), 10)
	buf = append(buf, "}}\n\ndata: [DONE]\n\n"...)
	_, _ = w.Write(buf)
}
