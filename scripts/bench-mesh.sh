#!/usr/bin/env bash
# bench-mesh.sh: what the mesh hop adds, measured the way a user sees it.
#
# Two real nodeld processes on loopback and a fast Go upstream (stdlib
# net/http, fixed answers):
#
#   wrk -> C's role port -> QUIC mesh -> S -> upstream    (mesh)
#   wrk -> S's role port -> upstream                      (local: the local proxy)
#   wrk -> upstream                                       (direct: the baseline)
#   wrk -> nginx A -> TLS 1.3 -> nginx B -> upstream      (nginx: what an
#                                                          operator would build)
#
# S serves role "chat" from the upstream and exposes it to C; C has no
# instance and uses S's over the mesh. The nginx pair is the hand-built
# alternative to the mesh hop: A takes plain HTTP and proxies over TLS 1.3
# (upstream keep-alive, session reuse, B's certificate verified) to B,
# which proxies to the same upstream; one worker each, request and
# response bodies streamed (no buffering), a throwaway Ed25519 certificate
# made with openssl at run time. Each round runs every path back to
# back (interleaved, so a noisy neighbour hits all of them alike): a small
# chat POST at concurrency 1 and 64, and a 1 MiB /v1/embeddings body at
# concurrency 1. The figures printed are medians over the rounds: added p50
# and p99 against direct, the throughput share of direct, MB/s of the 1 MiB
# bodies, and the CPU time the nodeld processes on the path spent per
# request (S for local, S and C for mesh, both nginx for nginx; from
# /proc, so other load on the machine inflates it much less than it
# inflates latency). A last table puts direct, mesh and nginx side by
# side. With
# BASE_BIN=FILE a second pair of nodes runs that nodeld binary (an older
# build, say) and its paths, local0 and mesh0, are measured in the same
# rounds. wrk, nginx and openssl are installed from Debian when missing
# (root or sudo).
#
# Environment:
#   ROUNDS=3          rounds (medians over them)
#   DURATION=5s       length of one wrk run
#   PORT_BASE=18700   first of 7 consecutive TCP/UDP ports used on 127.0.0.1
#                     (and PORT_BASE+14, +15 for nginx A and B)
#   NGINX=1           0 skips the nginx pair
#   NODELD_BIN=       a nodeld binary to run (default: built from this tree)
#   BASE_BIN=         a second nodeld binary, measured as local0 and mesh0
#                     (with a line of the median per-round ratios of the two)
#                     (7 more ports, from PORT_BASE+7)
#   BASE_ENV=         environment for the second pair's nodes, e.g.
#                     "GOMAXPROCS=1"; without BASE_BIN the second pair then
#                     runs the same binary, so local0/mesh0 measure the
#                     setting against the default in the same rounds
#   PROFILE_DIR=      when set, one more mesh run of each load (c1, c64,
#                     1mib) takes a 10 s CPU profile of both nodes from
#                     /debug/pprof/profile on their admin listeners (needs
#                     admin.pprof, written into the configs unless
#                     PPROF_CONFIG=0) into PROFILE_DIR/{s,c}-LOAD.pprof
#   PPROF_S, PPROF_C  host:port serving /debug/pprof/ of S and C (default:
#                     their admin listeners)
#   FLOOR=1           adds the floor under a Go mesh hop: two benchtool
#                     relays with TLS 1.3 between them and no HTTP work
#                     (lockstep, one read a message: c1 and c64 only), as
#                     "floor" (a TLS connection for each client connection,
#                     as nodeld's TCP transport and nginx's keep-alive do)
#                     and "floormux" (every client's exchanges as streams
#                     over 2 shared TLS connections, writes coalesced);
#                     ports PORT_BASE+16..+19; needs the nginx pair's
#                     certificate, so not with NGINX=0
#   CHAIN=1           after the rounds, splits the c1 latency of mesh and
#                     nginx into stages (CHAIN_ROUNDS=3 interleaved traces
#                     of 0.5 s each): perf records every CPU's system calls
#                     while wrk sends one request at a time, and `benchtool
#                     chain` takes each stage as the time from one process's
#                     write to the next's (wrk, C, S, upstream; or wrk, nginx
#                     A, B, upstream), with the share of wake-ups on another
#                     CPU; needs perf (linux-perf) and root
#   KEEP=1            keep the work directory (configs, logs, results)
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5s}
PORT_BASE=${PORT_BASE:-18700}
PROFILE_DIR=${PROFILE_DIR:-}
PPROF_CONFIG=${PPROF_CONFIG:-1}
PPROF_S=${PPROF_S:-127.0.0.1:$((PORT_BASE + 3))}
PPROF_C=${PPROF_C:-127.0.0.1:$((PORT_BASE + 4))}
NGINX=${NGINX:-1}

