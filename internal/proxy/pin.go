package proxy

import (
	"net/http"

	"github.com/nodeld/nodeld/internal/table"
)

// pinnedPaths are the inference paths, OpenAI's and Ollama's, whose JSON
// body names the model to run.
var pinnedPaths = map[string]bool{
	"/v1/chat/completions": true,
	"/v1/completions":      true,
	"/v1/embeddings":       true,
	"/api/generate":        true,
	"/api/chat":            true,
	"/api/embed":           true,
	"/api/embeddings":      true,
}

// pinsModel reports whether a request to a local instance gets its body's
// "model" pinned, as the serving side of the mesh pins a peer's: a POST to
// an inference path, on a role without model_passthrough, to an instance
// whose model is known (or an mlx-lm, always pinned to its default model).
// With the model unknown the client's name is kept: a local instance may
// need one, and the table has none to give.
func pinsModel(r *http.Request, target table.Target, passthrough bool) bool {
	return !passthrough && r.Method == http.MethodPost && pinnedPaths[r.URL.Path] &&
		(target.Model != "" || target.Runtime == mlxRuntime)
}

// pinLocal returns body pinned to target's model by pinModel, the rule of
// the mesh's serving side, so that an application gets the same answer
// wherever the role is served: body itself when it names that model
// already (no copy), and body itself when it is not one JSON object (the
// instance answers it as it always did; a peer refuses it).
func pinLocal(body []byte, target table.Target) []byte {
	pinned, err := pinModel(body, table.MeshLocal{Model: target.Model, Runtime: target.Runtime})
	if err != nil {
		return body
	}
	return pinned
}
