# shellcheck shell=bash
# Shell functions shared by the comparison benchmarks (bench-compare.sh,
# bench-memory.sh, and any script measuring nodeld against a baseline the
# same way). Source it from bash after `set -euo pipefail`, then call
# bench_init once. Everything runs on 127.0.0.1; every process started here
# is recorded and stopped by its pid when the script exits.
#
#   bench_init                   work dir $BENCH_DIR, bin dir $BENCH_BIN, cleanup trap
#   bench_install_tools          wrk and nginx from Debian (apt-get) when missing
#   bench_build                  $BENCH_BIN/nodeld and $BENCH_BIN/benchtool
#   bench_ports N                N free loopback ports, one a line
#   bench_start NAME CMD...      start CMD in the background, log $BENCH_DIR/NAME.log
#   bench_wait_http URL [SECS]   wait until URL answers 200
#   bench_start_upstream NAME PORT [FLAGS]   the fast Go upstream (benchtool upstream)
#   bench_start_nginx NAME PORT UPSTREAM_PORT   nginx, one worker, upstream keep-alive
#   bench_nodeld_config FILE ROLE_PORT ADMIN_PORT UPSTREAM_PORT [CONCURRENCY]
#                                a one-role config (role "chat", model "bench");
#                                BENCH_PPROF=1 adds admin.pprof: true
#   bench_start_nodeld NAME CONFIG ADMIN_PORT   nodeld run, waits for /readyz
#                                (BENCH_NODELD=FILE runs another nodeld binary)
#   bench_wrk ROUND PATH URL CONC SECS RESULTS  one wrk run (1 thread, keep-alive,
#                                the chat POST of bench-chat.lua) appended to RESULTS,
#                                with the CPU per request of the process started as
#                                PATH (bench_start), if any
#   bench_machine                the machine and tool versions, as markdown lines
#   bench_stop NAME              stop one started process
#   bench_run CMD...             run CMD at the benchmark's priority
#
# BENCH_NICE=N (e.g. -5; negative needs root) runs every process of the
# benchmark (upstream, proxies, wrk, benchtool) at that nice level, the
# same for every path, so builds and tests of other work on a shared
# machine disturb the comparison less.

BENCH_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
declare -A BENCH_PIDS=()

bench_init() {
	BENCH_DIR="$(mktemp -d /tmp/nodeld-bench.XXXXXX)"
	BENCH_BIN="$BENCH_DIR/bin"
	mkdir -p "$BENCH_BIN"
	trap bench_cleanup EXIT
	trap 'exit 130' INT TERM
}

bench_cleanup() {
	local name
	for name in "${!BENCH_PIDS[@]}"; do
		bench_stop "$name"
	done
	if [ -n "${BENCH_KEEP:-}" ]; then
		echo "bench: kept $BENCH_DIR" >&2
	else
		rm -rf "$BENCH_DIR"
	fi
}