sudo=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then sudo="sudo"; fi
tools="wrk curl"
if [ "$NGINX" != 0 ]; then tools="$tools nginx openssl"; fi
for tool in $tools; do
	if ! command -v "$tool" >/dev/null && ! [ -x "/usr/sbin/$tool" ]; then
		echo "bench-mesh: installing $tool (Debian)" >&2
		$sudo apt-get update -qq
		# policy-rc.d (where present) keeps the package from starting a
		# system nginx on port 80.
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

# start_pair NAME BIN BASE: an upstream on port BASE, S serving chat from
# it (model pinned to bench-model) to C, both with slots enough for 64
# concurrent requests and more (mesh.max_inflight_per_peer 256), and a
# liveness timeout of 10 s so that a stall of a shared machine does not
# cut the link mid-run. S's role
# port is BASE+1, C's BASE+2, their admin ports BASE+3 and BASE+4, their
# mesh ports BASE+5 and BASE+6.
start_pair() {
	local name=$1 bin=$2 base=$3 envs=${4:-}
	mkdir -p "$work/$name"
	cat >"$work/$name/s.yaml" <<EOF
node: {name: s, data_dir: $work/$name/s}
log: {level: warn, format: json}
admin:
  listen: 127.0.0.1:$((base + 3))
$pprof_line
mesh:
  listen: 127.0.0.1:$((base + 5))
  liveness_timeout: 10s
  max_inflight_per_peer: 256
  max_inflight_total: 256
  peers: [{name: c, addr: 127.0.0.1:$((base + 6)), tier: paired}]
inference:
  roles: [{name: chat, listen: 127.0.0.1:$((base + 1)), expose: true, serve_to: [c]}]
  instances: [{role: chat, runtime: openai, url: http://127.0.0.1:$base, model: bench-model}]
  probe_interval: 1s
  limits: {concurrency: 256}
EOF
	cat >"$work/$name/c.yaml" <<EOF
node: {name: c, data_dir: $work/$name/c}
log: {level: warn, format: json}
admin:
  listen: 127.0.0.1:$((base + 4))
$pprof_line
mesh:
  listen: 127.0.0.1:$((base + 6))
  liveness_timeout: 10s
  max_inflight_per_peer: 256
  max_inflight_total: 256
  peers: [{name: s, addr: 127.0.0.1:$((base + 5)), tier: paired}]
inference:
  roles: [{name: chat, listen: 127.0.0.1:$((base + 2)), use_from: [s]}]
  limits: {concurrency: 256}
EOF
	"$work/upstream-bin" "127.0.0.1:$base" 2>"$work/$name/upstream.log" &
	pids+=($!)
	echo $! >"$work/$name/upstream.pid"
	# shellcheck disable=SC2086 # envs is a list of NAME=VALUE words
	env $envs "$bin" run --config "$work/$name/s.yaml" >"$work/$name/s.log" 2>&1 &
	pids+=($!)
	echo $! >"$work/$name/s.pid"
	# shellcheck disable=SC2086
	env $envs "$bin" run --config "$work/$name/c.yaml" >"$work/$name/c.log" 2>&1 &
	pids+=($!)
	echo $! >"$work/$name/c.pid"
}

if [ -n "${BASE_ENV:-}" ] && [ -z "${BASE_BIN:-}" ]; then BASE_BIN=$NODELD_BIN; fi
start_pair cur "$NODELD_BIN" "$PORT_BASE"
paths="direct local mesh"
if [ -n "${BASE_BIN:-}" ]; then
	start_pair base "$BASE_BIN" $((PORT_BASE + 7)) "${BASE_ENV:-}"
	paths="direct local0 local mesh0 mesh"
fi

small='{"model":"any","messages":[{"role":"user","content":"Say hello in one word."}],"max_tokens":8}'

# wait_mesh PORT NAME: until C (role port PORT) answers a chat request
# over the mesh (the route header names S, not "local").
wait_mesh() {
	local port=$1 name=$2
	for _ in $(seq 1 300); do
		if curl -s -o /dev/null -D "$work/head" -H 'Content-Type: application/json' -d "$small" \
			"http://127.0.0.1:$port/v1/chat/completions" 2>/dev/null &&
			grep -q '^HTTP/1.1 200' "$work/head" && grep -qi '^X-Nodeld-Route: n-' "$work/head"; then
			return 0
		fi
		sleep 0.1
	done
	echo "bench-mesh: C never answered over the mesh; logs:" >&2
	tail -n 20 "$work/$name/s.log" "$work/$name/c.log" >&2
	exit 1
}
wait_mesh $((PORT_BASE + 2)) cur
if [ -n "${BASE_BIN:-}" ]; then wait_mesh $((PORT_BASE + 9)) base; fi

# start_nginx_pair: nginx A on PORT_BASE+14 (plain HTTP in) proxying over
# TLS 1.3 to nginx B on PORT_BASE+15, which proxies to the upstream of
# the first pair; both with upstream keep-alive, A with TLS session
# reuse and B's certificate verified.
start_nginx_pair() {
	local dir=$work/nginx a=$((PORT_BASE + 14)) b=$((PORT_BASE + 15)) bin side
	bin=$(command -v nginx || echo /usr/sbin/nginx)
	mkdir -p "$dir/a" "$dir/b"
	openssl req -x509 -newkey ed25519 -nodes -days 1 -subj /CN=bench-nginx-b \
		-addext subjectAltName=DNS:bench-nginx-b -keyout "$dir/key.pem" -out "$dir/cert.pem" 2>/dev/null
	local temps="client_body_temp_path $dir/tmp-body; proxy_temp_path $dir/tmp-proxy;
    fastcgi_temp_path $dir/tmp-fcgi; uwsgi_temp_path $dir/tmp-uwsgi; scgi_temp_path $dir/tmp-scgi;"
	local stream="proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_buffering off;
            proxy_request_buffering off;"
	for side in a b; do
		cat >"$dir/$side/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $dir/$side/nginx.pid;
error_log $dir/$side/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    $temps
    keepalive_requests 1000000;
    client_max_body_size 0;
EOF
	done
	cat >>"$dir/a/nginx.conf" <<EOF
    upstream b {
        server 127.0.0.1:$b;
        keepalive 256;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:$a;
        location / {
            proxy_pass https://b;
            $stream
            proxy_ssl_protocols TLSv1.3;
            proxy_ssl_session_reuse on;
            proxy_ssl_verify on;
            proxy_ssl_name bench-nginx-b;
            proxy_ssl_trusted_certificate $dir/cert.pem;
        }
    }
}
EOF
	cat >>"$dir/b/nginx.conf" <<EOF
    upstream up {
        server 127.0.0.1:$PORT_BASE;
        keepalive 256;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:$b ssl;
        ssl_certificate $dir/cert.pem;
        ssl_certificate_key $dir/key.pem;
        ssl_protocols TLSv1.3;
        ssl_session_cache shared:bench:1m;
        location / {
            proxy_pass http://up;
            $stream
        }
    }
}
EOF
	for side in b a; do
		"$bin" -p "$dir/$side" -e "$dir/$side/error.log" -c "$dir/$side/nginx.conf" >"$dir/$side/out.log" 2>&1 &
		pids+=($!)
		echo $! >"$dir/$side/master.pid"
	done
	local m
	for _ in $(seq 1 100); do
		if [ "$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' -d "$small" \
			"http://127.0.0.1:$a/v1/chat/completions" 2>/dev/null)" = 200 ]; then
			# The processes on the path: each master and its worker.
			nginx_pids=""
			for side in a b; do
				m=$(cat "$dir/$side/master.pid")
				nginx_pids="$nginx_pids $m $(pgrep -P "$m" | xargs)"
			done
			return 0
		fi
		sleep 0.1
	done
	echo "bench-mesh: the nginx pair never answered; logs:" >&2
	tail -n 20 "$dir/a/error.log" "$dir/b/error.log" "$dir/a/out.log" "$dir/b/out.log" >&2
	exit 1
}
nginx_pids=""
if [ "$NGINX" != 0 ]; then
	start_nginx_pair
	paths="$paths nginx"
fi

# start_floor: the TLS relay pairs of FLOOR=1, each relay's pid in
# $work/floor/NAME.pid.
start_floor() {
	local dir=$work/floor mode name port
	mkdir -p "$dir"
	go build -o "$dir/benchtool" ./test/benchtool
	for mode in goroutine mux; do
		name=floor port=$((PORT_BASE + 16))
		if [ "$mode" = mux ]; then name=floormux port=$((PORT_BASE + 18)); fi
		"$dir/benchtool" relay -mode "$mode" -tls-in -cert "$work/nginx/cert.pem" -key "$work/nginx/key.pem" \
			-listen "127.0.0.1:$((port + 1))" -upstream "127.0.0.1:$PORT_BASE" >"$dir/$name-b.log" 2>&1 &
		pids+=($!)
		echo $! >"$dir/$name-b.pid"
		for _ in $(seq 1 50); do grep -q listening "$dir/$name-b.log" && break; sleep 0.1; done
		"$dir/benchtool" relay -mode "$mode" -tls-out -cert "$work/nginx/cert.pem" -conns 2 \
			-listen "127.0.0.1:$port" -upstream "127.0.0.1:$((port + 1))" >"$dir/$name-a.log" 2>&1 &
		pids+=($!)
		echo $! >"$dir/$name-a.pid"
		for _ in $(seq 1 50); do grep -q listening "$dir/$name-a.log" && break; sleep 0.1; done
		if ! grep -q listening "$dir/$name-a.log"; then
			echo "bench-mesh: the $name relays did not start:" >&2
			cat "$dir/$name-a.log" "$dir/$name-b.log" >&2
			exit 1
		fi
	done
}
if [ "${FLOOR:-0}" = 1 ]; then
	if [ "$NGINX" = 0 ]; then
		echo "bench-mesh: FLOOR=1 uses the nginx pair's certificate; drop NGINX=0" >&2
		exit 2
	fi
	start_floor
	paths="$paths floor floormux"
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
	direct) echo "http://127.0.0.1:$PORT_BASE$2" ;;
	local) echo "http://127.0.0.1:$((PORT_BASE + 1))$2" ;;
	mesh) echo "http://127.0.0.1:$((PORT_BASE + 2))$2" ;;
	local0) echo "http://127.0.0.1:$((PORT_BASE + 8))$2" ;;
	mesh0) echo "http://127.0.0.1:$((PORT_BASE + 9))$2" ;;
	nginx) echo "http://127.0.0.1:$((PORT_BASE + 14))$2" ;;
	floor) echo "http://127.0.0.1:$((PORT_BASE + 16))$2" ;;
	floormux) echo "http://127.0.0.1:$((PORT_BASE + 18))$2" ;;
	esac
}

