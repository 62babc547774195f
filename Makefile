# Swell's build and test entry points. `make test` is what CI runs.
GO ?= go
BIN ?= bin

.PHONY: all build test vet fmt-check staticcheck tidy-check unit fuzz bench clean swell-cluster e2e cluster-up cluster-down

all: build

# Release builds: static and without symbol tables, which also keeps the
# resident set small (docs/performance.md).
RELEASE_FLAGS ?= -trimpath -ldflags "-s -w"

build:
	CGO_ENABLED=0 $(GO) build $(RELEASE_FLAGS) -o $(BIN)/ ./cmd/... ./cmd/hello

## test: everything that must pass — vet, formatting, static analysis,
## tidy modules, race-enabled tests, and every fuzzer for a bounded time.
test: vet fmt-check staticcheck tidy-check unit fuzz

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

unit:
	$(GO) test -race -count=1 -timeout 20m ./...

## fuzz: every fuzz target of the module for FUZZTIME each (its seed corpus
## also runs in `unit`). A failing input is written under the package's
## testdata/fuzz/, where the next `go test` replays it.
FUZZTIME ?= 10s
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "fuzz $$pkg $$target ($(FUZZTIME))"; \
	    $(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

## bench: the benchmark harness (docs/performance.md) and Go benchmarks.
bench:
	$(GO) run ./hack/bench -gobench

## e2e: the harness's own tests, then a real Kubernetes control plane and
## node agent (hack/cluster, its own module) and the end-to-end suite
## against it, all torn down after. The first run builds etcd and
## Kubernetes from the module proxy (cached after). Needs root (network
## namespaces) and iproute2.
CLUSTER ?= dev

# Built rather than run with `go run`, which would delete the binary the
# node agent runs from.
swell-cluster:
	cd hack/cluster && CGO_ENABLED=0 $(GO) build -o $(CURDIR)/$(BIN)/swell-cluster ./cmd/swell-cluster

e2e: swell-cluster
	cd hack/cluster && $(GO) vet ./... && $(GO) test -race -count=1 ./...
	cd hack/cluster && $(CURDIR)/$(BIN)/swell-cluster e2e

## cluster-up / cluster-down: keep a cluster named $(CLUSTER) up while
## working; `bin/swell-cluster exec --name $(CLUSTER) -- kubectl get pods`.
cluster-up: swell-cluster
	cd hack/cluster && $(CURDIR)/$(BIN)/swell-cluster up --name $(CLUSTER)

cluster-down: swell-cluster
	$(BIN)/swell-cluster down --name $(CLUSTER)

## staticcheck: static analysis, at the version pinned as a tool in go.mod;
## staticcheck.conf says which check is off and why.
## tidy-check: fails when go.mod and go.sum of either module (the main one,
## hack/cluster) are not what `go mod tidy` would make them.

staticcheck:
	$(GO) tool staticcheck ./...

tidy-check:
	$(GO) mod tidy -diff
	cd hack/cluster && $(GO) mod tidy -diff

clean:
	rm -rf $(BIN)
