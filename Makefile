# nodeld. `make run` starts a node on the embedded default config;
# `make test` runs every test (vet, race tests, short fuzzing);
# `make build && sudo make install` installs it for systemd.
GO        ?= go
BIN       := build/nodeld
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.version=$(VERSION)
# Every nodeld binary is built without cgo: static, no dynamic loader and no
# libc, so one file runs on any Linux of its architecture. The pure-Go DNS
# resolver and group lookup (/etc/group, no NSS) are all nodeld needs. Only
# the build recipes set CGO_ENABLED: the race detector in `make test` needs cgo.
BUILDFLAGS := -trimpath -ldflags '$(LDFLAGS)'
FUZZTIME  ?= 3000x
BENCHTIME ?= 1x

# Where `make install` puts things, under DESTDIR (empty: this host; a
# scratch root when staging a package). The unit, sysusers.d and tmpfiles.d
# files go where systemd looks whatever PREFIX is. The config directory is
# not a variable: the unit's ConfigurationDirectory= and --config fix it.
DESTDIR     ?=
PREFIX      ?= /usr/local
BINDIR      ?= $(PREFIX)/bin
DOCDIR      ?= $(PREFIX)/share/doc/nodeld
UNITDIR     ?= /usr/lib/systemd/system
SYSUSERSDIR ?= /usr/lib/sysusers.d
TMPFILESDIR ?= /usr/lib/tmpfiles.d
CONFDIR     := /etc/nodeld

# `make release` cross-builds these GOOS/GOARCH targets (darwin/arm64: Apple
# silicon, where mlx-lm runs) into RELEASE_DIR.
RELEASE_TARGETS ?= linux/amd64 linux/arm64 darwin/arm64
RELEASE_DIR     ?= build/release
SHA256SUM       ?= $(shell command -v sha256sum >/dev/null 2>&1 && echo sha256sum || echo 'shasum -a 256')

.PHONY: all build run test test-deps fuzz bench bench-compare bench-memory lint clean example-package install uninstall release

all: build

build:
	CGO_ENABLED=0 $(GO) build $(BUILDFLAGS) -o $(BIN) ./cmd/nodeld

run: build
	$(BIN) run

# test-deps installs what the tests drive besides Go: promtool (Debian's
# prometheus package) for the /metrics check, the official openai npm
# client for the end-to-end client test, Debian's chromium for the fleet
# page's browser test, and the others scripts/test-deps.sh lists. It is a
# no-op when they are there.
test-deps:
	bash scripts/test-deps.sh

# A -race binary sleeps a second when it exits (the race runtime's
# atexit_sleep_ms, for goroutines still running to race): every test
# binary, and every -race nodeld the tests run and stop, would pay it.
# GORACE options of the caller come after, so they win.
RACE_ENV := GORACE="atexit_sleep_ms=0 $(GORACE)"

test: test-deps
	$(GO) vet ./...
	$(RACE_ENV) $(GO) test -race -count=1 -timeout 12m ./...  # cmd/nodeld is the longest package: BENCHMARKS.md "Test time"
	$(RACE_ENV) NODELD_TEST_INFER_TRANSPORT=quic $(GO) test -race -count=1 ./internal/meshproxy  # inference over QUIC too
	$(GO) test -count=1 ./internal/httpfast ./internal/tlspool  # httpfast.RawIO's raw system calls, which -race swaps for package syscall's
	FUZZTIME=$(FUZZTIME) bash scripts/fuzz.sh

fuzz:
	FUZZTIME=$(or $(FUZZ),100000x) bash scripts/fuzz.sh

# faults runs the fault suite (test/faults, build tag faults; see
# docs/reliability.md): nodeld processes in network namespaces (five, then
# six with three controllers in raft), faults
# injected while a client drives a role port, one table of what was
# promised and what happened. Needs root (namespaces, mounts) and iproute2;
# about two minutes. NODELD_FAULTS_REQUIRE=1 makes "cannot run here" a failure.
.PHONY: faults
faults:
	bash scripts/test-deps.sh faults
	$(GO) vet -tags faults ./test/faults/
	$(GO) test -tags faults -race -count=1 -timeout 10m -v ./test/faults/

# demo starts three nodes (network namespaces as root, else loopback
# processes), lets A's controller place the echo-llm package on B, prints
# which node answers a client's requests, kills B with SIGKILL and narrates
# the move to A; under a minute. It exits non-zero if the workload does not
# move or runs twice, and removes everything it made (also on Ctrl-C).
# See test/demo and README "See it move". DEMO_FLAGS='-mode loopback' runs
# the processes on loopback also as root; DEMO_FLAGS=-keep keeps the temp dir.
.PHONY: demo
demo: example-package
	$(GO) build -o build/demo ./test/demo
	build/demo -nodeld $(BIN) -package build/packages/echo-llm $(DEMO_FLAGS)

