#!/usr/bin/env bash
# `make bench-memory`: memory and leaks of the loopback proxy. Holds N (1000)
# SSE streams at once through one nodeld role port to the fast Go upstream
# (test/benchtool, one chunk a second for CHUNKS (60) seconds), ROUNDS (5)
# rounds in a row, with inference.limits.concurrency raised to N+64, and
# prints nodeld's resident memory and goroutines (from its /metrics) idle
# before each round, at the round's peak and SETTLE (10s) after its streams
# ended. Targets: at most 200 MB at N=1000, no growth across rounds. The Go
# heap figures idle and after are taken right after a collection (admin.pprof
# is on for the run: GET /debug/pprof/heap?gc=1), so they hold live memory
# only; a binary without admin.pprof (BASELINE from before it) runs without.
# BASELINE=FILE runs the same afterwards against another nodeld binary.
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"

N="${N:-1000}"
ROUNDS="${ROUNDS:-5}"
CHUNKS="${CHUNKS:-60}"
SETTLE="${SETTLE:-10s}"

bench_init
bench_install_tools
bench_build

mapfile -t ports < <(bench_ports 3)
up="${ports[0]}" role="${ports[1]}" admin="${ports[2]}"
bench_start_upstream upstream "$up" -pace 1s

echo "## bench-memory $(date -u +%Y-%m-%dT%H:%MZ), $(git -C "$BENCH_ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
echo
bench_machine
echo "- N=$N streams of $CHUNKS chunks 1 s apart, ROUNDS=$ROUNDS, SETTLE=$SETTLE"

run_one() {
	local label="$1" bin="$2" gc=()
	if "$bin" config check /dev/stdin <<<"admin: {pprof: true}" >/dev/null 2>&1; then
		export BENCH_PPROF=1
		gc=(-gc "http://127.0.0.1:$admin/debug/pprof/heap?gc=1")
	else
		unset BENCH_PPROF
	fi
	bench_nodeld_config "$BENCH_DIR/$label.yaml" "$role" "$admin" "$up" $((N + 64))
	BENCH_NODELD="$bin" bench_start_nodeld "$label" "$BENCH_DIR/$label.yaml" "$admin"
	bench_wait_http "http://127.0.0.1:$role/v1/models"
	echo
	echo "### $label"
	echo
	"$BENCH_BIN/benchtool" streams -url "http://127.0.0.1:$role" -metrics "http://127.0.0.1:$admin/metrics" \
		-n "$N" -rounds "$ROUNDS" -chunks "$CHUNKS" -settle "$SETTLE" "${gc[@]}"
	bench_stop "$label"
}

run_one nodeld "$BENCH_BIN/nodeld"
if [ -n "${BASELINE:-}" ]; then
	run_one baseline "$BASELINE"
fi
