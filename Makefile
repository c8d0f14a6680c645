# wdc — see README.md. Targets: build, test, test-short, scale, soak, demo,
# bench, fuzz, lint, ui-test, ui-screenshots.
GO      ?= go
BIN     ?= bin/wdc
PKGS    := ./...
# tools/timed.sh NAME CMD…: runs CMD; with WDC_TIMINGS set (.ci/run sets
# it) it also records how long CMD took, for .ci/run's summary.
TIMED   := tools/timed.sh

.PHONY: all build test test-short scale soak soak-ci soak-nemesis demo bench fuzz lint clean temporal-tools k8s-tools spire-tools k8s-check ui-test ui-screenshots

all: build

build:
	$(GO) build -o $(BIN) ./cmd/wdc

# Everything: formatting, vet, unit, workflow, replay and system tests
# (the system tests embed the real Temporal server and spawn real agents;
# testsuite/topology runs PostgreSQL and the official temporal-server).
# The scale and soak tests run reduced here (testsuite/sizes_test.go);
# `make scale` and `make soak` run them at full size.
#
# The Kubernetes binaries (k8s-tools; a cold build takes about 13 minutes
# on 2 cores, mostly on one) build in the background at low priority while
# every test that does not need them runs; K8S_TESTS, the tests that do, run last. A test that needs
# them and is not listed waits for the build (internal/testenv/kube).
# The SPIRE server and agent (spire-tools, about 10 minutes cold) build
# after them in the same background job; TestSPIREIdentity runs last too.
# SIDE_TESTS, testsuite's long CPU-bound tests (no figure asserted; their
# deadlines are minutes), run in a second go test process (its own
# embedded server) beside the rest, at nice 10: they use the CPU the
# waiting tests leave idle and take little from the tests whose deadlines
# are seconds.
# GOTESTFLAGS adds flags to make test's go test runs (e.g. -v, -json).
GOTESTFLAGS ?=
K8S_TESTS := ^(TestKubernetesLauncher|TestClusterRunsAJobsPodAsALocalProcess|TestSPIREIdentity)$$
K8S_PKGS  := ./testsuite/ ./internal/testenv/kube/
SIDE_TESTS := ^(TestManyTasksInOneRun|TestBenchCommandSmall|TestBenchCLIPathAndSweep)$$
# The nemesis soak (testsuite/hosts) runs in make soak and soak-ci only.
NOT_IN_TEST := |^TestNemesisSoak$$
# make test's three go test runs, each echoed as it is run.
MAIN_GOTEST = $(GO) test -count=1 -timeout 45m $(GOTESTFLAGS) -skip '$(K8S_TESTS)|$(SIDE_TESTS)$(NOT_IN_TEST)' $(PKGS)
SIDE_GOTEST = nice -n 10 $(GO) test -count=1 -timeout 45m $(GOTESTFLAGS) -run '$(SIDE_TESTS)' ./testsuite/
K8S_GOTEST  = $(GO) test -count=1 -timeout 15m $(GOTESTFLAGS) -run '$(K8S_TESTS)' $(K8S_PKGS)

test: lint temporal-tools k8s-check
	@log=$$(mktemp); echo "make: building the Kubernetes binaries in the background (log: $$log)"; \
	$(TIMED) 'k8s and spire tools (background)' nice -n 19 sh -c 'tools/k8s/build.sh && tools/spire/build.sh' >/dev/null 2>$$log & k8s=$$!; \
	side=$$(mktemp); echo "make: SIDE_TESTS run beside the rest (their output follows it):"; \
	echo "$(SIDE_GOTEST)"; \
	$(TIMED) 'go test (SIDE_TESTS, beside)' $(SIDE_GOTEST) >$$side 2>&1 & sidepid=$$!; \
	echo "$(MAIN_GOTEST)"; \
	$(TIMED) 'go test (all but K8S_TESTS, SIDE_TESTS)' $(MAIN_GOTEST); rc=$$?; \
	wait $$sidepid || rc=1; echo "make: SIDE_TESTS:"; cat $$side; rm -f $$side; \
	wait $$k8s || { rc=1; echo "make: tools/k8s/build.sh or tools/spire/build.sh failed:"; cat $$log; }; rm -f $$log; \
	echo "$(K8S_GOTEST)"; \
	$(TIMED) 'go test (K8S_TESTS)' $(K8S_GOTEST) || rc=1; \
	exit $$rc

