#!/usr/bin/env bash
# bench-mesh.sh: what the mesh hop adds, measured the way a user sees it.
#
# Two real nodeld processes on loopback and a fast Go upstream (stdlib
# net/http, fixed answers):
#
#   wrk -> C's role port -> QUIC mesh -> S -> upstream    (mesh)
#   wrk -> S's role port -> upstream                      (local: the local proxy)
#   wrk -> upstream                                       (direct: the baseline)
#
# S serves role "chat" from the upstream and exposes it to C; C has no
# instance and uses S's over the mesh. Each round runs every path back to
# back (interleaved, so a noisy neighbour hits all of them alike): a small
# chat POST at concurrency 1 and 64, and a 1 MiB /v1/embeddings body at
# concurrency 1. The figures printed are medians over the rounds: added p50
# and p99 against direct, the throughput share of direct, and MB/s of the
# 1 MiB bodies. wrk is installed from Debian when missing (root or sudo).
#
# Environment:
#   ROUNDS=3          rounds (medians over them)
#   DURATION=5s       length of one wrk run
#   PORT_BASE=18700   first of 7 consecutive TCP/UDP ports used on 127.0.0.1
#   NODELD_BIN=       a nodeld binary to run (default: built from this tree)
#   PROFILE_DIR=      when set, one more mesh run of each load (c1, c64,
#                     1mib) takes a 10 s CPU profile of both nodes from
#                     /debug/pprof/profile on their admin listeners (needs
#                     admin.pprof, written into the configs unless
#                     PPROF_CONFIG=0) into PROFILE_DIR/{s,c}-LOAD.pprof
#   PPROF_S, PPROF_C  host:port serving /debug/pprof/ of S and C (default:
#                     their admin listeners)
#   KEEP=1            keep the work directory (configs, logs)
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5s}
PORT_BASE=${PORT_BASE:-18700}
PROFILE_DIR=${PROFILE_DIR:-}
PPROF_CONFIG=${PPROF_CONFIG:-1}

UP_PORT=$PORT_BASE
S_ROLE=$((PORT_BASE + 1))
C_ROLE=$((PORT_BASE + 2))
S_ADMIN=$((PORT_BASE + 3))
C_ADMIN=$((PORT_BASE + 4))
S_MESH=$((PORT_BASE + 5))
C_MESH=$((PORT_BASE + 6))
PPROF_S=${PPROF_S:-127.0.0.1:$S_ADMIN}
PPROF_C=${PPROF_C:-127.0.0.1:$C_ADMIN}

sudo=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then sudo="sudo"; fi
for tool in wrk curl; do
	if ! command -v "$tool" >/dev/null; then
		echo "bench-mesh: installing $tool (Debian)" >&2
		$sudo apt-get update -qq
		DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$tool" >/dev/null
	fi
done

work=$(mktemp -d /tmp/nodeld-bench-mesh.XXXXXX)
pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
	if [ "${KEEP:-0}" = 1 ]; then echo "bench-mesh: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

# The upstream: a model server that does no work, so that what is measured
# is the path in front of it. It reads every request body to its end.
mkdir -p "$work/upstream"
cat >"$work/upstream/main.go" <<'EOF'
package main

import (
	"io"
	"net/http"
	"os"
	"strconv"
)

var (
	models = []byte(`{"object":"list","data":[{"id":"bench-model","object":"model","owned_by":"bench"}]}`)
	chat   = []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"bench-model","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`)
	embed  = []byte(`{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,0.2,0.3]}],"model":"bench-model","usage":{"prompt_tokens":1,"total_tokens":1}}`)
)

func answer(body []byte) http.HandlerFunc {
	n := strconv.Itoa(len(body))
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		h := w.Header()
		h["Content-Type"] = []string{"application/json"}
		h["Content-Length"] = []string{n}
		_, _ = w.Write(body)
	}
}

func main() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", answer(models))
	mux.HandleFunc("POST /v1/chat/completions", answer(chat))
	mux.HandleFunc("POST /v1/completions", answer(chat))
	mux.HandleFunc("POST /v1/embeddings", answer(embed))
	if err := http.ListenAndServe(os.Args[1], mux); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
}
EOF
printf 'module benchupstream\n\ngo 1.22\n' >"$work/upstream/go.mod"
(cd "$work/upstream" && CGO_ENABLED=0 go build -o "$work/upstream-bin" .)
if [ -z "${NODELD_BIN:-}" ]; then
	CGO_ENABLED=0 go build -trimpath -o "$work/nodeld" ./cmd/nodeld
	NODELD_BIN=$work/nodeld
