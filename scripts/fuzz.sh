#!/usr/bin/env bash
# Runs every Fuzz target in the module for FUZZTIME each (default 3000x:
# three thousand inputs). The seed corpora already run as unit tests in
# `go test`; this adds a short coverage-guided run so a new crasher shows
# up in `make test`. The budget is a count, not a duration: with a
# duration, Go 1.26's fuzz coordinator can report a spurious "context
# deadline exceeded" failure when the time runs out while a worker is
# mid-input on a loaded machine (golang/go#75804, fixed in Go 1.27).
#
# Each package with Fuzz targets is built once, instrumented for fuzzing
# (go test -c -fuzz), instead of once per target; then FUZZ_JOBS targets
# (default 2) run at once, each for the whole FUZZTIME, from the package's
# directory (its testdata/fuzz corpus, where a crasher is written). Any
# failure fails the script, naming the target and the crasher's path;
# every target still runs. FUZZ_JOBS=1 runs them one after another;
# FUZZ_PKGS (default ./...) picks the packages.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-3000x}"
jobs="${FUZZ_JOBS:-2}"
case "$jobs" in
'' | *[!0-9]* | 0) echo >&2 "fuzz: FUZZ_JOBS must be a positive integer, not '$jobs'"; exit 2 ;;
esac
# The fuzzing cache of `go test -fuzz`: inputs that widened coverage,
# kept between runs.
cachedir="$(go env GOCACHE)/fuzz"
work=$(mktemp -d "${TMPDIR:-/tmp}/nodeld-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The packages whose test files declare a Fuzz function (a grep, so that
# packages without one are not built).
pkgs=()
while read -r pkg dir files; do
	[ -n "$files" ] || continue
	if (cd "$dir" && grep -lqE '^func Fuzz[A-Za-z0-9_]*\(' $files); then
		pkgs+=("$pkg $dir")
	fi
done < <(go list -f '{{.ImportPath}} {{.Dir}} {{join .TestGoFiles " "}} {{join .XTestGoFiles " "}}' ${FUZZ_PKGS:-./...})

# build_one PKG DIR builds PKG's instrumented test binary and lists its
# targets into the work directory.
build_one() {
	local pkg=$1 dir=$2 name bin
	name=$(echo "$pkg" | tr '/.' '__')
	bin="$work/$name.test"
	if ! go test -c -fuzz=. -o "$bin" "$pkg" >"$work/$name.build.log" 2>&1; then
		echo "fuzz: build $pkg failed:"
		cat "$work/$name.build.log"
		return 1
	fi
	(cd "$dir" && "$bin" -test.list '^Fuzz') | { grep '^Fuzz' || true; } | while read -r t; do
		echo "$pkg $dir $bin $t"
	done >"$work/$name.targets"
}

# run_one PKG DIR BIN TARGET fuzzes one target and reports it.
run_one() {
	local pkg=$1 dir=$2 bin=$3 t=$4 log start rc=0
	log="$work/$(basename "$bin" .test).$t.log"
	start=$SECONDS
	(cd "$dir" && "$bin" -test.run '^$' -test.fuzz "^${t}\$" -test.fuzztime "$fuzztime" \
		-test.fuzzcachedir "$cachedir/$pkg" -test.timeout 10m -test.paniconexit0) >"$log" 2>&1 || rc=$?
	if [ "$rc" -eq 0 ]; then
		echo "fuzz: ok   $pkg $t ($fuzztime, $((SECONDS - start))s)"
		return 0
	fi
	cat "$log"
	# The fuzzer writes a failing input under the package's testdata/fuzz
	# and says so ("Failing input written to testdata/fuzz/FuzzX/ID").
	local crasher
	crasher=$(sed -n 's/.*Failing input written to \(testdata\/fuzz\/[^ ]*\).*/\1/p' "$log" | head -n1)
	if [ -n "$crasher" ]; then
		echo "fuzz: FAIL $pkg $t: crasher $dir/$crasher (go test -run '$t/$(basename "$crasher")' $pkg)"
	else
		echo "fuzz: FAIL $pkg $t (exit $rc, no crasher written; the log is above)"
	fi
	return 1
}

# run_all FUNC: runs FUNC on each line of stdin (its words as arguments),
# $jobs at once; fails if any run failed, after all ran.
run_all() {
	local fn=$1 failed=0 running=0 line
	while read -r line; do
		[ -n "$line" ] || continue
		# shellcheck disable=SC2086 # the words of a line are the arguments
		$fn $line &
		if ((++running >= jobs)); then
			wait -n || failed=1
			((running--))
		fi
	done
	while ((running > 0)); do
		wait -n || failed=1
		((running--))
	done
	return $failed
}

status=0
start=$SECONDS
# The first build alone: it compiles the instrumented dependencies the
# others share (the build cache is not shared between two go commands
# compiling the same package at once).
if [ "${#pkgs[@]}" -gt 0 ]; then
	# shellcheck disable=SC2086 # "package dir" are build_one's arguments
	build_one ${pkgs[0]} || status=1
	printf '%s\n' "${pkgs[@]:1}" | run_all build_one || status=1
fi
cat "$work"/*.targets >"$work/all" 2>/dev/null || true
count=$(wc -l <"$work/all")
echo "fuzz: built ${#pkgs[@]} packages in $((SECONDS - start))s; $count targets, $jobs at once, $fuzztime each"
run_all run_one <"$work/all" || status=1
echo "fuzz: $count targets in $((SECONDS - start))s"
exit $status
