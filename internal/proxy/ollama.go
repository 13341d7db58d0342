package proxy

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/nodeld/nodeld/internal/table"
)

// ollamaRuntime is the runtime name of an Ollama instance in the table.
const ollamaRuntime = "ollama"

// ollamaRootBody is what Ollama answers on "/": its CLI checks that HEAD /
// succeeds before anything else (ollama list, run, ps).
const ollamaRootBody = "Ollama is running"

// isOllamaPath reports whether path is in Ollama's API, whose clients
// expect Ollama's error shape.
func isOllamaPath(path string) bool { return strings.HasPrefix(path, "/api/") }

// answerOllamaRoot answers GET and HEAD / as Ollama does when target is an
// Ollama (local or on a peer), so that Ollama's own clients work through
// the role port. It reports false, writing nothing, for anything else:
// the request then gets the answer it always had (405 for HEAD, 404 for
// GET).
func answerOllamaRoot(w http.ResponseWriter, r *http.Request, target table.Target) bool {
	if target.Runtime != ollamaRuntime {
		return false
	}
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(ollamaRootBody)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write([]byte(ollamaRootBody)) // the client may be gone; nothing else to do
	}
	return true
}
