# wanopt — build, test and lab targets. Run `make help` for the list.
GO      ?= go
BIN     := bin
PKGS    := ./...
OUT     ?= out

.PHONY: help build test vet fmt-check unit flood bench-path lab-deps check baseline baseline-quick demo clean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

build: ## build wanopt and wanbench into ./bin
	$(GO) build -o $(BIN)/ ./cmd/...

vet: ## go vet
	$(GO) vet $(PKGS)

fmt-check: ## fail if any file is not gofmt-clean
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

unit: ## race-enabled tests (end-to-end tests skip unless root)
	$(GO) test -race -count=1 -timeout 40m $(PKGS)

bench-path: ## the data path's cost, in process and without root: Gbit/s, cpu-s/GB, allocs per MiB
	$(GO) test -run '^$$' -bench 'EdgePath|LoopbackThroughput' -benchtime 100x ./edge/bridge/ ./tunnel/driver/

flood: ## the handshake flood test at full rate (20,000 initiations/s for 10 s; the race detector's run goes at a tenth)
	bash -o pipefail -c "$(GO) test -count=1 -v -run 'TestHandshakeFlood' ./tunnel/driver/ | grep -E '^(---|ok|FAIL)|initiations in'"

test: vet fmt-check unit flood bench-path ## the project's test command (what .ci/run runs); its log ends with the data path's cost

# The lab needs root: sudo when not already root.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

lab-deps: ## install what the lab runs (iperf 2, iperf3, iproute2) if missing
	@need=""; for p in iperf:iperf iperf3:iperf3 ip:iproute2; do \
		command -v $${p%%:*} >/dev/null 2>&1 || need="$$need $${p#*:}"; done; \
	if [ -n "$$need" ]; then echo "installing:$$need"; \
		$(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$need; fi

check: build ## emulator self-check: RTT and rate at 200 ms / 250 Mbit/s
	$(BIN)/wanbench check --rtt 200ms --rate 250mbit

baseline-quick: build lab-deps ## plain-TCP baseline, quick (3 runs, 25MB) -> $(OUT)/baseline
	$(BIN)/wanbench baseline --quick --out $(OUT)/baseline

baseline: build lab-deps ## plain-TCP baseline, full published experiment -> $(OUT)/baseline
	$(BIN)/wanbench baseline --out $(OUT)/baseline

demo: build lab-deps ## the accelerated demo: plain TCP against wanopt at 200 ms, legacy endpoints -> $(OUT)/demo
	$(SUDO) $(BIN)/wanbench cisco --rtt 200ms --profile legacy --runs 1 --bytes 25MB --out $(OUT)/demo

clean: ## remove build outputs
	rm -rf $(BIN) $(OUT)
