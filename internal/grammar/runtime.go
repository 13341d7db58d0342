package grammar

// The runtime kinds nodeld knows, as operators write them in
// inference.instances[].runtime and packages in runtime.type, and as facts
// report them.
const (
	// RuntimeProcess is a plain supervised process from a package.
	RuntimeProcess = "process"
	// RuntimeLlamaCpp is llama.cpp's llama-server.
	RuntimeLlamaCpp = "llama.cpp"
	// RuntimeOllama is Ollama.
	RuntimeOllama = "ollama"
	// RuntimeMLXLM is mlx_lm.server.
	RuntimeMLXLM = "mlx-lm"
	// RuntimeOpenAI is any other server that speaks the OpenAI HTTP API.
	RuntimeOpenAI = "openai"
)

// RuntimeKind describes one runtime kind.
type RuntimeKind struct {
	// Name is the spelling operators and manifests use ("llama.cpp").
	Name string
	// Segment is the kind's capability id word ("llamacpp", as in
	// "runtime.llamacpp"): Name without the characters a capability word
	// may not hold.
	Segment string
	// Adoptable says a server of this kind that is already running may be
	// adopted (inference.instances[].runtime).
	Adoptable bool
	// Runnable says a package may be run with it (runtime.type): the host
	// starts the process or asks the node's server to load the model.
	Runnable bool
}

// RuntimeKinds returns every known runtime kind, in a fixed order. The
// slice is new on every call.
func RuntimeKinds() []RuntimeKind {
	return []RuntimeKind{
		{Name: RuntimeProcess, Segment: "process", Runnable: true},
		{Name: RuntimeLlamaCpp, Segment: "llamacpp", Adoptable: true, Runnable: true},
		{Name: RuntimeOllama, Segment: "ollama", Adoptable: true, Runnable: true},
		{Name: RuntimeMLXLM, Segment: "mlxlm", Adoptable: true, Runnable: true},
		{Name: RuntimeOpenAI, Segment: "openai", Adoptable: true},
	}
}

// LookupRuntime returns the runtime kind called name, and whether there
// is one. Names are matched exactly.
func LookupRuntime(name string) (RuntimeKind, bool) {
	for _, k := range RuntimeKinds() {
		if k.Name == name {
			return k, true
		}
	}
	return RuntimeKind{}, false
}

// AdoptableRuntimes returns the names of the kinds that may be adopted,
// in RuntimeKinds order ("llama.cpp", "ollama", "mlx-lm", "openai").
func AdoptableRuntimes() []string {
	var out []string
	for _, k := range RuntimeKinds() {
		if k.Adoptable {
			out = append(out, k.Name)
		}
	}
	return out
}

// RunnableRuntimes returns the names of the kinds a package may be run
// with, in RuntimeKinds order ("process", "llama.cpp", "ollama", "mlx-lm").
func RunnableRuntimes() []string {
	var out []string
	for _, k := range RuntimeKinds() {
		if k.Runnable {
			out = append(out, k.Name)
		}
	}
	return out
}