# The long tests at full size, which `make test` runs reduced: 10,000
# trivial tasks in one run (about 15 minutes on 2 cores); the soak tests
# streaming through continue-as-new, and the short partitions cut and
# healed, for SOAK_FOR each (about 5 minutes); each blackhole partition
# of testsuite/hosts HOSTS_RUNS times (root; about 20 minutes); then the
# nemesis soak (testsuite/hosts, root): six hosts under DURATION of seeded
# faults (SEED: a number, default from the clock; the log names it), its
# history checked (docs/reliability.md; history and figures in SOAK_OUT).
# SOAK_SERVER=official makes PostgreSQL and the official temporal-server
# (built by temporal-tools) host a's Temporal server; start-dev beside
# them still serves the S3 store.
# soak-ci is the nemesis soak alone for 5 minutes, seed 1 unless SEED.
SCALE_TASKS ?= 10000
SOAK_FOR    ?= 90s
HOSTS_RUNS  ?= 10
DURATION    ?= 45m
SEED        ?=
SOAK_OUT    ?=
SOAK_SERVER ?= dev
NEMESIS      = WDC_SOAK_DURATION=$(DURATION) WDC_SOAK_SEED=$(SEED) WDC_SOAK_OUT=$(SOAK_OUT) WDC_SOAK_SERVER=$(SOAK_SERVER) $(GO) test -count=1 -timeout 90m -v -run '^TestNemesisSoak$$' ./testsuite/hosts/

scale:
	WDC_SCALE_TASKS=$(SCALE_TASKS) $(GO) test -count=1 -timeout 60m -v -run '^TestManyTasksInOneRun$$' ./testsuite/

soak: $(if $(filter official,$(SOAK_SERVER)),temporal-tools)
	WDC_SOAK_FOR=$(SOAK_FOR) $(GO) test -count=1 -timeout 30m -v -run '^(TestSoak.*|TestShortPartitionsCostNoLease)$$' ./testsuite/
	WDC_HOSTS_RUNS=$(HOSTS_RUNS) $(GO) test -count=1 -timeout 60m -v -skip '^TestNemesisSoak$$' ./testsuite/hosts/
	$(NEMESIS)

soak-ci:
	$(MAKE) --no-print-directory soak-nemesis DURATION=5m SEED=$(or $(SEED),1)

soak-nemesis: $(if $(filter official,$(SOAK_SERVER)),temporal-tools)
	$(NEMESIS)

# The Kubernetes manifests (deploy/k8s/base): rendered with the kustomize
# library and decoded strictly into the API types, by the separate module
# tools/k8scheck (kustomize is no dependency of wdc).
k8s-check:
	$(TIMED) 'k8s-check' sh -c 'cd tools/k8scheck && $(GO) vet ./... && $(GO) test -count=1 ./...'

# The official temporal-server and temporal-sql-tool for testsuite/topology,
# built by the separate module tools/ into ~/.cache/wdc-tools (once).
temporal-tools:
	$(TIMED) 'temporal tools (make)' tools/build.sh >/dev/null

# kube-apiserver, kube-controller-manager and etcd for the Kubernetes
# launcher's system tests, built by the separate module tools/k8s into
# ~/.cache/wdc-tools/k8s (once; a cold build takes about 13 minutes).
k8s-tools:
	tools/k8s/build.sh >/dev/null

# spire-server and spire-agent for TestSPIREIdentity, built by the
# separate module tools/spire into ~/.cache/wdc-tools/spire (once; about
# 10 minutes cold).
spire-tools:
	tools/spire/build.sh >/dev/null

# Quick loop: everything but the system tests in ./testsuite.
test-short: lint
	$(GO) test -short -count=1 $(PKGS)

# The main job: the reference retry demo, self-contained.
demo: build
	./$(BIN) demo worker-leases

# Benchmarks print figures; they assert nothing. First `wdc bench` at full
# size (wdc against bare Temporal; several minutes; BENCH_FLAGS adds flags,
# e.g. BENCH_FLAGS='-o json'), then its sweep phase: BENCH_SWEEP_TASKS tasks
# in one run through `wdc tasks submit --batch` (10,000: about 20 minutes on
# 2 cores; BENCH_SWEEP_TASKS=1000 for a short one, 0 to skip it), then the
# Go benchmarks (server time to ready).
BENCH_FLAGS ?=
BENCH_SWEEP_TASKS ?= 10000
bench: build
	./$(BIN) bench $(BENCH_FLAGS)
	if [ "$(BENCH_SWEEP_TASKS)" != 0 ]; then ./$(BIN) bench --phases sweep --tasks $(BENCH_SWEEP_TASKS) $(BENCH_FLAGS); fi
	$(GO) test -run '^$$' -bench . -benchtime 5x ./testsuite/

# The browser test: start-dev, the demo and a control plane, then headless
# Chromium (Debian's; playwright-core from tools/uitest) checks the task in
# the Web UI's list and on its page (tools/uitest/run.sh; screenshots in
# bin/uitest). ui-screenshots writes the README's docs/img/ui-*.png.
ui-test:
	GO=$(GO) tools/uitest/run.sh

ui-screenshots:
	GO=$(GO) tools/uitest/run.sh docs/img

# Fuzz the strict envelope decoder.
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime 60s ./envelope/

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(TIMED) 'lint: go vet' $(GO) vet $(PKGS)

clean:
	rm -rf bin
