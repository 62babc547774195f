# Swell's build and test entry points. `make test` is what CI runs.
GO ?= go
BIN ?= bin

.PHONY: all build test vet fmt-check unit bench clean

all: build

# Release builds: static and without symbol tables, which also keeps the
# resident set small (docs/performance.md).
RELEASE_FLAGS ?= -trimpath -ldflags "-s -w"

build:
	CGO_ENABLED=0 $(GO) build $(RELEASE_FLAGS) -o $(BIN)/ ./cmd/... ./examples/hello

## test: everything that must pass — vet, formatting, race-enabled tests.
test: vet fmt-check unit

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

unit:
	$(GO) test -race -count=1 -timeout 20m ./...

## bench: the benchmark harness (docs/performance.md) and Go benchmarks.
bench:
	$(GO) run ./hack/bench -gobench

clean:
	rm -rf $(BIN)
