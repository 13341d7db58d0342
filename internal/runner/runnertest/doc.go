// Package runnertest provides fake model servers that answer the probe
// endpoints of llama.cpp, Ollama, mlx-lm and plain OpenAI-compatible
// servers, for tests of the runner package and of its consumers (the proxy,
// the daemon wiring). It imports nothing from nodeld, so the runner
// package's own tests can use it.
//
// A Server runs an httptest server on 127.0.0.1 and is safe for concurrent
// use; its goroutines end at Close, which tb.Cleanup also calls.
package runnertest
