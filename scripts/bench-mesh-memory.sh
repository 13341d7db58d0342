#!/usr/bin/env bash
# `make bench-mesh-memory`: memory of two nodes carrying N (1000) SSE
# streams at once over the mesh. Node S serves role "chat" from the fast Go
# upstream (test/benchtool, one chunk a second for CHUNKS (30) seconds) to
# node C, which has no instance; benchtool holds N streams at once through
# C's role port, ROUNDS (2) rounds in a row, and prints C's table as
# bench-memory.sh does (streams ok / failed, resident memory and
# goroutines idle, at the round's peak and SETTLE (5s) after). Then the
# peak resident memory of each node over the whole run (VmHWM from
# /proc) and the requests S served and C forwarded by outcome. Target
# (issue 26): under 100 MB on each node at N=1000, no failure.
#
# Every limit in the way of N streams is raised in the two configs: the
# role ports' inference.limits.concurrency and max_connections, the mesh
# in-flight slots (which also raise the streams a peer may open) and a
# liveness timeout of 10 s so that a stall of a shared machine does not cut
# the link mid-run. NODELD=FILE runs another nodeld binary.
set -euo pipefail
source "$(dirname "$0")/bench-lib.sh"

N="${N:-1000}"
ROUNDS="${ROUNDS:-2}"
CHUNKS="${CHUNKS:-30}"
SETTLE="${SETTLE:-5s}"

bench_init
bench_install_tools
bench_build
bin="${NODELD:-$BENCH_BIN/nodeld}"

mapfile -t ports < <(bench_ports 7)
up="${ports[0]}" s_role="${ports[1]}" c_role="${ports[2]}" s_admin="${ports[3]}" c_admin="${ports[4]}"
s_mesh="${ports[5]}" c_mesh="${ports[6]}"
slots=$((N + 64))
bench_start_upstream upstream "$up" -pace 1s

# mesh_config FILE NAME ADMIN MESH PEER PEER_MESH ROLE_LINE [INSTANCE_LINE]
mesh_config() {
	cat >"$1" <<EOF
node: {name: $2, data_dir: $BENCH_DIR/$2}
log: {level: warn, format: json}
admin:
  listen: 127.0.0.1:$3
  pprof: true
mesh:
  listen: 127.0.0.1:$4
  liveness_timeout: 10s
  max_inflight_per_peer: $slots
  max_inflight_total: $slots
  peers: [{name: $5, addr: 127.0.0.1:$6, tier: paired}]
inference:
  roles: [$7]
  instances: [${8:-}]
  probe_interval: 1s
  limits: {concurrency: $slots, max_connections: $slots}
EOF
}
mesh_config "$BENCH_DIR/s.yaml" s "$s_admin" "$s_mesh" c "$c_mesh" \
	"{name: chat, listen: 127.0.0.1:$s_role, expose: true, serve_to: [c]}" \
	"{role: chat, runtime: openai, url: http://127.0.0.1:$up, model: bench}"
mesh_config "$BENCH_DIR/c.yaml" c "$c_admin" "$c_mesh" s "$s_mesh" \
	"{name: chat, listen: 127.0.0.1:$c_role, use_from: [s]}"
BENCH_NODELD="$bin" bench_start_nodeld s "$BENCH_DIR/s.yaml" "$s_admin"
BENCH_NODELD="$bin" bench_start_nodeld c "$BENCH_DIR/c.yaml" "$c_admin"

# Until C answers over the mesh (the route header names S).
small='{"model":"any","messages":[{"role":"user","content":"hi"}],"max_tokens":1}'
for i in $(seq 300); do
	if curl -s -o /dev/null -D "$BENCH_DIR/head" -H 'Content-Type: application/json' -d "$small" \
		"http://127.0.0.1:$c_role/v1/chat/completions" 2>/dev/null &&
		grep -q '^HTTP/1.1 200' "$BENCH_DIR/head" && grep -qi '^X-Nodeld-Route: n-' "$BENCH_DIR/head"; then
		break
	fi
	if [ "$i" = 300 ]; then
		echo "bench-mesh-memory: C never answered over the mesh" >&2
		tail -n 20 "$BENCH_DIR/s.log" "$BENCH_DIR/c.log" >&2
		exit 1
	fi
	sleep 0.1
done

echo "## bench-mesh-memory $(date -u +%Y-%m-%dT%H:%MZ), $(git -C "$BENCH_ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
echo
bench_machine
echo "- N=$N SSE streams over the mesh (C -> S -> upstream) of $CHUNKS chunks 1 s apart, ROUNDS=$ROUNDS, SETTLE=$SETTLE"
echo
echo "### C (the consumer; the streams enter at its role port)"
echo
bench_run "$BENCH_BIN/benchtool" streams -url "http://127.0.0.1:$c_role" -metrics "http://127.0.0.1:$c_admin/metrics" \
	-n "$N" -rounds "$ROUNDS" -chunks "$CHUNKS" -settle "$SETTLE" -gc "http://127.0.0.1:$c_admin/debug/pprof/heap?gc=1"
echo
echo "### Both nodes"
echo
# vm_kib NAME FIELD: a field of /proc/PID/status of a started process, kB.
vm_kib() { awk -v f="$2:" '$1 == f {print $2}' "/proc/${BENCH_PIDS[$1]}/status"; }
# outcomes URL METRIC: the metric's series, one "labels value" a line.
outcomes() {
	curl -sf "$1" | awk -v m="$2" 'index($1, m "{") == 1 {sub("^" m, "", $1); printf "%s %s; ", $1, $2}'
}
echo "| node | peak RSS (VmHWM) | RSS now | mesh requests by outcome | by transport |"
echo "|---|---|---|---|---|"
echo "| s (serving) | $(($(vm_kib s VmHWM) / 1024)) MB | $(($(vm_kib s VmRSS) / 1024)) MB | served: $(outcomes "http://127.0.0.1:$s_admin/metrics" nodeld_proxy_mesh_served_total) | $(outcomes "http://127.0.0.1:$s_admin/metrics" nodeld_proxy_mesh_transport_total) |"
echo "| c (consumer) | $(($(vm_kib c VmHWM) / 1024)) MB | $(($(vm_kib c VmRSS) / 1024)) MB | forwarded: $(outcomes "http://127.0.0.1:$c_admin/metrics" nodeld_proxy_mesh_forwarded_total) | $(outcomes "http://127.0.0.1:$c_admin/metrics" nodeld_proxy_mesh_transport_total) |"