fi

pprof_line=""
if [ -n "$PROFILE_DIR" ] && [ "$PPROF_CONFIG" = 1 ]; then pprof_line="  pprof: true"; fi

# S serves chat from the upstream (model pinned to bench-model) and to C;
# both nodes have slots enough for 64 concurrent requests and more.
cat >"$work/s.yaml" <<EOF
node: {name: s, data_dir: $work/s}
log: {level: warn, format: json}
admin:
  listen: 127.0.0.1:$S_ADMIN
$pprof_line
mesh:
  listen: 127.0.0.1:$S_MESH
  max_inflight_per_peer: 256
  max_inflight_total: 256
  peers: [{name: c, addr: 127.0.0.1:$C_MESH, tier: paired}]
inference:
  roles: [{name: chat, listen: 127.0.0.1:$S_ROLE, expose: true, serve_to: [c]}]
  instances: [{role: chat, runtime: openai, url: http://127.0.0.1:$UP_PORT, model: bench-model}]
  probe_interval: 1s
  limits: {concurrency: 256}
EOF
cat >"$work/c.yaml" <<EOF
node: {name: c, data_dir: $work/c}
log: {level: warn, format: json}
admin:
  listen: 127.0.0.1:$C_ADMIN
$pprof_line
mesh:
  listen: 127.0.0.1:$C_MESH
  max_inflight_per_peer: 256
  max_inflight_total: 256
  peers: [{name: s, addr: 127.0.0.1:$S_MESH, tier: paired}]
inference:
  roles: [{name: chat, listen: 127.0.0.1:$C_ROLE, use_from: [s]}]
  limits: {concurrency: 256}
EOF

"$work/upstream-bin" "127.0.0.1:$UP_PORT" 2>"$work/upstream.log" &
pids+=($!)
"$NODELD_BIN" run --config "$work/s.yaml" >"$work/s.log" 2>&1 &
pids+=($!)
"$NODELD_BIN" run --config "$work/c.yaml" >"$work/c.log" 2>&1 &
pids+=($!)

small='{"model":"any","messages":[{"role":"user","content":"Say hello in one word."}],"max_tokens":8}'
# Ready when C answers a chat request over the mesh (the route header
# names S, not "local").
ready=""
for _ in $(seq 1 300); do
	if curl -s -o /dev/null -D "$work/head" -H 'Content-Type: application/json' -d "$small" \
		"http://127.0.0.1:$C_ROLE/v1/chat/completions" 2>/dev/null &&
		grep -q '^HTTP/1.1 200' "$work/head" && grep -qi '^X-Nodeld-Route: n-' "$work/head"; then
		ready=1
		break
	fi
	sleep 0.1
done
if [ -z "$ready" ]; then
	echo "bench-mesh: C never answered over the mesh; logs:" >&2
	tail -n 20 "$work/s.log" "$work/c.log" >&2
	exit 1
fi

# wrk scripts: the small chat POST and a 1 MiB embeddings POST.
cat >"$work/small.lua" <<EOF
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '$small'
EOF
cat >"$work/big.lua" <<'EOF'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"any","input":"' .. string.rep("x", 1048576 - 30) .. '"}'
EOF

url() {
	case $1 in
	direct) echo "http://127.0.0.1:$UP_PORT$2" ;;
	local) echo "http://127.0.0.1:$S_ROLE$2" ;;
	mesh) echo "http://127.0.0.1:$C_ROLE$2" ;;
	esac
}