# cpu_ticks PATH: user and system clock ticks so far of the nodeld
# processes on PATH (0 for direct).
cpu_ticks() {
	local pair=cur files=()
	case $1 in local0 | mesh0) pair=base ;; esac
	case $1 in
	direct)
		echo 0
		return
		;;
	local | local0) files=("/proc/$(cat "$work/$pair/s.pid")/stat") ;;
	mesh | mesh0) files=("/proc/$(cat "$work/$pair/s.pid")/stat" "/proc/$(cat "$work/$pair/c.pid")/stat") ;;
	nginx) for pid in $nginx_pids; do files+=("/proc/$pid/stat"); done ;;
	floor | floormux) files=("/proc/$(cat "$work/floor/$1-a.pid")/stat" "/proc/$(cat "$work/floor/$1-b.pid")/stat") ;;
	esac
	# utime and stime are the 12th and 13th fields after the command
	# name, which may hold spaces.
	sed 's/^.*) //' "${files[@]}" | awk '{t += $12 + $13} END {print t}'
}
hz=$(getconf CLK_TCK)

# run PATH LOAD: one wrk run; appends "round path load p50_us p99_us rps
# cpu_us_per_request errors" to $work/results.
run() {
	local path=$1 load=$2 conns script endpoint out t0 t1
	case $load in
	c1) conns=1 script=small.lua endpoint=/v1/chat/completions ;;
	c64) conns=64 script=small.lua endpoint=/v1/chat/completions ;;
	1mib) conns=1 script=big.lua endpoint=/v1/embeddings ;;
	esac
	t0=$(cpu_ticks "$path")
	out=$(wrk -t1 -c"$conns" -d"$DURATION" --timeout 10s --latency -s "$work/$script" "$(url "$path" "$endpoint")")
	t1=$(cpu_ticks "$path")
	if grep -q 'Non-2xx\|Socket errors' <<<"$out"; then
		# Counted and shown, not fatal: on a loaded shared machine a
		# stall of several seconds fails a few requests of any path.
		echo "bench-mesh: $path $load round $round: errors:" >&2
		grep 'Non-2xx\|Socket errors' <<<"$out" >&2
	fi
	awk -v round="$round" -v path="$path" -v load="$load" -v ticks=$((t1 - t0)) -v hz="$hz" '
		function us(v) {
			if (v ~ /us$/) return v + 0
			if (v ~ /ms$/) return v * 1000
			if (v ~ /s$/) return v * 1000000
			return v
		}
		$1 == "50%" { p50 = us($2) }
		$1 == "99%" { p99 = us($2) }
		$1 == "Requests/sec:" { rps = $2 }
		/requests in/ { n = $1 }
		/Non-2xx/ { errs += $NF }
		/Socket errors/ { gsub(",", ""); errs += $4 + $6 + $8 + $10 }
		END { printf "%s %s %s %.1f %.1f %.1f %.1f %d\n", round, path, load, p50, p99, rps, (n > 0 ? ticks * 1000000 / hz / n : 0), errs }
	' <<<"$out" >>"$work/results"
}

