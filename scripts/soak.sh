#!/usr/bin/env bash
# `make soak`: nodeld under a long steady load, locally and over the mesh,
# with a controller ticking. Two nodeld processes on loopback and the fast
# Go upstream (test/benchtool, one chunk every PACE):
#
#   benchtool -> S's role port -> upstream                    (local)
#   benchtool -> C's role port -> QUIC mesh -> S -> upstream  (mesh)
#
# N (1000) SSE streams are held open through each role port at once for
# SOAK_DURATION (10m), each of CHUNKS (30) chunks and replaced by a new one
# when it ends. S also runs the controller (tick SOAK_TICK, 1s) with a
# declared workload: a signed copy of the echo-llm example as role
# "spare", placed on C, so every tick describes both nodes and watches a
# placement over the mesh. inference.limits.concurrency and
# mesh.max_inflight_* are raised for the streams, and mesh.liveness_timeout
# to SOAK_LIVENESS (10s): with the shipped 2 s, a 2-core machine saturated
# by the soak and by other work once missed heartbeats for 2 s and cut the
# link with its 1,000 streams (BENCHMARKS.md). Every SAMPLE (5s) it
# reads both nodes' RSS, Go heap (in use, idle not released, released to
# the OS), goroutine stacks (what RSS holds besides live objects) and
# goroutines (/metrics),
# S's probes of its adopted upstream by result, and their chain sizes; at
# the end it prints, per series, the slope over the last half of
# the run and the noise about it, and each chain's growth in bytes per
# minute (benchtool soak). It exits non-zero on any failed stream, on RSS,
# goroutines or the live heap rising beyond their noise over the last
# half, on a chain
# growing faster in the last half than in the first, and when the
# controller did not tick. Not part of CI (it loads the machine for the
# whole run); figures in BENCHMARKS.md.
#
# Environment: N, SOAK_DURATION, CHUNKS, PACE (1s), SAMPLE, SOAK_TICK, SOAK_LIVENESS,
# BENCH_NICE and BENCH_KEEP (scripts/bench-lib.sh). admin.pprof is on for
# the run: once a minute the soak collects garbage in both nodes
# (/debug/pprof/heap?gc=1) and reads their live heap, the series that
# tells a leak from memory the runtime has not returned yet; the
# profiles can be read during a run too.
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"

N="${N:-1000}"
SOAK_DURATION="${SOAK_DURATION:-10m}"
CHUNKS="${CHUNKS:-30}"
PACE="${PACE:-1s}"
SAMPLE="${SAMPLE:-5s}"
SOAK_TICK="${SOAK_TICK:-1s}"
SOAK_LIVENESS="${SOAK_LIVENESS:-10s}"

bench_init
bench_build
(cd "$BENCH_ROOT" && CGO_ENABLED=0 go build -trimpath -o "$BENCH_BIN/echo-llm" ./examples/packages/echo-llm)
nodeld="$BENCH_BIN/nodeld"

mapfile -t ports < <(bench_ports 8)
up="${ports[0]}" s_role="${ports[1]}" s_admin="${ports[2]}" c_role="${ports[3]}" c_admin="${ports[4]}"
s_mesh="${ports[5]}" c_mesh="${ports[6]}" spare="${ports[7]}"

# keygen NAME: a node key in $BENCH_DIR/NAME before its first start; prints
# the public key hex.
keygen() {
	local cfg="$BENCH_DIR/keygen-$1.yaml"
	echo "node: {data_dir: $BENCH_DIR/$1}" >"$cfg"
	"$nodeld" keygen --config "$cfg" >/dev/null
	"$nodeld" id --config "$cfg" | sed -n 's/.*public key: \([0-9a-f]\{64\}\).*/\1/p'
}
s_key="$(keygen s)"
c_key="$(keygen c)"

# The declared workload: echo-llm as package soak-spare for role spare,
# signed by a publisher key made here.
pkg="$BENCH_DIR/soak-spare"
mkdir -p "$pkg"
cp "$BENCH_BIN/echo-llm" "$pkg/echo-llm"
sed -e 's/"id": "echo-llm"/"id": "soak-spare"/' -e 's/"role": "chat"/"role": "spare"/' \
	"$BENCH_ROOT/examples/packages/echo-llm/manifest.template.json" >"$BENCH_DIR/spare.template.json"
"$nodeld" package build --manifest "$BENCH_DIR/spare.template.json" "$pkg" >/dev/null
anchor="$("$nodeld" package keygen --out "$BENCH_DIR/publisher.key")"
"$nodeld" package sign --key "$BENCH_DIR/publisher.key" "$pkg" >/dev/null

cat >"$BENCH_DIR/s.yaml" <<EOF
node: {name: s, data_dir: $BENCH_DIR/s}
log: {level: warn, format: json}
admin: {listen: 127.0.0.1:$s_admin, pprof: true}
mesh:
  listen: 127.0.0.1:$s_mesh
  liveness_timeout: $SOAK_LIVENESS
  max_inflight_per_peer: $((N + 64))
  max_inflight_total: $((N + 64))
  peers: [{name: c, addr: 127.0.0.1:$c_mesh, key: $c_key, tier: paired}]
