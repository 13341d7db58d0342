// Command benchtool is the Go half of the comparison benchmarks
// (scripts/bench-compare.sh, scripts/bench-memory.sh, scripts/soak.sh
// and the shell functions of scripts/bench-lib.sh): a fast OpenAI-compatible upstream to
// put proxies in front of, and the measurements wrk cannot make. It is a
// benchmark program, not part of nodeld, and imports nothing of nodeld's.
//
//	benchtool upstream -listen 127.0.0.1:0 [-chunks N] [-pace D]
//	    serves POST /v1/chat/completions (a small JSON answer, or with
//	    "stream":true an SSE stream of N chunks, D apart, each carrying the
//	    wall-clock time it was written as "sent_ns"), GET /v1/models and
//	    GET /health; it prints "listening ADDR" once bound.
//	benchtool relay -upstream HOST:PORT [-listen ADDR] [-mode goroutine|epoll|mux]
//	    [-tls-in -cert F -key F | -tls-out -cert F [-conns N]]
//	    the floor under a Go proxy: a relay that does no HTTP work, moving
//	    one read of each client to its own upstream connection and one read
//	    back, in lockstep (right for bench-chat.lua's small exchanges only;
//	    it cannot stream), in a goroutine per connection or from one epoll
//	    thread (FLOOR=1 make bench-compare); two relays with TLS 1.3
//	    between them, a connection each or streams over N shared ones
//	    (mux), are the floor under a mesh hop (FLOOR=1 make bench-mesh).
//	benchtool freeports N
//	    prints N free loopback TCP ports.
//	benchtool report FILE
//	    reads the wrk results the scripts appended to FILE and prints the
//	    comparison table (medians over rounds of per-round differences).
//	benchtool sse [-rounds R] [-streams S] NAME=URL ...
//	    streams S completions through each URL in turn, R interleaved
//	    rounds, and prints the largest and p99 added gap between chunks.
//	benchtool streams -url URL -metrics URL [-n N] [-rounds R]
//	    holds N SSE streams at once through URL, R rounds in a row, and
//	    prints the resident memory and goroutines of the process serving
//	    -metrics (Prometheus text) idle, at peak and after each round.
//	benchtool soak -target NAME=URL... -metrics NAME=URL... [-chain NAME=PATH]...
//	    [-n N] [-chunks C] [-duration D] [-sample S]
//	    holds N SSE streams open through each target for D, each replaced
//	    by a new one when it ends, samples RSS, Go heap and goroutines of
//	    each -metrics process and the size of each chain file, and prints
//	    the slope of each over the last half with its noise and each
//	    chain's bytes per minute; it fails on a failed stream, on RSS or
//	    goroutines that rise beyond their noise, and on a chain growing
//	    faster in the last half (scripts/soak.sh, make soak).
//	benchtool chain -label NAME=PID... [-proxies NAME,...] [-name S] < TRACE
//	    splits a concurrency-1 request chain into its stages, from a
//	    `perf script` of raw_syscalls:sys_enter on every CPU: each stage
//	    is the time from one labelled process's write to the next's, with
//	    the share that woke on another CPU (CHAIN=1 make bench-mesh).
//
// Every load it makes goes to the loopback URLs it is given, bounded in
// count and time.
package main
