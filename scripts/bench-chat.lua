-- The request of the comparison benchmarks: a small chat completion POST,
-- the same on every path. done() prints one RESULT line that
-- scripts/bench-lib.sh (bench_wrk) reads: p50 and p99 in microseconds,
-- requests per second, socket errors and non-2xx answers.
wrk.method = "POST"
wrk.body = '{"model":"bench","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Say hello."}],"max_tokens":16}'
wrk.headers["Content-Type"] = "application/json"

function done(summary, latency, requests)
	local e = summary.errors
	io.write(string.format("RESULT %d %d %.1f %d %d\n",
		latency:percentile(50), latency:percentile(99),
		summary.requests / (summary.duration / 1e6),
		e.connect + e.read + e.write + e.timeout, e.status))
end
