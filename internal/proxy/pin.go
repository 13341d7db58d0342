package proxy

import (
	"bytes"
	"net/http"

	"github.com/nodeld/nodeld/internal/modelpin"
	"github.com/nodeld/nodeld/internal/table"
)

// pinnedPath reports whether path is an inference path, OpenAI's or
// Ollama's, whose JSON body names the model to run.
func pinnedPath(path string) bool {
	switch path {
	case "/v1/chat/completions", "/v1/completions", "/v1/embeddings",
		"/api/generate", "/api/chat", "/api/embed", "/api/embeddings":
		return true
	}
	return false
}

// pinsModel reports whether a request to a local instance gets its body's
// "model" pinned, as the serving side of the mesh pins a peer's: a POST to
// an inference path, on a role without model_passthrough, to an instance
// whose model is known (or an mlx-lm, always pinned to its default model).
// With the model unknown the client's name is kept: a local instance may
// need one, and the table has none to give.
func pinsModel(r *http.Request, target table.Target, passthrough bool) bool {
	return !passthrough && r.Method == http.MethodPost && pinnedPath(r.URL.Path) &&
		(target.Model != "" || target.Runtime == modelpin.MLXRuntime)
}

// pinLocal returns body pinned to target's model by modelpin.Pin, the rule of
// the mesh's serving side, so that an application gets the same answer
// wherever the role is served: body itself when it names that model
// already (no copy), and body itself when it is not one JSON object (the
// instance answers it as it always did; a peer refuses it).
func pinLocal(body []byte, target table.Target) []byte {
	model := target.Model
	if target.Runtime == modelpin.MLXRuntime {
		model = mlxDefaultModel
	}
	if pinnedAlready(body, model) {
		return body
	}
	pinned, err := modelpin.Pin(body, target.Model, target.Runtime)
	if err != nil {
		return body
	}
	return pinned
}

// mlxDefaultModel is the model every request to an mlx-lm is pinned to
// (modelpin.Pin's rule).
const mlxDefaultModel = "default_model"

// pinnedAlready reports, in one pass and without allocating, that modelpin.Pin
// would return body as is because it is one JSON object whose every
// top-level "model" member (in any case; there is at least one) is the
// JSON string model. It is the common case on a role port, checked before
// modelpin.Pin decodes the body. It answers false whenever it is not sure (a
// key with an escape, a model name JSON would escape, anything it does not
// parse), and modelpin.Pin decides; an invalid body it reads as pinned goes as
// sent, as modelpin.Pin sends it too.
func pinnedAlready(body []byte, model string) bool {
	if !plainModel(model) {
		return false
	}
	i := skipSpace(body, 0)
	if i == len(body) || body[i] != '{' {
		return false
	}
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return false // no member: modelpin.Pin adds one
	}
	found := false
	for {
		if i == len(body) || body[i] != '"' {
			return false
		}
		ke := skipString(body, i)
		if ke < 0 {
			return false
		}
		key := body[i+1 : ke-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			return false
		}
		i = skipSpace(body, ke)
		if i == len(body) || body[i] != ':' {
			return false
		}
		vs := skipSpace(body, i+1)
		ve := skipValue(body, vs)
		if ve < 0 {
			return false
		}
		if len(key) == 5 && bytes.EqualFold(key, []byte("model")) {
			v := body[vs:ve]
			if len(v) != len(model)+2 || v[0] != '"' || string(v[1:len(v)-1]) != model {
				return false
			}
			found = true
		}
		i = skipSpace(body, ve)
		if i == len(body) {
			return false
		}
		switch body[i] {
		case ',':
			i = skipSpace(body, i+1)
		case '}':
			return found && skipSpace(body, i+1) == len(body)
		default:
			return false
		}
	}
}

// plainModel reports whether json.Marshal writes model as its bytes in
// quotes: printable ASCII without '"', '\\', '<', '>' and '&'.
func plainModel(model string) bool {
	if model == "" {
		return false
	}
	for i := 0; i < len(model); i++ {
		switch c := model[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the JSON string starting at
// b[i] == '"', or -1 when it does not end.
func skipString(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// skipValue returns the index just past the JSON value starting at b[i]
// (a string, an object or array by its brackets, or a number or literal
// up to its delimiter), or -1 when it does not end.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end := skipString(b, j)
				if end < 0 {
					return -1
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	default:
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' &&
			b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
			j++
		}
		if j == i {
			return -1
		}
		return j
	}
}
