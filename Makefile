# wdc — see README.md. Targets: build, test, test-short, scale, soak, demo,
# bench, fuzz, lint.
GO      ?= go
BIN     ?= bin/wdc
PKGS    := ./...

.PHONY: all build test test-short scale soak demo bench fuzz lint clean temporal-tools k8s-tools k8s-check

all: build

build:
	$(GO) build -o $(BIN) ./cmd/wdc

# Everything: formatting, vet, unit, workflow, replay and system tests
# (the system tests embed the real Temporal server and spawn real agents;
# testsuite/topology runs PostgreSQL and the official temporal-server).
# The scale and soak tests run reduced here (testsuite/sizes_test.go);
# `make scale` and `make soak` run them at full size.
test: lint temporal-tools k8s-tools k8s-check
	$(GO) test -count=1 -timeout 45m $(PKGS)

# The long tests at full size, which `make test` runs reduced: 10,000
# trivial tasks in one run (about 15 minutes on 2 cores); the soak tests
# streaming through continue-as-new, and the short partitions cut and
# healed, for SOAK_FOR each (about 5 minutes).
SCALE_TASKS ?= 10000
SOAK_FOR    ?= 90s

scale:
	WDC_SCALE_TASKS=$(SCALE_TASKS) $(GO) test -count=1 -timeout 60m -v -run '^TestManyTasksInOneRun$$' ./testsuite/

soak:
	WDC_SOAK_FOR=$(SOAK_FOR) $(GO) test -count=1 -timeout 30m -v -run '^(TestSoak.*|TestShortPartitionsCostNoLease)$$' ./testsuite/

# The Kubernetes manifests (deploy/k8s/base): rendered with the kustomize
# library and decoded strictly into the API types, by the separate module
# tools/k8scheck (kustomize is no dependency of wdc).
k8s-check:
	cd tools/k8scheck && $(GO) vet ./... && $(GO) test -count=1 ./...

# The official temporal-server and temporal-sql-tool for testsuite/topology,
# built by the separate module tools/ into ~/.cache/wdc-tools (once).
temporal-tools:
	tools/build.sh >/dev/null

# kube-apiserver, kube-controller-manager and etcd for the Kubernetes
# launcher's system tests, built by the separate module tools/k8s into
# ~/.cache/wdc-tools/k8s (once; a cold build takes 15-20 minutes).
k8s-tools:
	tools/k8s/build.sh >/dev/null

# Quick loop: everything but the system tests in ./testsuite.
test-short: lint
	$(GO) test -short -count=1 $(PKGS)

# The main job: the reference retry demo, self-contained.
demo: build
	./$(BIN) demo worker-leases

# Benchmarks print figures; they assert nothing. First `wdc bench` at full
# size (wdc against bare Temporal; several minutes; BENCH_FLAGS adds flags,
# e.g. BENCH_FLAGS='-o json'), then the Go benchmarks (server time to ready).
BENCH_FLAGS ?=
bench: build
	./$(BIN) bench $(BENCH_FLAGS)
	$(GO) test -run '^$$' -bench . -benchtime 5x ./testsuite/

# Fuzz the strict envelope decoder.
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime 60s ./envelope/

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

clean:
	rm -rf bin
