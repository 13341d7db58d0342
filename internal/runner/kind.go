package runner

import "github.com/nodeld/nodeld/internal/grammar"

// Kind names a model-server runtime. The strings are the ones operators write
// in inference.instances[].runtime and the ones passed to the placement table
// as the runtime of a registered role.
type Kind string

// The runtimes nodeld knows how to probe. Their names, and which may be
// adopted or run, are defined once in internal/grammar (RuntimeKinds).
const (
	// KindLlamaCpp is llama.cpp's llama-server.
	KindLlamaCpp Kind = grammar.RuntimeLlamaCpp
	// KindOllama is Ollama.
	KindOllama Kind = grammar.RuntimeOllama
	// KindMLXLM is mlx_lm.server.
	KindMLXLM Kind = grammar.RuntimeMLXLM
	// KindOpenAI is any other server that speaks the OpenAI HTTP API.
	KindOpenAI Kind = grammar.RuntimeOpenAI
)

// APIOpenAI is the api string registered for every runtime in this package:
// llama.cpp, mlx-lm, Ollama and plain OpenAI-compatible servers all serve the
// OpenAI API under /v1.
const APIOpenAI = "openai"

// Valid reports whether k is a runtime an adopted instance may name
// (grammar.RuntimeKind.Adoptable): every kind but KindProcess.
func (k Kind) Valid() bool {
	rk, ok := grammar.LookupRuntime(string(k))
	return ok && rk.Adoptable
}
