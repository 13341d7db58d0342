package runner

// Kind names a model-server runtime. The strings are the ones operators write
// in inference.instances[].runtime and the ones passed to the placement table
// as the runtime of a registered role.
type Kind string

// The runtimes nodeld knows how to probe.
const (
	// KindLlamaCpp is llama.cpp's llama-server.
	KindLlamaCpp Kind = "llama.cpp"
	// KindOllama is Ollama.
	KindOllama Kind = "ollama"
	// KindMLXLM is mlx_lm.server.
	KindMLXLM Kind = "mlx-lm"
	// KindOpenAI is any other server that speaks the OpenAI HTTP API.
	KindOpenAI Kind = "openai"
)

// APIOpenAI is the api string registered for every runtime in this package:
// llama.cpp, mlx-lm, Ollama and plain OpenAI-compatible servers all serve the
// OpenAI API under /v1.
const APIOpenAI = "openai"

// Valid reports whether k is one of the known runtimes.
func (k Kind) Valid() bool {
	switch k {
	case KindLlamaCpp, KindOllama, KindMLXLM, KindOpenAI:
		return true
	default:
		return false
	}
}
