#!/usr/bin/env bash
# Runs every Fuzz target in the module for FUZZTIME (default 3s) each.
# The seed corpora already run as unit tests in `go test`; this adds a
# short coverage-guided run so a new crasher shows up in `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-3s}"
status=0
for pkg in $(go list ./...); do
	targets=$(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true)
	for t in $targets; do
		echo "fuzz: $pkg $t ($fuzztime)"
		if ! go test -run '^$' -fuzz "^${t}\$" -fuzztime "$fuzztime" "$pkg" >/tmp/nodeld-fuzz.log 2>&1; then
			cat /tmp/nodeld-fuzz.log
			status=1
		fi
	done
done
exit $status