# bench-mesh measures the mesh hop (a consumer's role port -> QUIC -> a
# serving node -> a fast upstream) against the direct path, the local
# proxy and two nginx over TLS 1.3 (NGINX=0 skips them), two nodeld
# processes on loopback, interleaved rounds (wrk, nginx and openssl from
# Debian when missing). See scripts/bench-mesh.sh for its knobs.
.PHONY: bench-mesh
bench-mesh:
	bash scripts/bench-mesh.sh

# bench-mesh-memory holds 1,000 SSE streams over the mesh (two nodes on
# loopback) and prints each node's peak resident memory and the failures.
# See scripts/bench-mesh-memory.sh for its knobs.
.PHONY: bench-mesh-memory
bench-mesh-memory:
	bash scripts/bench-mesh-memory.sh

# bench runs every benchmark, one package at a time (-p 1) so that they do
# not fight each other for the cores; among them BenchmarkOnDemandColdStart
# (about two minutes: see bench-cold) and BenchmarkLeaderFailover (about 20
# s: see bench-raft).
bench:
	$(GO) test -p 1 -run '^$$' -bench . -benchmem -count=1 -timeout 30m ./...

# bench-cold runs only BenchmarkOnDemandColdStart: three nodeld processes on
# loopback, 20 cold starts of an on-demand echo-llm loading for 1 s, placed
# by A's controller on B and asked for on C's role port; it prints the
# medians and p90 of ready -> host notice -> first byte (BENCHMARKS.md
# "Cold start on demand") and fails when a median breaks issue 24's bound.
.PHONY: bench-cold
bench-cold:
	$(GO) test -run '^$$' -bench '^BenchmarkOnDemandColdStart$$' -benchtime 1x -count=1 -timeout 20m -v ./cmd/nodeld/

# bench-raft runs only BenchmarkLeaderFailover: three in-process raft voters
# (LANConfig) over real meshes on loopback, 20 leader kills (socket first,
# then raft; the killed node restarted from its data dir each round); it
# prints the median and max time to a new leader (BENCHMARKS.md "Raft
# failover"). go test without -bench, as make test runs it, never runs it.
.PHONY: bench-raft
bench-raft:
	$(GO) test -run '^$$' -bench '^BenchmarkLeaderFailover$$' -benchtime 1x -count=1 -timeout 10m -v ./internal/raftmesh/

# bench-compare measures a role port against nginx and a direct connection
# in one run (wrk and nginx are installed from Debian when missing); its
# table goes in BENCHMARKS.md. See scripts/bench-compare.sh for its knobs.
bench-compare:
	bash scripts/bench-compare.sh

# bench-memory holds 1,000 SSE streams through one role port, five rounds in
# a row, and prints nodeld's RSS and goroutines idle, at peak and after each.
bench-memory:
	bash scripts/bench-memory.sh

# soak holds 1,000 SSE streams through a role port and 1,000 through
# another node's role port over the mesh for SOAK_DURATION (10m), with a
# controller ticking, and fails on a failed stream, RSS or goroutines
# rising beyond noise, or a chain growing faster; not in CI (it loads the
# machine for the whole run). See scripts/soak.sh; figures in BENCHMARKS.md.
.PHONY: soak
soak:
	bash scripts/soak.sh

lint:
	$(GO) vet ./...
	@if command -v staticcheck >/dev/null 2>&1; then staticcheck ./...; else echo "staticcheck not installed; skipped (go install honnef.co/go/tools/cmd/staticcheck@latest)"; fi

clean:
	rm -rf build

# install copies what `make build` made (or BIN=FILE, e.g. a release binary)
# and the systemd files; it builds nothing, so `sudo make install` does not
# need Go on root's PATH nor leave root-owned files in build/. It starts and
# enables nothing, and never overwrites an existing /etc/nodeld/nodeld.yaml
# (the example stays in DOCDIR to compare with after an upgrade).
install:
	@test -f '$(BIN)' || { echo >&2 "$(BIN) does not exist: run make build first (as yourself), then make install"; exit 1; }
	install -D -m 0755 '$(BIN)' '$(DESTDIR)$(BINDIR)/nodeld'
	install -d '$(DESTDIR)$(UNITDIR)'
	sed -e 's|/usr/local/bin/nodeld|$(BINDIR)/nodeld|' \
	    -e 's|/usr/local/share/doc/nodeld|$(DOCDIR)|' \
	    deploy/systemd/nodeld.service > '$(DESTDIR)$(UNITDIR)/.nodeld.service.tmp'
	chmod 0644 '$(DESTDIR)$(UNITDIR)/.nodeld.service.tmp'
	mv -f '$(DESTDIR)$(UNITDIR)/.nodeld.service.tmp' '$(DESTDIR)$(UNITDIR)/nodeld.service'
	install -D -m 0644 deploy/systemd/nodeld.sysusers '$(DESTDIR)$(SYSUSERSDIR)/nodeld.conf'
	install -D -m 0644 deploy/systemd/nodeld.tmpfiles '$(DESTDIR)$(TMPFILESDIR)/nodeld.conf'
	install -D -m 0644 README.md '$(DESTDIR)$(DOCDIR)/README.md'
	install -D -m 0644 configs/nodeld.yaml '$(DESTDIR)$(DOCDIR)/nodeld.yaml'
	@if [ -e '$(DESTDIR)$(CONFDIR)/nodeld.yaml' ] || [ -L '$(DESTDIR)$(CONFDIR)/nodeld.yaml' ]; then \
		echo "kept $(DESTDIR)$(CONFDIR)/nodeld.yaml: an existing config is never overwritten (the new example is $(DOCDIR)/nodeld.yaml)"; \
	else \
		set -e; \
		[ -d '$(DESTDIR)$(CONFDIR)' ] || install -d -m 0750 '$(DESTDIR)$(CONFDIR)'; \
		install -m 0640 configs/nodeld.yaml '$(DESTDIR)$(CONFDIR)/nodeld.yaml'; \
		echo "installed the example config as $(DESTDIR)$(CONFDIR)/nodeld.yaml: edit it"; \
	fi
	@echo
	@echo "Installed; nothing was started or enabled. Next, as root:"
	@echo "  systemd-sysusers nodeld.conf              # the nodeld user and group"
	@echo "  systemd-tmpfiles --create nodeld.conf     # $(CONFDIR) root:nodeld 0750, its config 0640"
	@echo "  $(BINDIR)/nodeld config check $(CONFDIR)/nodeld.yaml"
	@echo "  systemctl daemon-reload"
	@echo "  systemctl enable --now nodeld"

