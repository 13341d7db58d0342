#!/usr/bin/env bash
# Installs what nodeld's tests need besides Go, when it is missing:
#   promtool      Debian package "prometheus" (checks /metrics exposition)
#   openai (npm)  the official OpenAI Node client, in test/e2e/node_modules
#   systemd       systemd-analyze, systemd-sysusers, systemd-tmpfiles: the
#                 unit, sysusers.d and tmpfiles.d files are checked with them
#   chromium      Debian's chromium: the fleet page's browser test
#                 (TestFleetPageInChromium, /usr/bin/chromium)
#   ip            Debian package iproute2: the fault suite's namespaces
#                 (with the argument "faults", only this one is checked)
# Needs root (or sudo) for apt-get and network access to Debian and npm.
set -euo pipefail
cd "$(dirname "$0")/.."

sudo=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then sudo="sudo"; fi

apt_install() {
	if [ -z "${APT_UPDATED:-}" ]; then
		$sudo apt-get update -qq
		APT_UPDATED=1
	fi
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

if ! command -v ip >/dev/null; then
	echo "test-deps: installing iproute2 (ip: network namespaces for the fault suite)"
	apt_install iproute2
fi
if [ "${1:-}" = faults ]; then
	exit 0
fi
if ! command -v promtool >/dev/null; then
	echo "test-deps: installing promtool (Debian package prometheus)"
	apt_install prometheus
fi
if ! command -v curl >/dev/null; then
	echo "test-deps: installing curl"
	apt_install curl
fi
if ! command -v systemd-analyze >/dev/null || ! command -v systemd-sysusers >/dev/null; then
	echo "test-deps: installing systemd (systemd-analyze, systemd-sysusers, systemd-tmpfiles)"
	apt_install systemd
fi
if [ ! -x /usr/bin/chromium ]; then
	echo "test-deps: installing chromium (the fleet page's browser test)"
	apt_install chromium
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	echo "test-deps: installing nodejs and npm"
	apt_install nodejs npm
fi
if [ ! -f test/e2e/node_modules/openai/package.json ]; then
	echo "test-deps: installing the openai npm client into test/e2e"
	(cd test/e2e && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
