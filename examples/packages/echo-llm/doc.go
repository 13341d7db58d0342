// Command echo-llm is a small OpenAI-compatible model server that echoes
// the prompt back. It serves GET /v1/models, POST /v1/chat/completions
// (with "stream": true as server-sent events, one chunk per word),
// POST /v1/completions, POST /v1/embeddings (deterministic vectors from
// the input's bytes) and GET /health, on a loopback address.
//
// It exists so that nodeld's end-to-end tests and the README walk-through
// run a real model server process without weights or an accelerator, and
// as the example workload package of the process runtime.
//
// Flags: --listen (default 127.0.0.1:8080), --model (default echo-1),
// --chunk-delay (pause between streamed chunks), --load-delay (it stands
// in for a model that takes this long to load: the port opens at once,
// but GET /health answers 503 {"status":"loading"} and every other path
// 503, as llama-server does, until the delay has passed; default 0) and
// --ready-file (where it writes the moment it became ready, RFC 3339 with
// nanoseconds, for tests that measure how soon that is noticed) and
// --health-file (the same for the moment it first answered GET /health
// 200: what separates a prober's poll interval from what the prober
// does once it has the answer). It starts
// no goroutines beyond net/http's and exits 0 on SIGTERM or SIGINT.
package main
