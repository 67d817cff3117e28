# Tempest — build, test and run. `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
BIN := bin
# Packages with tests; integration/ joins once the roles exist.
PKGS := ./...
FUZZTIME ?= 20s
# Per test binary. The integration package takes 15–20 minutes on a
# 2-core machine that is also busy with other work; the limit is there to
# end a hung run, not to time a slow one.
TEST_TIMEOUT ?= 40m
# make chaos: how long the randomized fault schedule runs, and its seed
# (empty: a fresh one, printed; set it to replay a schedule).
CHAOS_DURATION ?= 5m
CHAOS_SEED ?=
CHAOS_TOPOLOGY ?=

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-z][a-zA-Z_-]*:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-8s %s\n", $$1, $$2}'

.PHONY: build
build: ## Build every binary into bin/
	@mkdir -p $(BIN)
	$(GO) build -buildvcs=auto -o $(BIN)/tempest ./cmd/tempest
	$(GO) build -buildvcs=auto -o $(BIN)/tempest-manager ./cmd/manager
	$(GO) build -buildvcs=auto -o $(BIN)/tempest-worker ./cmd/worker
	$(GO) build -buildvcs=auto -o $(BIN)/tempest-gate ./cmd/gate

.PHONY: demo
demo: build ## Build and run the local demo (real nodes, printed result)
	./$(BIN)/tempest demo

.PHONY: test
test: ## Run every test with the race detector
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)

.PHONY: bench
bench: ## Run every benchmark (BENCH_ONLY=gotest|transport|loadgen|loadgen-mem|gate|rainstorm for one)
	./bench/run.sh

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (default 20s)
	./scripts/fuzz.sh $(FUZZTIME)

.PHONY: lint
lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go') 2>/dev/null); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

.PHONY: chaos
chaos: ## Longer soak: seeded election simulations, transport faults, CHAOS_DURATION of random kills/pauses/partitions (CHAOS_SEED replays)
	TEMPEST_SIM_ITERS=5000 $(GO) test -race -count=1 -timeout 60m -run 'Simulation' ./leadership/
	$(GO) test -race -count=20 -timeout 60m -run 'Breaker|Replay|Flood|Oversized|Close' ./transport/
	TEMPEST_RS_SIM_SEEDS=200 $(GO) test -count=1 -timeout 60m -run '^TestSim' ./rainstorm/
	TEMPEST_HOSTILE_SCALE=4 $(GO) test -race -count=1 -timeout 30m -run 'Hostile|Captured|APIAbuse' ./integration/
	TEMPEST_MANY_KEYS=1 TEMPEST_MILLION_KEYS=1 $(GO) test -race -count=1 -timeout 40m -run '^TestRainstorm(Many|Million)KeysWorkerKill$$' ./integration/
	CHAOS_DURATION=$(CHAOS_DURATION) $(GO) test -race -count=5 -timeout 30m -run '^TestRainstormAutoscaleGrowsAndShrinks$$' ./integration/
	CHAOS_DURATION=$(CHAOS_DURATION) $(GO) test -race -count=1 -timeout 30m -run '^TestRainstormAutoscale(WorkerKillMidResize|LeaderKillAfterDecision|AtLeastOnceCanOverCount)$$' ./integration/
	CHAOS_DURATION=$(CHAOS_DURATION) $(GO) test -race -count=1 -timeout 20m -run '^TestRainstormManagersReplacedExactlyOnce$$' ./integration/
	CHAOS_DURATION=$(CHAOS_DURATION) CHAOS_SEED=$(CHAOS_SEED) CHAOS_TOPOLOGY=$(CHAOS_TOPOLOGY) \
		$(GO) test -race -count=1 -v -timeout 120m -run '^TestChaos$$' ./integration/
	CHAOS_DURATION=$(CHAOS_DURATION) CHAOS_SEED=$(CHAOS_SEED) \
		$(GO) test -race -count=1 -v -timeout 60m -run '^TestChaosPipelineFaults$$' ./integration/

.PHONY: partition
partition: ## The partition suite alone, verbose (root; nodes in network namespaces)
	$(GO) test -race -count=1 -v -timeout $(TEST_TIMEOUT) -run '^TestPartition' ./integration/

.PHONY: clean
clean: ## Remove build output
	rm -rf $(BIN) bench/results
