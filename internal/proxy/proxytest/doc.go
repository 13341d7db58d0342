// Package proxytest provides an OpenAI-compatible HTTP upstream for tests:
// chat completions (plain and streamed as server-sent events), completions,
// embeddings, models, /health and a few Ollama endpoints (/api/chat and
// /api/generate stream NDJSON, chunked), with hooks
// that let a test hold requests and release stream chunks one by one, and
// counters of requests and TCP connections.
//
// The upstream runs on an httptest.Server owned by the Upstream; Close (or
// the test's cleanup) stops it and waits for its handlers.
package proxytest
