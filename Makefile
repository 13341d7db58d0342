# nodeld. `make run` starts a node on the embedded default config;
# `make test` runs every test (vet, race tests, short fuzzing).
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

.PHONY: all build run test test-deps fuzz bench lint clean example-package

all: build

build:
	CGO_ENABLED=0 $(GO) build $(BUILDFLAGS) -o $(BIN) ./cmd/nodeld

run: build
	$(BIN) run

# test-deps installs what the tests drive besides Go: promtool (Debian's
# prometheus package) for the /metrics check and the official openai npm
# client for the end-to-end client test. It is a no-op when both are there.
test-deps:
	bash scripts/test-deps.sh

test: test-deps
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 8m ./...
	FUZZTIME=$(FUZZTIME) bash scripts/fuzz.sh

fuzz:
	FUZZTIME=$(or $(FUZZ),100000x) bash scripts/fuzz.sh

bench:
	$(GO) test -run '^$$' -bench . -benchmem -count=1 ./...

lint:
	$(GO) vet ./...
	@if command -v staticcheck >/dev/null 2>&1; then staticcheck ./...; else echo "staticcheck not installed; skipped (go install honnef.co/go/tools/cmd/staticcheck@latest)"; fi

clean:
	rm -rf build

# example-package builds the echo-llm example into build/packages/echo-llm/
# with its manifest, ready to sign (nodeld package sign --key K DIR).
example-package: build
	rm -rf build/packages/echo-llm && mkdir -p build/packages/echo-llm
	$(GO) build -trimpath -o build/packages/echo-llm/echo-llm ./examples/packages/echo-llm
	$(BIN) package build --manifest examples/packages/echo-llm/manifest.template.json build/packages/echo-llm
