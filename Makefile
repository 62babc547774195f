# Swell's build and test entry points. `make test` is what CI runs.
GO ?= go
BIN ?= bin

.PHONY: all build test vet unit bench demo clean

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/... ./examples/hello

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
	$(GO) run ./hack/bench

clean:
	rm -rf $(BIN)
