package runnertest

import (
	"encoding/json"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// OllamaDefaultKeepAlive is how long a model loaded without keep_alive
// stays, as in Ollama (OLLAMA_KEEP_ALIVE unset).
const OllamaDefaultKeepAlive = 5 * time.Minute

// Ollama is a fake Ollama daemon on 127.0.0.1 answering the API nodeld
// drives with Ollama's shapes: GET /api/ps (the loaded models, each with
// its expires_at), POST /api/generate and /api/chat (load a model for
// keep_alive: absent OllamaDefaultKeepAlive, a number of seconds or a
// duration string, negative until told otherwise, 0 unload), GET
// /api/tags and /api/version. A model that is not pulled is refused 404
// {"error":"model '<name>' not found"}. Kill and Revive take the daemon
// down (connections refused, every model unloaded) and bring it back on
// the same port.
type Ollama struct {
	// URL is the base URL, http://127.0.0.1:<port>.
	URL string
	// Addr is 127.0.0.1:<port>.
	Addr string

	tb  testing.TB
	now func() time.Time

	// mu guards the fields below.
	mu     sync.Mutex
	srv    *httptest.Server
	pulled []string
	loaded map[string]time.Time // name -> expires_at
	loads  []OllamaLoad
}

// OllamaLoad is one load or unload request the daemon received.
type OllamaLoad struct {
	// Path is /api/generate or /api/chat.
	Path string
	// Model is the model named, with its tag.
	Model string
	// KeepAlive is the keep_alive sent, raw JSON ("" when absent).
	KeepAlive string
}

// NewOllama starts a fake Ollama on 127.0.0.1:0 with models pulled (no
// tag means ":latest"); now is its clock (nil: time.Now).
func NewOllama(tb testing.TB, now func() time.Time, pulled ...string) *Ollama {
	tb.Helper()
	if now == nil {
		now = time.Now
	}
	o := &Ollama{tb: tb, now: now, loaded: map[string]time.Time{}}
	for _, m := range pulled {
		o.pulled = append(o.pulled, withTag(m))
	}
	o.listen("127.0.0.1:0")
	tb.Cleanup(o.Kill)
	return o
}

func (o *Ollama) listen(addr string) {
	o.tb.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		o.tb.Fatalf("runnertest: ollama listen on %s: %v", addr, err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(o.serve))
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	o.mu.Lock()
	o.srv = srv
	o.mu.Unlock()
	o.URL, o.Addr = srv.URL, l.Addr().String()
}

// Kill takes the daemon down as kill -9 does: connections are refused and
// every loaded model is gone. It may be called more than once.
func (o *Ollama) Kill() {
	o.mu.Lock()
	srv := o.srv
	o.srv = nil
	o.loaded = map[string]time.Time{}
	o.mu.Unlock()
	if srv != nil {
		srv.CloseClientConnections()
		srv.Close()
	}
}

// Revive starts the daemon again on its port, with nothing loaded.
func (o *Ollama) Revive() {
	o.tb.Helper()
	o.listen(o.Addr)
}

// Restart is Kill then Revive: the daemon restarted, its models unloaded.
func (o *Ollama) Restart() {
	o.tb.Helper()
	o.Kill()
	o.Revive()
}

// Loaded returns the loaded models and when each expires.
func (o *Ollama) Loaded() map[string]time.Time {
	o.expire()
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[string]time.Time, len(o.loaded))
	for k, v := range o.loaded {
		out[k] = v
	}
	return out
}

// Loads returns the load and unload requests received so far.
func (o *Ollama) Loads() []OllamaLoad {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.loads)
}

// expire unloads the models whose keep_alive ran out, as Ollama does.
func (o *Ollama) expire() {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.now()
	for m, exp := range o.loaded {
		if !exp.After(now) {
			delete(o.loaded, m)
		}
	}
}

// withTag adds ":latest" to a model name without a tag, as Ollama does.
func withTag(m string) string {
	if strings.Contains(m, ":") {
		return m
	}
	return m + ":latest"
}