inference:
  roles: [{name: chat, listen: 127.0.0.1:$s_role, expose: true, serve_to: [c]}]
  instances: [{role: chat, runtime: openai, url: http://127.0.0.1:$up, model: bench}]
  probe_interval: 1s
  limits: {concurrency: $((2 * N + 64))}
host: {enabled: true, trust_anchors: [$anchor]}
controller:
  enabled: true
  tick: $SOAK_TICK
  policy: {kinds: {inference: {min_tier: paired}}}
  workloads: [{name: spare, package: soak-spare, prefer: [c]}]
EOF
cat >"$BENCH_DIR/c.yaml" <<EOF
node: {name: c, data_dir: $BENCH_DIR/c}
log: {level: warn, format: json}
admin: {listen: 127.0.0.1:$c_admin, pprof: true}
mesh:
  listen: 127.0.0.1:$c_mesh
  liveness_timeout: $SOAK_LIVENESS
  max_inflight_per_peer: $((N + 64))
  max_inflight_total: $((N + 64))
  peers: [{name: s, addr: 127.0.0.1:$s_mesh, key: $s_key, tier: paired}]
inference:
  roles:
    - {name: chat, listen: 127.0.0.1:$c_role, use_from: [s]}
    - {name: spare, listen: 127.0.0.1:$spare}
  probe_interval: 1s
  limits: {concurrency: $((N + 64))}
host: {enabled: true, controllers: [$s_key], trust_anchors: [$anchor]}
EOF
"$nodeld" package add --config "$BENCH_DIR/s.yaml" "$pkg" >/dev/null

bench_start_upstream upstream "$up" -pace "$PACE"
bench_start_nodeld s "$BENCH_DIR/s.yaml" "$s_admin"
bench_start_nodeld c "$BENCH_DIR/c.yaml" "$c_admin"

ctl() { "$nodeld" ctl --socket "$BENCH_DIR/s/nodeld.sock" "$@"; }

# until SECS WHAT CMD...: run CMD every half second until it succeeds.
until_ok() {
	local secs="$1" what="$2" i
	shift 2
	for i in $(seq $((secs * 2))); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.5
	done
	echo "soak: $what within ${secs}s: no; logs in $BENCH_DIR (BENCH_KEEP=1 keeps them)" >&2
	tail -n 20 "$BENCH_DIR/s.log" "$BENCH_DIR/c.log" >&2
	return 1
}
mesh_route() {
	curl -s -o /dev/null -D - -H 'Content-Type: application/json' \
		-d '{"model":"bench","messages":[{"role":"user","content":"hi"}]}' \
		"http://127.0.0.1:$c_role/v1/chat/completions" | grep -qi '^X-Nodeld-Route: n-'
}
spare_running() { ctl --json placements | tr -d ' \n' | grep -q '"workload":"spare".*"life":"placed".*"host_state":"running"'; }
until_ok 60 "C answering chat over the mesh" mesh_route
until_ok 90 "the controller placing spare on C, running" spare_running

metric() { curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m {print $2}'; }
ticks0="$(metric "$s_admin" nodeld_plane_tick_duration_seconds_count)"
chain0_s="$(stat -c %s "$BENCH_DIR/s/chain.log")"
chain0_c="$(stat -c %s "$BENCH_DIR/c/chain.log")"

echo "## soak $(date -u +%Y-%m-%dT%H:%MZ), $(git -C "$BENCH_ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
echo
cpu="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
echo "- machine: $(nproc) CPUs ($cpu), $(free -g | awk '/^Mem:/ {print $2}') GiB, $(uname -sr); $(go version | cut -d' ' -f3-4)"
echo "- load average before the run: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "- N=$N streams through each of local (S's role port) and mesh (C's role port, over QUIC to S), each of $CHUNKS chunks $PACE apart, replaced when it ends, for SOAK_DURATION=$SOAK_DURATION; samples every $SAMPLE"
echo "- S: inference.limits.concurrency $((2 * N + 64)), mesh.max_inflight_per_peer and _total $((N + 64)), mesh.liveness_timeout $SOAK_LIVENESS; controller tick $SOAK_TICK with workload spare placed on C"
echo
rc=0
bench_run "$BENCH_BIN/benchtool" soak -target "local=http://127.0.0.1:$s_role" -target "mesh=http://127.0.0.1:$c_role" \
	-metrics "s=http://127.0.0.1:$s_admin/metrics" -metrics "c=http://127.0.0.1:$c_admin/metrics" \
	-gc "s=http://127.0.0.1:$s_admin/debug/pprof/heap?gc=1" -gc "c=http://127.0.0.1:$c_admin/debug/pprof/heap?gc=1" \
	-chain "s=$BENCH_DIR/s/chain.log" -chain "c=$BENCH_DIR/c/chain.log" \
	-n "$N" -chunks "$CHUNKS" -pace "$PACE" -duration "$SOAK_DURATION" -sample "$SAMPLE" || rc=$?

ticks1="$(metric "$s_admin" nodeld_plane_tick_duration_seconds_count)"
echo
echo "- controller ticks during the run: $(awk -v a="${ticks0:-0}" -v b="${ticks1:-0}" 'BEGIN {print b - a}'); load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
# What the chains recorded during the run, by kind.
for n in s c; do
	var="chain0_$n"
	kinds="$(tail -c +$((${!var} + 1)) "$BENCH_DIR/$n/chain.log" | grep -o '"kind": *"[^"]*"' | sed 's/.*"\([^"]*\)"$/\1/' | sort | uniq -c | awk '{printf "%s%s x%s", sep, $2, $1; sep=", "}' || true)"
	echo "- $n's chain entries during the run: ${kinds:-none}"
done
echo "- placements at the end (S's controller):"
ctl placements | sed 's/^/    /'
if ! spare_running; then
	echo "soak: the declared workload is no longer placed and running" >&2
	rc=1
fi
if [ "$(awk -v a="${ticks0:-0}" -v b="${ticks1:-0}" 'BEGIN {print (b > a) ? 1 : 0}')" != 1 ]; then
	echo "soak: the controller did not tick during the run" >&2
	rc=1
fi
exit "$rc"
