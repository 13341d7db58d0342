#!/usr/bin/env bash
# `make bench-compare`: the loopback proxy against nginx and against no proxy
# at all, in one run. A fast Go upstream (test/benchtool) answers a small
# chat completion; wrk (1 thread, keep-alive, scripts/bench-chat.lua) sends
# it directly, through a nodeld role port and through nginx (one worker,
# upstream keep-alive, proxy_buffering off as SSE needs), in interleaved
# rounds whose order rotates. Printed: added p50/p99 at concurrency 1 and
# the throughput share of direct at concurrency 64 (medians over rounds of
# per-round differences), then the SSE relay: the largest added gap between
# chunks of 200-chunk streams, 1 ms apart.
#
# Environment: ROUNDS (3), SECS (5, per wrk run), CONC (64), SSE_ROUNDS (3),
# BASELINE="[LABEL=]FILE ..." adds other nodeld binaries (e.g. built from
# earlier commits; label "baseline" by default) to the same run; FLOOR=1 adds
# the floor under any Go proxy (benchtool relay: no HTTP work, lockstep, in a
# goroutine per connection and from one epoll thread; not in the SSE part,
# which it cannot carry); PROFILE=DIR saves a 10 s CPU
# profile of nodeld under wrk at CONC into DIR (admin.pprof is enabled for
# the run); BENCH_NICE=N runs every process of the run at that nice level
# (see bench-lib.sh); BENCH_KEEP=1 keeps the work dir. Installs wrk, nginx and curl
# from Debian when missing (apt-get; needs root or sudo).
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"

ROUNDS="${ROUNDS:-3}"
SECS="${SECS:-5}"
CONC="${CONC:-64}"
SSE_ROUNDS="${SSE_ROUNDS:-3}"

bench_init
bench_install_tools
bench_build
[ -n "${PROFILE:-}" ] && export BENCH_PPROF=1

mapfile -t ports < <(bench_ports 4)
up="${ports[0]}" role="${ports[1]}" admin="${ports[2]}" ngx="${ports[3]}"
bench_start_upstream upstream "$up" -chunks 200 -pace 1ms
bench_nodeld_config "$BENCH_DIR/nodeld.yaml" "$role" "$admin" "$up" 256
bench_start_nodeld nodeld "$BENCH_DIR/nodeld.yaml" "$admin"
bench_wait_http "http://127.0.0.1:$role/v1/models"
bench_start_nginx nginx "$ngx" "$up"

names=(direct nodeld nginx)
declare -A urls=([direct]="http://127.0.0.1:$up" [nodeld]="http://127.0.0.1:$role" [nginx]="http://127.0.0.1:$ngx")
for entry in ${BASELINE:-}; do
	label=baseline bin="$entry"
	case "$entry" in *=*) label="${entry%%=*}" bin="${entry#*=}" ;; esac
	mapfile -t bports < <(bench_ports 2)
	bench_nodeld_config "$BENCH_DIR/$label.yaml" "${bports[0]}" "${bports[1]}" "$up" 256
	BENCH_NODELD="$bin" bench_start_nodeld "$label" "$BENCH_DIR/$label.yaml" "${bports[1]}"
	bench_wait_http "http://127.0.0.1:${bports[0]}/v1/models"
	names+=("$label")
	urls[$label]="http://127.0.0.1:${bports[0]}"
done

if [ -n "${FLOOR:-}" ]; then
	mapfile -t fports < <(bench_ports 2)
	for mode in goroutine epoll; do
		port="${fports[0]}"
		[ "$mode" = epoll ] && port="${fports[1]}"
		bench_start "relay-$mode" "$BENCH_BIN/benchtool" relay -mode "$mode" -listen "127.0.0.1:$port" -upstream "127.0.0.1:$up"
		bench_wait_http "http://127.0.0.1:$port/health"
		names+=("relay-$mode")
		urls[relay-$mode]="http://127.0.0.1:$port"
	done
fi

echo "## bench-compare $(date -u +%Y-%m-%dT%H:%MZ), $(git -C "$BENCH_ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
echo
bench_machine
echo "- ROUNDS=$ROUNDS SECS=$SECS CONC=$CONC${BENCH_NICE:+ BENCH_NICE=$BENCH_NICE}; paths: ${names[*]}"
echo

results="$BENCH_DIR/results.txt"
: >"$results"
for name in "${names[@]}"; do # warm-up, not recorded
	bench_run wrk -t1 -c"$CONC" -d1s -s "$BENCH_ROOT/scripts/bench-chat.lua" "${urls[$name]}/v1/chat/completions" >/dev/null
done
n=${#names[@]}
for round in $(seq "$ROUNDS"); do
	for i in $(seq 0 $((n - 1))); do
		name="${names[$(((i + round) % n))]}"
		bench_wrk "$round" "$name" "${urls[$name]}" 1 "$SECS" "$results"
		bench_wrk "$round" "$name" "${urls[$name]}" "$CONC" "$SECS" "$results"
	done
done
"$BENCH_BIN/benchtool" report "$results"
echo

if [ -n "${PROFILE:-}" ]; then
	mkdir -p "$PROFILE"
	bench_run wrk -t1 -c"$CONC" -d12s -s "$BENCH_ROOT/scripts/bench-chat.lua" "${urls[nodeld]}/v1/chat/completions" >"$BENCH_DIR/profile-wrk.txt" &
	wrk_pid=$!
	sleep 1
	curl -sf -o "$PROFILE/nodeld-c$CONC.pprof" "http://127.0.0.1:$admin/debug/pprof/profile?seconds=10"
	wait "$wrk_pid"
	cp "$BENCH_BIN/nodeld" "$PROFILE/nodeld.bin"
	rps="$(sed -n 's/^RESULT [0-9]* [0-9]* \([0-9.]*\) .*/\1/p' "$BENCH_DIR/profile-wrk.txt")"
	cpu="$(go tool pprof -top "$PROFILE/nodeld.bin" "$PROFILE/nodeld-c$CONC.pprof" 2>/dev/null | sed -n 's/.*Total samples = \([0-9.]*\)s.*/\1/p')"
	echo "CPU profile: $PROFILE/nodeld-c$CONC.pprof (go tool pprof $PROFILE/nodeld.bin $PROFILE/nodeld-c$CONC.pprof)"
	if [ -n "$rps" ] && [ -n "$cpu" ]; then
		awk -v r="$rps" -v c="$cpu" 'BEGIN { printf "nodeld CPU per request at c='"$CONC"': %.1f us (%.2f s of CPU in 10 s at %.0f req/s)\n", c * 1e6 / (r * 10), c, r }'
	fi
	echo
fi

sse_args=()
for name in "${names[@]}"; do
	case "$name" in relay-*) continue ;; esac
	sse_args+=("$name=${urls[$name]}")
done
bench_run "$BENCH_BIN/benchtool" sse -rounds "$SSE_ROUNDS" -streams 5 -chunks 200 "${sse_args[@]}"