echo "bench-mesh: $ROUNDS rounds of $DURATION per run; $(nproc) CPUs; $(go version | cut -d' ' -f3)${BASE_ENV:+; local0/mesh0 with $BASE_ENV}" >&2
: >"$work/results"
for round in $(seq 1 "$ROUNDS"); do
	for load in c1 c64 1mib; do
		for path in $paths; do
			# The floor relays move one read a message: not 1 MiB bodies.
			case $path/$load in floor*/1mib) continue ;; esac
			run "$path" "$load"
		done
	done
	echo "bench-mesh: round $round done" >&2
done

if [ -n "$PROFILE_DIR" ]; then
	mkdir -p "$PROFILE_DIR"
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
	echo "bench-mesh: profiles in $PROFILE_DIR" >&2
fi

# chain_trace PATH: one c1 trace of PATH split into stages (CHAIN=1).
chain_trace() {
	local path=$1 wpid labels proxies
	wrk -t1 -c1 -d2s -s "$work/small.lua" "$(url "$path" /v1/chat/completions)" >/dev/null &
	wpid=$!
	sleep 0.8
	perf record -q -a -e raw_syscalls:sys_enter -o "$work/chain.data" -- sleep 0.5 2>/dev/null
	wait "$wpid"
	case $path in
	mesh)
		labels="-label C=$(cat "$work/cur/c.pid") -label S=$(cat "$work/cur/s.pid")"
		proxies=C,S
		;;
	nginx)
		labels="-label A=$(pgrep -P "$(cat "$work/nginx/a/master.pid")" | head -1) -label B=$(pgrep -P "$(cat "$work/nginx/b/master.pid")" | head -1)"
		proxies=A,B
		;;
	esac
	# shellcheck disable=SC2086 # labels is a list of flags
	perf script -i "$work/chain.data" -F comm,pid,tid,cpu,time,event,trace 2>/dev/null |
		"$work/benchtool" chain -name "$path" -label "wrk=$wpid" -label "up=$(cat "$work/cur/upstream.pid")" $labels -proxies "$proxies"
}
if [ "${CHAIN:-0}" = 1 ]; then
	if ! command -v perf >/dev/null; then
		echo "bench-mesh: CHAIN=1 needs perf (Debian: linux-perf)" >&2
		exit 1
	fi
	go build -o "$work/benchtool" ./test/benchtool
	chain_paths=mesh
	if [ "$NGINX" != 0 ]; then chain_paths="mesh nginx"; fi
	for r in $(seq 1 "${CHAIN_ROUNDS:-3}"); do
		for path in $chain_paths; do
			echo "== chain round $r: $path"
			chain_trace "$path"
		done
	done | tee "$work/chain.txt" >&2
