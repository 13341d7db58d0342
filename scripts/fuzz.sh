#!/usr/bin/env bash
# Runs every Fuzz target in the module for FUZZTIME each (default 3000x:
# three thousand inputs). The seed corpora already run as unit tests in
# `go test`; this adds a short coverage-guided run so a new crasher shows
# up in `make test`. The budget is a count, not a duration: with a
# duration, Go 1.26's fuzz coordinator can report a spurious "context
# deadline exceeded" failure when the time runs out while a worker is
# mid-input on a loaded machine (golang/go#75804, fixed in Go 1.27).
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-3000x}"
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
