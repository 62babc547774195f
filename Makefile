# Swell's build and test entry points. `make test` is what CI runs.
GO ?= go
BIN ?= bin

.PHONY: all build test vet fmt-check staticcheck actionlint tidy-check chart unit fuzz bench soak images push clean swell-cluster e2e chaos scale-cluster cluster-up cluster-down

all: build

# Release builds: static and without symbol tables, which also keeps the
# resident set small (docs/performance.md).
RELEASE_FLAGS ?= -trimpath -ldflags "-s -w"

## build: every binary into $(BIN), and $(BIN)/kubectl-swell, the swell
## command line under the name kubectl runs as its plugin (`kubectl swell
## status`, docs/status.md).
build:
	CGO_ENABLED=0 $(GO) build $(RELEASE_FLAGS) -o $(BIN)/ ./cmd/... ./cmd/hello
	cp $(BIN)/swell $(BIN)/kubectl-swell

## chart: Swell's Helm chart (deploy/chart), linted by the Helm that
## hack/helm pins as a Go tool (a module of its own, so that Helm's
## dependencies never choose the versions Swell's binaries link), and its
## tests: it renders deploy/'s objects, its values do what they say, its
## schema refuses what it does not know, and Helm pulls it from a registry
## as `make push` pushes it.
HELM = $(GO) -C hack/helm tool helm
chart:
	$(HELM) lint --strict $(CURDIR)/deploy/chart
	cd hack/helm && $(GO) vet ./... && $(GO) test -count=1 ./...

## test: everything that must pass — vet, formatting, static analysis,
## the workflows' lint, tidy modules, the Helm chart's lint and tests,
## race-enabled tests, the images' build, and every fuzzer for a bounded
## time.
test: vet fmt-check staticcheck actionlint tidy-check chart unit fuzz

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# The images' test builds every image, twice (the hello image for two
# platforms, the others for one: docs/images.md); on cold
# caches that is most of a cold run's compiling, so it runs on its own,
# after the race-enabled tests, with a bound of its own (the race detector
# would only slow the builds it drives).
unit:
	$(GO) test -race -count=1 -timeout 20m $$($(GO) list ./... | grep -v '/hack/images$$')
	$(GO) test -count=1 -timeout 45m ./hack/images

## fuzz: every fuzz target of the module for FUZZTIME each (its seed corpus
## also runs in `unit`): a count of executions, not a duration, since at
## the end of a duration Go 1.26's fuzzing coordinator can fail a target on
## a loaded machine with "context deadline exceeded" and no input at fault
## (golang/go#75804, fixed in Go 1.27). A failing input is written under the
## package's testdata/fuzz/, where the next `go test` replays it; a run that
## fails without writing one failed in the engine, not the target, and is
## run once more before it counts.
FUZZTIME ?= 40000x
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "fuzz $$pkg $$target ($(FUZZTIME))"; \
	    inputs=$$(ls $$dir/testdata/fuzz/$$target 2>/dev/null | wc -l); \
	    if ! $(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) $$pkg; then \
	      if [ "$$(ls $$dir/testdata/fuzz/$$target 2>/dev/null | wc -l)" != "$$inputs" ]; then exit 1; fi; \
	      echo "fuzz $$pkg $$target failed without a failing input: once more"; \
	      $(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) $$pkg; \
	    fi; \
	  done; \
	done

## images: Swell's OCI images (docs/images.md), for linux/amd64 and
## linux/arm64 (PLATFORMS=linux/arm64 for fewer), one OCI layout each under
## $(BIN)/images. VERSION sets their tag and version label (default: the
## tag at HEAD on a clean tree, else the commit).
## push: the images pushed to $(REGISTRY) (host/org), then the Helm chart
## with its images pinned to their digests, to $(REGISTRY)/charts/swell
## (`helm install swell oci://$(REGISTRY)/charts/swell --version ...`), and
## the kustomize overlay pinning deploy/ to the same digests printed and
## written to $(BIN)/overlay (`kubectl apply -k $(BIN)/overlay`).
IMAGES = $(GO) run ./hack/images/cmd/swell-images
IMAGES_FLAGS = --out $(BIN)/images $(if $(VERSION),--version $(VERSION)) $(if $(PLATFORMS),--platforms $(PLATFORMS))

ifneq ($(filter push,$(MAKECMDGOALS)),)
ifeq ($(REGISTRY),)
$(error make push needs REGISTRY=host/org, such as REGISTRY=ghcr.io/swell-run)
endif
endif

images:
	$(IMAGES) build $(IMAGES_FLAGS)

push: images
	$(IMAGES) push $(IMAGES_FLAGS) --registry $(REGISTRY) --overlay $(BIN)/overlay

## bench: the benchmark harness (docs/performance.md) and Go benchmarks.
bench:
	$(GO) run ./hack/bench -gobench

## soak: `swell local` with 30 services scaling to zero and back under
## `swell load` for SOAK_DURATION, every Swell process sampled once a
## minute; the samples, a chart and a summary with a verdict go to
## $(BIN)/soak (docs/reliability.md). Not part of `test`.
SOAK_DURATION ?= 30m
soak:
	$(GO) run ./hack/soak -duration $(SOAK_DURATION) -out $(BIN)/soak