fi

# Medians over the rounds, then every run.
awk -v rounds="$ROUNDS" -v paths="$paths" '
	function median(a, n,   i, j, t) {
		for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
		return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
	}
	$1 == "profile" { next }
	{ p50[$1, $2, $3] = $4; p99[$1, $2, $3] = $5; rps[$1, $2, $3] = $6; cpu[$1, $2, $3] = $7; errs[$2, $3] += $8 }
	END {
		printf "%-6s %-6s %9s %9s %9s %9s %9s %7s %11s %7s\n", "load", "path", "p50 µs", "p99 µs", "+p50 µs", "+p99 µs", "req/s", "share", "cpu µs/req", "errors"
		nl = split("c1 c64 1mib", loads, " ")
		np = split(paths, ps, " ")
		for (l = 1; l <= nl; l++) for (p = 1; p <= np; p++) {
			L = loads[l]; P = ps[p]
			if (P ~ /^floor/ && L == "1mib") continue
			for (r = 1; r <= rounds; r++) {
				a50[r] = p50[r, P, L]; a99[r] = p99[r, P, L]; ar[r] = rps[r, P, L]; ac[r] = cpu[r, P, L]
				d50[r] = p50[r, P, L] - p50[r, "direct", L]; d99[r] = p99[r, P, L] - p99[r, "direct", L]
				sh[r] = rps[r, P, L] / rps[r, "direct", L]
			}
			m50 = median(a50, rounds); m99 = median(a99, rounds); mr = median(ar, rounds)
			md50 = median(d50, rounds); md99 = median(d99, rounds); ms = median(sh, rounds); mc = median(ac, rounds)
			printf "%-6s %-6s %9.0f %9.0f %9.0f %9.0f %9.0f %7.2f %11.0f %7d", L, P, m50, m99, md50, md99, mr, ms, mc, errs[P, L]
			if (L == "1mib") printf "  %.0f MB/s", mr * 1048576 / 1e6
			printf "\n"
			added[P, L] = md50; mrps[P, L] = mr; mshare[P, L] = ms; mcpu[P, L] = mc; mp50[P, L] = m50
		}
		printf "\nmesh added p50 at c64 / local added p50 at c64: %.2f", (added["local", "c64"] > 0 ? added["mesh", "c64"] / added["local", "c64"] : 0)
		if (index(paths, "mesh0")) printf " (base build: %.2f)", (added["local0", "c64"] > 0 ? added["mesh0", "c64"] / added["local0", "c64"] : 0)
		if (index(paths, "mesh0")) {
			# Per-round ratios first (both builds ran in the same round, so a
			# noisy neighbour hits both alike), then their median.
			for (r = 1; r <= rounds; r++) {
				q1[r] = (rps[r, "mesh0", "c64"] > 0 ? rps[r, "mesh", "c64"] / rps[r, "mesh0", "c64"] : 0)
				q2[r] = (cpu[r, "mesh0", "c64"] > 0 ? cpu[r, "mesh", "c64"] / cpu[r, "mesh0", "c64"] : 0)
				q3[r] = (cpu[r, "local0", "c64"] > 0 ? cpu[r, "local", "c64"] / cpu[r, "local0", "c64"] : 0)
			}
			printf "\nthis build against the base at c64, median of per-round ratios: mesh requests/s x%.3f, mesh cpu/request x%.3f, local cpu/request x%.3f",
				median(q1, rounds), median(q2, rounds), median(q3, rounds)
		}
		if (index(paths, "nginx")) {
			printf "\n\nside by side (medians):            %12s %12s %12s\n", "direct", "mesh", "nginx TLS"
			printf "%-34s %12.0f %+12.0f %+12.0f\n", "c1: p50 µs (direct), added", mp50["direct", "c1"], added["mesh", "c1"], added["nginx", "c1"]
			printf "%-34s %12.0f %12.0f %12.0f\n", "c64: requests/s", mrps["direct", "c64"], mrps["mesh", "c64"], mrps["nginx", "c64"]
			printf "%-34s %12.2f %12.2f %12.2f\n", "c64: share of direct", 1, mshare["mesh", "c64"], mshare["nginx", "c64"]
			printf "%-34s %12.0f %12.0f %12.0f\n", "1 MiB bodies, c1: MB/s", mrps["direct", "1mib"] * 1048576 / 1e6, mrps["mesh", "1mib"] * 1048576 / 1e6, mrps["nginx", "1mib"] * 1048576 / 1e6
			for (l = 1; l <= nl; l++) printf "%-34s %12s %12.0f %12.0f\n", "cpu µs/request, " loads[l], "-", mcpu["mesh", loads[l]], mcpu["nginx", loads[l]]
			printf "mesh against nginx: added p50 at c1 x%.2f, requests/s at c64 x%.2f, MB/s x%.2f, cpu/request at c64 x%.2f",
				(added["nginx", "c1"] > 0 ? added["mesh", "c1"] / added["nginx", "c1"] : 0),
				(mrps["nginx", "c64"] > 0 ? mrps["mesh", "c64"] / mrps["nginx", "c64"] : 0),
				(mrps["nginx", "1mib"] > 0 ? mrps["mesh", "1mib"] / mrps["nginx", "1mib"] : 0),
				(mcpu["nginx", "c64"] > 0 ? mcpu["mesh", "c64"] / mcpu["nginx", "c64"] : 0)
		}
		if (index(paths, "floor")) {
			printf "\n\nthe floor (TLS relays, no HTTP work) at c64: a connection each %.0f req/s, %.1f cpu µs/req; streams over 2 connections %.0f req/s, %.1f µs; nginx %.1f µs, mesh %.1f µs",
				mrps["floor", "c64"], mcpu["floor", "c64"], mrps["floormux", "c64"], mcpu["floormux", "c64"], mcpu["nginx", "c64"], mcpu["mesh", "c64"]
		}
		printf "\n\nevery run (round path load p50_us p99_us req/s cpu_us/req errors):\n"
	}
' "$work/results"
sort -k3,3 -k2,2 -k1,1n "$work/results" | grep -v '^profile' | column -t