# uninstall removes what install put outside /etc. It keeps /etc/nodeld (the
# config), /var/lib/nodeld (key, audit chain, packages) and the nodeld user:
# stop the service first (systemctl disable --now nodeld).
uninstall:
	rm -f '$(DESTDIR)$(BINDIR)/nodeld' '$(DESTDIR)$(UNITDIR)/nodeld.service' \
	      '$(DESTDIR)$(SYSUSERSDIR)/nodeld.conf' '$(DESTDIR)$(TMPFILESDIR)/nodeld.conf' \
	      '$(DESTDIR)$(DOCDIR)/README.md' '$(DESTDIR)$(DOCDIR)/nodeld.yaml'
	@rmdir '$(DESTDIR)$(DOCDIR)' 2>/dev/null || true
	@echo
	@echo "Removed. Kept $(CONFDIR) (config), /var/lib/nodeld (key, audit chain, packages)"
	@echo "and the nodeld user; delete them by hand if you mean to. Then: systemctl daemon-reload"

# release builds one static binary per target, nodeld-VERSION-GOOS-GOARCH,
# and SHA256SUMS over them (check with sha256sum -c SHA256SUMS). It first
# removes the nodeld-* files and SHA256SUMS a previous release left there.
release:
	mkdir -p '$(RELEASE_DIR)'
	rm -f '$(RELEASE_DIR)'/nodeld-* '$(RELEASE_DIR)/SHA256SUMS'
	@for t in $(RELEASE_TARGETS); do \
		os=$${t%/*}; arch=$${t#*/}; out='$(RELEASE_DIR)'/nodeld-$(VERSION)-$$os-$$arch; \
		echo "CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build $(BUILDFLAGS) -o $$out ./cmd/nodeld"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build $(BUILDFLAGS) -o "$$out" ./cmd/nodeld || exit 1; \
	done
	cd '$(RELEASE_DIR)' && $(SHA256SUM) nodeld-$(VERSION)-* > SHA256SUMS
	@cat '$(RELEASE_DIR)/SHA256SUMS'

# example-package builds the echo-llm example into build/packages/echo-llm/
# with its manifest, ready to sign (nodeld package sign --key K DIR).
# ECHO_LOAD_DELAY (how long it takes to "load its model": /health answers
# 503 loading until then) and ECHO_MEM_BYTES (the memory its manifest
# declares, what the controller fits on a node) let it stand in for a model;
# ECHO_ID (the package id and its directory under build/packages/),
# ECHO_ROLE and ECHO_MODEL make several different ones.
ECHO_LOAD_DELAY ?= 0s
ECHO_MEM_BYTES  ?= 67108864
ECHO_ID         ?= echo-llm
ECHO_ROLE       ?= chat
ECHO_MODEL      ?= echo-1
example-package: build
	rm -rf 'build/packages/$(ECHO_ID)' && mkdir -p 'build/packages/$(ECHO_ID)'
	$(GO) build -trimpath -o 'build/packages/$(ECHO_ID)/echo-llm' ./examples/packages/echo-llm
	sed -e 's/"--load-delay", "0s"/"--load-delay", "$(ECHO_LOAD_DELAY)"/' -e 's/"mem_bytes": 67108864/"mem_bytes": $(ECHO_MEM_BYTES)/' \
		-e 's/"id": "echo-llm"/"id": "$(ECHO_ID)"/' -e 's/"role": "chat"/"role": "$(ECHO_ROLE)"/' -e 's/"--model", "echo-1"/"--model", "$(ECHO_MODEL)"/' \
		examples/packages/echo-llm/manifest.template.json >'build/packages/$(ECHO_ID).template.json'
	$(BIN) package build --manifest 'build/packages/$(ECHO_ID).template.json' 'build/packages/$(ECHO_ID)'