# run PATH LOAD: one wrk run; appends "round path load p50_us p99_us rps"
# to $work/results.
run() {
	local path=$1 load=$2 conns script endpoint out
	case $load in
	c1) conns=1 script=small.lua endpoint=/v1/chat/completions ;;
	c64) conns=64 script=small.lua endpoint=/v1/chat/completions ;;
	1mib) conns=1 script=big.lua endpoint=/v1/embeddings ;;
	esac
	out=$(wrk -t1 -c"$conns" -d"$DURATION" --latency -s "$work/$script" "$(url "$path" "$endpoint")")
	if grep -q 'Non-2xx\|Socket errors' <<<"$out"; then
		echo "bench-mesh: $path $load: errors:" >&2
		echo "$out" >&2
		exit 1
	fi
	awk -v round="$round" -v path="$path" -v load="$load" '
		function us(v) {
			if (v ~ /us$/) return v + 0
			if (v ~ /ms$/) return v * 1000
			if (v ~ /s$/) return v * 1000000
			return v
		}
		$1 == "50%" { p50 = us($2) }
		$1 == "99%" { p99 = us($2) }
		$1 == "Requests/sec:" { rps = $2 }
		END { printf "%s %s %s %.1f %.1f %.1f\n", round, path, load, p50, p99, rps }
	' <<<"$out" >>"$work/results"
}

echo "bench-mesh: $ROUNDS rounds of $DURATION per run; $(nproc) CPUs; $(go version | cut -d' ' -f3)" >&2
: >"$work/results"
for round in $(seq 1 "$ROUNDS"); do
	for load in c1 c64 1mib; do
		for path in direct local mesh; do
			run "$path" "$load"
		done
	done
	echo "bench-mesh: round $round done" >&2
done

if [ -n "$PROFILE_DIR" ]; then
	mkdir -p "$PROFILE_DIR"
	DURATION_SAVED=$DURATION
	DURATION=12s
	round=profile
	for load in c1 c64 1mib; do
		curl -sf -o "$PROFILE_DIR/s-$load.pprof" "http://$PPROF_S/debug/pprof/profile?seconds=10" &
		ps=$!
		curl -sf -o "$PROFILE_DIR/c-$load.pprof" "http://$PPROF_C/debug/pprof/profile?seconds=10" &
		pc=$!
		run mesh "$load"
		wait "$ps" "$pc" || echo "bench-mesh: a profile of $load failed (is admin.pprof served?)" >&2
	done
	DURATION=$DURATION_SAVED
	echo "bench-mesh: profiles in $PROFILE_DIR" >&2
fi

cp "$work/results" "${RESULTS:-/dev/null}" 2>/dev/null || true

# Per round figures, then medians.
awk -v rounds="$ROUNDS" '
	function median(a, n,   i, j, t) {
		for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
		return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
	}
	$1 == "profile" { next }
	{ p50[$1, $2, $3] = $4; p99[$1, $2, $3] = $5; rps[$1, $2, $3] = $6 }
	END {
		printf "%-6s %-6s %10s %10s %10s %10s %10s %10s\n", "load", "path", "p50 µs", "p99 µs", "+p50 µs", "+p99 µs", "req/s", "share"
		split("c1 c64 1mib", loads, " ")
		split("direct local mesh", paths, " ")
		for (l = 1; l <= 3; l++) for (p = 1; p <= 3; p++) {
			L = loads[l]; P = paths[p]
			for (r = 1; r <= rounds; r++) {
				a50[r] = p50[r, P, L]; a99[r] = p99[r, P, L]; ar[r] = rps[r, P, L]
				d50[r] = p50[r, P, L] - p50[r, "direct", L]; d99[r] = p99[r, P, L] - p99[r, "direct", L]
				sh[r] = rps[r, P, L] / rps[r, "direct", L]
			}
			m50 = median(a50, rounds); m99 = median(a99, rounds); mr = median(ar, rounds)
			md50 = median(d50, rounds); md99 = median(d99, rounds); ms = median(sh, rounds)
			printf "%-6s %-6s %10.0f %10.0f %10.0f %10.0f %10.0f %10.2f", L, P, m50, m99, md50, md99, mr, ms
			if (L == "1mib") printf "  %.0f MB/s", mr * 1048576 / 1e6
			printf "\n"
			if (P == "local") lc[L] = md50
			if (P == "mesh") mc[L] = md50
		}
		printf "\nmesh added p50 at c64 / local added p50 at c64: %.2f\n", (lc["c64"] > 0 ? mc["c64"] / lc["c64"] : 0)
		printf "\nper round (round path load p50_us p99_us req/s):\n"
	}
' "$work/results"
sort -k3,3 -k2,2 -k1,1n "$work/results" | grep -v '^profile' | column -t
