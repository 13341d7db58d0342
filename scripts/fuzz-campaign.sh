#!/usr/bin/env bash
# A fuzz campaign: every Fuzz target in the module, for a share of a total
# time budget (BUDGET seconds, default 3600), the decoders of network input
# first and with twice the share of the others (mesh frames and adverts,
# workload.ctl envelopes and params, the proxy's request and response
# heads, signed facts, manifests, notices, the chain). It prints one row per
# target (package, target, seconds, execs, new interesting inputs, result)
# and keeps any failing input where `go test -fuzz` writes it
# (<package>/testdata/fuzz/<Target>/), so the fix can keep it as a seed.
#
#   BUDGET=3600 bash scripts/fuzz-campaign.sh | tee fuzz-campaign.txt
#
# ONLY (an extended regexp matched against "<package> <target>") limits the
# campaign to some targets, e.g. ONLY='FuzzReadHead|FuzzPin'.
#
# Go 1.26's coordinator can report "context deadline exceeded" when a
# duration runs out while a worker is mid-input (golang/go#75804); such a
# run without a failing input is reported as "ok (deadline)", not a finding.
set -uo pipefail
cd "$(dirname "$0")/.."
budget="${BUDGET:-3600}"
network='internal/(mesh|ctl|proxy|chain)|internal/pkg .*(Manifest|Notice|Revocations|Requirements)|internal/facts .*(Verify|Capabilities)|internal/host'
list=$(mktemp)
trap 'rm -f "$list"' EXIT
for pkg in $(go list ./...); do
	for t in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true); do
		if [ -n "${ONLY:-}" ] && ! echo "$pkg $t" | grep -Eq "$ONLY"; then continue; fi
		w=1
		if echo "$pkg $t" | grep -Eq "$network"; then w=2; fi
		echo "$w $pkg $t" >>"$list"
	done
done
total=$(awk '{s+=$1} END {print s}' "$list")
status=0
printf '%-44s %-28s %6s %12s %6s %s\n' package target secs execs new result
while read -r w pkg t; do
	secs=$((budget * w / total))
	[ "$secs" -lt 10 ] && secs=10
	log=$(mktemp)
	go test -run '^$' -fuzz "^${t}\$" -fuzztime "${secs}s" "$pkg" >"$log" 2>&1
	rc=$?
	last=$(grep -E 'execs: [0-9]+' "$log" | tail -1)
	execs=$(echo "$last" | sed -nE 's/.*execs: ([0-9]+).*/\1/p')
	newi=$(echo "$last" | sed -nE 's/.*new interesting: ([0-9]+).*/\1/p')
	if [ $rc -eq 0 ]; then
		result=ok
	elif grep -q 'Failing input written to' "$log"; then
		result="FAIL: $(grep -m1 'Failing input written to' "$log" | sed 's/.*written to //')"
		status=1
	elif grep -q 'context deadline exceeded' "$log"; then
		result="ok (deadline)"
	else
		result="FAIL (see below)"
		cat "$log" >&2
		status=1
	fi
	printf '%-44s %-28s %6s %12s %6s %s\n' "${pkg#github.com/nodeld/nodeld/}" "$t" "$secs" "${execs:-?}" "${newi:-?}" "$result"
	rm -f "$log"
done < <(sort -k1,1nr -s "$list")
exit $status