// keepAlive decodes a keep_alive as Ollama does: absent the default, a
// number of seconds, or a duration string; negative is forever
// (forever true), 0 unloads.
func keepAlive(raw json.RawMessage) (d time.Duration, forever bool, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return OllamaDefaultKeepAlive, false, nil
	}
	var n float64
	if err := json.Unmarshal(raw, &n); err == nil {
		d = time.Duration(n * float64(time.Second))
	} else {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, false, err
		}
		if secs, err := strconv.ParseFloat(s, 64); err == nil {
			d = time.Duration(secs * float64(time.Second))
		} else if d, err = time.ParseDuration(s); err != nil {
			return 0, false, err
		}
	}
	return d, d < 0, nil
}

func (o *Ollama) serve(w http.ResponseWriter, r *http.Request) {
	o.expire()
	switch r.Method + " " + r.URL.Path {
	case "GET /api/version":
		writeJSON(w, http.StatusOK, map[string]string{"version": "0.17.4"})
	case "GET /api/tags":
		o.mu.Lock()
		models := make([]map[string]any, 0, len(o.pulled))
		for _, m := range o.pulled {
			models = append(models, map[string]any{"name": m, "model": m, "size": 1 << 30, "digest": "0123abcd"})
		}
		o.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"models": models})
	case "GET /api/ps":
		o.mu.Lock()
		names := make([]string, 0, len(o.loaded))
		for m := range o.loaded {
			names = append(names, m)
		}
		slices.Sort(names)
		models := make([]map[string]any, 0, len(names))
		for _, m := range names {
			models = append(models, map[string]any{
				"name": m, "model": m, "size": 1 << 30, "digest": "0123abcd",
				"details":    map[string]any{"format": "gguf", "family": "llama", "parameter_size": "1.2B", "quantization_level": "Q8_0"},
				"expires_at": o.loaded[m].Format(time.RFC3339Nano), "size_vram": 0, "context_length": 4096,
			})
		}
		o.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"models": models})
	case "POST /api/generate", "POST /api/chat":
		o.load(w, r)
	default:
		http.NotFound(w, r)
	}
}

// load serves /api/generate and /api/chat: the model is loaded (or
// unloaded) for its keep_alive, and an empty answer is sent.
func (o *Ollama) load(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model     string          `json:"model"`
		KeepAlive json.RawMessage `json:"keep_alive"`
		Stream    *bool           `json:"stream"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid request: " + err.Error()})
		return
	}
	model := withTag(req.Model)
	d, forever, err := keepAlive(req.KeepAlive)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid keep_alive: " + err.Error()})
		return
	}
	o.mu.Lock()
	o.loads = append(o.loads, OllamaLoad{Path: r.URL.Path, Model: model, KeepAlive: string(req.KeepAlive)})
	if !slices.Contains(o.pulled, model) {
		o.mu.Unlock()
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "model '" + req.Model + "' not found"})
		return
	}
	reason := "load"
	switch {
	case d == 0 && !forever:
		delete(o.loaded, model)
		reason = "unload"
	case forever:
		// Ollama adds the largest duration to now: about 292 years ahead.
		o.loaded[model] = o.now().Add(time.Duration(math.MaxInt64))
	default:
		o.loaded[model] = o.now().Add(d)
	}
	o.mu.Unlock()
	answer := map[string]any{"model": model, "created_at": o.now().Format(time.RFC3339Nano), "done": true, "done_reason": reason}
	if r.URL.Path == "/api/chat" {
		answer["message"] = map[string]string{"role": "assistant", "content": ""}
	} else {
		answer["response"] = ""
	}
	if req.Stream == nil || *req.Stream {
		w.Header().Set("Content-Type", "application/x-ndjson")
		b, _ := json.Marshal(answer)
		_, _ = w.Write(append(b, '\n'))
		return
	}
	writeJSON(w, http.StatusOK, answer)
}