bench_stop() {
	local pid="${BENCH_PIDS[$1]:-}"
	[ -n "$pid" ] || return 0
	unset "BENCH_PIDS[$1]"
	kill -TERM "$pid" 2>/dev/null || return 0
	local i
	for i in $(seq 50); do
		kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

bench_install_tools() {
	local missing=()
	command -v wrk >/dev/null || missing+=(wrk)
	command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || missing+=(nginx)
	command -v curl >/dev/null || missing+=(curl)
	[ ${#missing[@]} -eq 0 ] && return 0
	local sudo=""
	if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then sudo="sudo"; fi
	echo "bench: installing ${missing[*]} from Debian" >&2
	$sudo apt-get update -qq
	# policy-rc.d keeps the package from starting a system nginx on port 80.
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

bench_build() {
	(cd "$BENCH_ROOT" &&
		CGO_ENABLED=0 go build -trimpath -o "$BENCH_BIN/nodeld" ./cmd/nodeld &&
		CGO_ENABLED=0 go build -trimpath -o "$BENCH_BIN/benchtool" ./test/benchtool)
}

bench_ports() { "$BENCH_BIN/benchtool" freeports "$1"; }

bench_run() {
	if [ -n "${BENCH_NICE:-}" ]; then
		nice -n "$BENCH_NICE" "$@"
	else
		"$@"
	fi
}

# bench_start records the process's own pid ($! of a simple command, or of
# nice, which execs it), so bench_stop and bench_cpu reach the process itself.
bench_start() {
	local name="$1"
	shift
	if [ -n "${BENCH_NICE:-}" ]; then
		nice -n "$BENCH_NICE" "$@" >"$BENCH_DIR/$name.log" 2>&1 &
	else
		"$@" >"$BENCH_DIR/$name.log" 2>&1 &
	fi
	BENCH_PIDS[$name]=$!
}

bench_wait_http() {
	local url="$1" secs="${2:-30}" i
	for i in $(seq $((secs * 10))); do
		if [ "$(curl -s -o /dev/null -w '%{http_code}' "$url" 2>/dev/null)" = 200 ]; then
			return 0
		fi
		sleep 0.1
	done
	echo "bench: $url did not answer 200 within ${secs}s" >&2
	return 1
}

bench_start_upstream() {
	local name="$1" port="$2"
	shift 2
	bench_start "$name" "$BENCH_BIN/benchtool" upstream -listen "127.0.0.1:$port" "$@"
	bench_wait_http "http://127.0.0.1:$port/health"
}

bench_start_nginx() {
	local name="$1" port="$2" up="$3" dir="$BENCH_DIR/$1"
	mkdir -p "$dir/tmp"
	cat >"$dir/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 8192; }
http {
    access_log off;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    keepalive_requests 1000000;
    upstream up {
        server 127.0.0.1:$up;
        keepalive 256;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:$port;
        location / {
            proxy_pass http://up;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }
    }
}
EOF
	local bin
	bin="$(command -v nginx || echo /usr/sbin/nginx)"
	bench_start "$name" "$bin" -p "$dir" -c "$dir/nginx.conf"
	bench_wait_http "http://127.0.0.1:$port/health"
}

bench_nodeld_config() {
	local file="$1" role="$2" admin="$3" up="$4" conc="${5:-256}"
	cat >"$file" <<EOF
node:
  data_dir: $BENCH_DIR/nodeld-data-$role
log:
  level: warn
  format: json
admin:
  listen: 127.0.0.1:$admin
$([ -n "${BENCH_PPROF:-}" ] && echo "  pprof: true")
inference:
  roles:
    - name: chat
      listen: 127.0.0.1:$role
  instances:
    - role: chat
      runtime: openai
      url: http://127.0.0.1:$up
      model: bench
  probe_interval: 1s
  limits:
    concurrency: $conc
EOF
}

bench_start_nodeld() {
	local name="$1" config="$2" admin="$3"
	bench_start "$name" "${BENCH_NODELD:-$BENCH_BIN/nodeld}" run --config "$config"
	bench_wait_http "http://127.0.0.1:$admin/readyz"
}

# bench_cpu PID...: the CPU time (user + system) the processes used so far,
# in clock ticks.
bench_cpu() {
	local pid total=0 f
	for pid in "$@"; do
		f="$(cut -d')' -f2 "/proc/$pid/stat" 2>/dev/null)" || continue
		total=$((total + $(echo "$f" | awk '{print $12 + $13}')))
	done
	echo "$total"
}

# bench_pids NAME: the pids of a started process and its children (nginx's
# worker), for bench_cpu.
bench_pids() {
	local pid="${BENCH_PIDS[$1]}"
	echo "$pid" $(pgrep -P "$pid" 2>/dev/null || true)
}

bench_wrk() {
	local round="$1" path="$2" url="$3" conc="$4" secs="$5" results="$6" out line
	local pids=() cpu0=0 cpu1 cpu_us=0
	[ -n "${BENCH_PIDS[$path]:-}" ] && [ "$path" != upstream ] && read -ra pids <<<"$(bench_pids "$path")"
	[ ${#pids[@]} -gt 0 ] && cpu0="$(bench_cpu "${pids[@]}")"
	out="$(bench_run wrk -t1 -c"$conc" -d"${secs}s" --timeout 10s -s "$BENCH_ROOT/scripts/bench-chat.lua" "$url/v1/chat/completions")"
	line="$(printf '%s\n' "$out" | sed -n 's/^RESULT //p')"
	if [ -z "$line" ]; then
		printf '%s\n' "$out" >&2
		echo "bench: wrk printed no RESULT line for $path" >&2
		return 1
	fi
	if [ ${#pids[@]} -gt 0 ]; then
		cpu1="$(bench_cpu "${pids[@]}")"
		# ticks (1/CLK_TCK s) over requests (rate x seconds), in microseconds
		cpu_us="$(awk -v d=$((cpu1 - cpu0)) -v hz="$(getconf CLK_TCK)" -v l="$line" -v s="$secs" \
			'BEGIN { split(l, f, " "); if (f[3] > 0) printf "%.1f", d / hz * 1e6 / (f[3] * s); else print 0 }')"
	fi
	printf '%s %s %s %s %s\n' "$round" "$path" "$conc" "$line" "$cpu_us" >>"$results"
}

bench_machine() {
	local cpu
	cpu="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
	echo "- machine: $(nproc) CPUs ($cpu), $(free -g | awk '/^Mem:/ {print $2}') GiB, $(uname -sr)"
	echo "- $(go version | cut -d' ' -f3-4), $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2), $( (command -v nginx >/dev/null && nginx -v || /usr/sbin/nginx -v) 2>&1)"
	echo "- load average before the run: $(cut -d' ' -f1-3 /proc/loadavg)"
}
