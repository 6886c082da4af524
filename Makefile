# effectively — make help lists the targets.
SHELL := /bin/bash
TEMPORAL_CLI_VERSION := v1.5.1
TEMPORAL_SERVER_VERSION := v1.29.1
GOLANGCI_LINT_VERSION := v2.15.0
WORKFLOWCHECK_VERSION := v0.6.0
BIN := $(CURDIR)/bin
export TEMPORAL_CLI ?= $(BIN)/temporal

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_\/.-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: run
run: $(BIN)/temporal $(if $(filter cluster,$(EFFECTIVELY_TEMPORAL)),$(BIN)/temporal-server) ## run the whole local stack, send the examples, keep running until Ctrl-C
	go run ./tools/devstack

.PHONY: demo
demo: $(BIN)/temporal $(if $(filter cluster,$(EFFECTIVELY_TEMPORAL)),$(BIN)/temporal-server) ## like run, but stop after the report
	go run ./tools/devstack -exit

.PHONY: compose-env
compose-env: ## write .env for docker-compose.yml with fresh local secrets (kept if it exists)
	./deploy/compose-env.sh

.PHONY: test-deps
test-deps: ## install (as root, apt-get) or name what the tests need: nats-server, prometheus, chromium, rabbitmq-server, linux-perf; Postgres, NATS, RabbitMQ running
	./tools/test-deps.sh

.PHONY: test
test: test-deps $(BIN)/temporal $(BIN)/temporal-server ## run every test (installs what it needs first; builds the Temporal CLI and server once)
	go test -count=1 -timeout 20m ./... ./lab/...
	go test -count=1 -tags failpoints ./internal/leaf/failpoint/

.PHONY: test-short
test-short: ## unit tests only (no Temporal dev server)
	go test -count=1 ./internal/leaf/identity/ ./internal/adapter/message/ ./internal/config/ ./workflows/ ./sim/... ./internal/adapter/payment/ ./internal/adapter/email/

.PHONY: soak
soak: $(BIN)/temporal ## chaos soak: 2000 messages, duplicates, worker kills, provider faults, a Postgres cut, a broker restart (BROKER=nats|kafka|rabbitmq; WORKER_ENV="NAME=value …" adds to the workers' environment), rate limits on; then the backlog drain (5,000)
	go test -count=1 -timeout 30m -run '^(TestSoak|TestBacklogDrain)$$' -v ./lab/soak/ -args -messages $${MESSAGES:-2000} -kills $${KILLS:-3} -webhooks=$${WEBHOOKS:-true} -broker $${BROKER:-nats} -worker-env "$${WORKER_ENV:-}"

.PHONY: soak-cluster
soak-cluster: $(BIN)/temporal-server ## the soak on a Temporal server on Postgres: its services killed one by one, Postgres restarted
	go test -count=1 -timeout 30m -run '^TestSoakOnCluster$$' -v ./lab/soak/ -args -cluster-messages $${MESSAGES:-2000}

.PHONY: bench
bench: $(BIN)/temporal $(BIN)/temporal-server ## benchmark: end to end vs Temporal's floor, a naive layout, a plain consumer, and on a Temporal server with Postgres (report in results/; BROKER=nats|kafka|rabbitmq)
	go run ./lab/bench/cmd/bench -broker $${BROKER:-nats} $(BENCH_ARGS)

.PHONY: bench-short
bench-short: $(BIN)/temporal ## the floor/e2e series alone (floor, e2e, … ×3, floor; the other phases minimal or skipped), about two minutes
	go run ./lab/bench/cmd/bench -n 1000 -floor 600 -rounds 3 -sweep none -workers none -http-n -1 -drain -1 -cluster -1 -naive 50 -plain 300 -paid 50 -profile 0 $(BENCH_ARGS)

.PHONY: fuzz
fuzz: ## run each fuzz test for 30s
	go test ./internal/leaf/identity/ -run '^$$' -fuzz FuzzIdentity -fuzztime 30s
	go test ./internal/adapter/message/ -run '^$$' -fuzz FuzzDecode -fuzztime 30s

.PHONY: build
build: ## build worker, starter and providersim into bin/
	go build -o $(BIN)/worker ./worker
	go build -o $(BIN)/starter ./starter
	go build -o $(BIN)/providersim ./sim/providersim

.PHONY: lint
lint: $(BIN)/golangci-lint ## gofmt, go vet and golangci-lint
	@test -z "$$(gofmt -l .)" || (gofmt -l . && exit 1)
	go vet ./... ./lab/...
	$(BIN)/golangci-lint run --allow-parallel-runners ./...
	cd lab && $(BIN)/golangci-lint run --allow-parallel-runners --config ../.golangci.yml ./...

.PHONY: workflowcheck
workflowcheck: $(BIN)/workflowcheck ## check workflow code for non-determinism
	$(BIN)/workflowcheck ./workflows/...

$(BIN)/temporal:
	@echo "building the Temporal CLI $(TEMPORAL_CLI_VERSION) into bin/ (about 2 minutes, once)"
	GOBIN=$(BIN) go install github.com/temporalio/cli/cmd/temporal@$(TEMPORAL_CLI_VERSION)

# The Temporal server and its SQL tool at the version inside the CLI, with
# the server's Postgres schemas beside them (tools/cluster).
$(BIN)/temporal-server:
	@echo "building the Temporal server $(TEMPORAL_SERVER_VERSION) and its SQL tool into bin/ (about 4 minutes, once)"
	rm -rf $(BIN)/.server && mkdir -p $(BIN)/.server
	GOBIN=$(BIN)/.server go install go.temporal.io/server/cmd/server@$(TEMPORAL_SERVER_VERSION)
	GOBIN=$(BIN)/.server go install go.temporal.io/server/cmd/tools/sql@$(TEMPORAL_SERVER_VERSION)
	rm -rf $(BIN)/temporal-schema && mkdir -p $(BIN)/temporal-schema
	for d in temporal visibility; do cp -r "$$(go env GOMODCACHE)/go.temporal.io/server@$(TEMPORAL_SERVER_VERSION)/schema/postgresql/v12/$$d" $(BIN)/temporal-schema/; done
	chmod -R u+w $(BIN)/temporal-schema
	mv $(BIN)/.server/sql $(BIN)/temporal-sql && mv $(BIN)/.server/server $(BIN)/temporal-server && rmdir $(BIN)/.server

.PHONY: cluster
cluster: $(BIN)/temporal-server ## run a Temporal server on Postgres, its four services in separate processes, until Ctrl-C
	go run ./tools/cluster/cmd/cluster -dir .cluster

$(BIN)/golangci-lint:
	GOBIN=$(BIN) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

$(BIN)/workflowcheck:
	GOBIN=$(BIN) go install go.temporal.io/sdk/contrib/tools/workflowcheck@$(WORKFLOWCHECK_VERSION)

.PHONY: clean
clean: ## remove bin/, .devstack/ and .cluster/
	rm -rf $(BIN) .devstack .cluster