## e2e: the harness's own tests; then a real Kubernetes cluster
## (hack/cluster, its own module): a control plane and a node of
## containerd, runc, the kubelet, kube-proxy and kube-scheduler; the
## harness's cluster tests, and the end-to-end suite against a fresh
## cluster running Swell's images, all torn down after. The first run
## builds etcd, Kubernetes, containerd, the CNI plugins and Traefik (the
## cluster's ingress controller) from the module proxy (cached after). Needs root, iproute2, runc and iptables.
## It prints a table of each test's passes and failures, also written to
## $(BIN)/e2e.md. E2E_REPEAT=N runs the suite N times, each in a fresh
## cluster, to measure flakiness; E2E_STRESS=1 runs it beside a CPU hog
## that keeps every core busy, as a shared CI machine may. A failed run
## keeps its cluster's logs, and each failed test the logs of its pods and
## of Swell's (hack/cluster/README.md).
CLUSTER ?= dev
E2E_REPEAT ?= 1
E2E_STRESS ?=

# Built rather than run with `go run`, so that `cluster-down` works
# whatever the tree holds by then.
swell-cluster:
	cd hack/cluster && CGO_ENABLED=0 $(GO) build -o $(CURDIR)/$(BIN)/swell-cluster ./cmd/swell-cluster

e2e: swell-cluster
	cd hack/cluster && $(GO) vet ./... && $(GO) test -race -count=1 ./...
	cd hack/cluster && $(CURDIR)/$(BIN)/swell-cluster build >/dev/null
	cd hack/cluster && SWELL_CLUSTER_IT=1 $(GO) test -count=1 -timeout 15m ./controlplane ./node
	cd hack/cluster && $(CURDIR)/$(BIN)/swell-cluster e2e --repeat $(E2E_REPEAT) $(if $(E2E_STRESS),--stress) --report $(CURDIR)/$(BIN)/e2e.md

## chaos: the chaos suite (docs/reliability.md): a fresh cluster running
## Swell's images, a steady open-loop load at a service's ClusterIP, and
## one fault at a time, each CHAOS_REPEAT times (leader killed and deleted,
## an activator deleted and the activators rolled, an app pod deleted and
## the app rolled, the activators cut off from the autoscaler, scale to zero
## and back, the activators' tokens rotated); it prints the table of what
## came of every request and writes it to $(BIN)/chaos.md, and fails if a
## request was lost. About 25 minutes; not part of `test`. Needs what `e2e`
## needs. CHAOS_FAULTS=word,word causes only the faults whose names hold
## one of the words.
CHAOS_REPEAT ?= 2
CHAOS_FAULTS ?=
chaos: swell-cluster
	cd hack/cluster && SWELL_CHAOS=1 SWELL_CHAOS_REPEAT=$(CHAOS_REPEAT) SWELL_CHAOS_FAULTS='$(CHAOS_FAULTS)' SWELL_CHAOS_REPORT=$(CURDIR)/$(BIN)/chaos.md \
	  $(CURDIR)/$(BIN)/swell-cluster e2e -- -test.run '^TestChaos$$'

## scale-cluster: the autoscaler through the real API server of a fresh
## test cluster with SCALE_SERVICES opted-in Deployments and Services at
## zero (TestScaleOnTheAPIServer, docs/performance.md "Scenario scale"):
## time to route them all, the leader's CPU and memory, cold starts. Not
## part of `test`. Needs what `e2e` needs.
SCALE_SERVICES ?= 1000
scale-cluster: swell-cluster
	cd hack/cluster && SWELL_SCALE_SERVICES=$(SCALE_SERVICES) SWELL_SCALE_PROFILE=$(CURDIR)/$(BIN) $(CURDIR)/$(BIN)/swell-cluster e2e -- -test.run '^TestScaleOnTheAPIServer$$' -test.v -test.timeout 60m

## cluster-up / cluster-down: keep a cluster named $(CLUSTER) up while
## working; `bin/swell-cluster exec --name $(CLUSTER) -- kubectl get pods`.
cluster-up: swell-cluster
	cd hack/cluster && $(CURDIR)/$(BIN)/swell-cluster up --name $(CLUSTER)

cluster-down: swell-cluster
	$(BIN)/swell-cluster down --name $(CLUSTER)

## staticcheck: static analysis, at the version pinned as a tool in go.mod;
## staticcheck.conf says which check is off and why.
## actionlint: the GitHub workflows' lint, at the version pinned in go.mod
## (it runs shellcheck on their scripts when shellcheck is installed).
## tidy-check: fails when go.mod and go.sum of any module (the main one,
## hack/cluster and its runtime module) are not what `go mod tidy` would
## make them, and hack/helm's.

staticcheck:
	$(GO) tool staticcheck ./...

actionlint:
	$(GO) tool actionlint

tidy-check:
	$(GO) mod tidy -diff
	cd hack/cluster && $(GO) mod tidy -diff
	cd hack/cluster/build/runtime && $(GO) mod tidy -diff
	cd hack/helm && $(GO) mod tidy -diff

clean:
	rm -rf $(BIN)
