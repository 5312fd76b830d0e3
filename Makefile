# wanopt — build, test and lab targets. `make` builds; `make help` lists the targets.
GO      ?= go
BIN     := bin
PKGS    := ./...
OUT     ?= out

.PHONY: help build install uninstall test vet fmt-check docs-check unit allocs flood bench-path lab-deps check baseline baseline-quick demo clean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

# 'make' alone builds, so that 'make && sudo make install' works.
.DEFAULT_GOAL := build

# gen writes the output of 'wanopt ARGS' to FILE, or nothing if it fails:
# $(call gen,ARGS,FILE).
gen = $(BIN)/wanopt $(1) > $(2).tmp && mv $(2).tmp $(2) || { rm -f $(2).tmp; exit 1; }

# -buildvcs=auto: 'wanopt version' names the commit in a git checkout,
# whatever GOFLAGS the machine sets, and a tarball still builds.
build: ## build wanopt and wanbench into ./bin, with wanopt's man page and shell completions
	$(GO) build -buildvcs=auto -o $(BIN)/ ./cmd/...
	$(call gen,man,$(BIN)/wanopt.8)
	$(call gen,completion bash,$(BIN)/wanopt.bash)
	$(call gen,completion zsh,$(BIN)/_wanopt)

# Where 'make install' puts things: PREFIX=/usr for a distribution's layout,
# DESTDIR to stage the tree elsewhere (a package, a test).
PREFIX         ?= /usr/local
BINDIR         ?= $(PREFIX)/bin
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR    ?= $(PREFIX)/lib/sysusers.d
DOCDIR         ?= $(PREFIX)/share/doc/wanopt
MANDIR         ?= $(PREFIX)/share/man
BASHCOMPDIR    ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR     ?= $(PREFIX)/share/zsh/site-functions
UNITS          := wanopt@.service wanopt-tun@.service system-wanopt.slice
EXAMPLES       := near.conf far.conf wanopt@near.service.d/tun.conf wanopt-tun@wo0.service.d/routes.conf
GUIDES         := $(notdir $(wildcard docs/guide/*))
DOCS           := wo0.netdev wo0.network $(GUIDES)
# What 'make build' made and 'make install' installs.
BUILT          := $(BIN)/wanopt $(BIN)/wanopt.8 $(BIN)/wanopt.bash $(BIN)/_wanopt

# install builds nothing: 'sudo make install' would run go build as root,
# with root's Go (if any) and a root-owned bin/ and build cache left
# behind. The units name the binary and the guide where they are
# installed: sed fills in @BINDIR@ and @DOCDIR@, writing straight into the
# destination. /etc/wanopt is left to the administrator.
install: ## install what 'make build' built, the systemd units, sysusers.d file, examples and guides (make && sudo make install; PREFIX=/usr/local, DESTDIR=)
	@for f in $(BUILT); do \
		[ -f "$$f" ] || { echo "make install: $$f is missing: run 'make build' first as yourself, then 'sudo make install'" >&2; exit 1; }; \
	done
	install -D -m 0755 $(BIN)/wanopt $(DESTDIR)$(BINDIR)/wanopt
	install -D -m 0644 $(BIN)/wanopt.8 $(DESTDIR)$(MANDIR)/man8/wanopt.8
	install -D -m 0644 $(BIN)/wanopt.bash $(DESTDIR)$(BASHCOMPDIR)/wanopt
	install -D -m 0644 $(BIN)/_wanopt $(DESTDIR)$(ZSHCOMPDIR)/_wanopt
	install -d -m 0755 $(DESTDIR)$(SYSTEMDUNITDIR)
	for u in $(UNITS); do \
		sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@DOCDIR@|$(DOCDIR)|g' dist/systemd/$$u > $(DESTDIR)$(SYSTEMDUNITDIR)/$$u && \
		chmod 0644 $(DESTDIR)$(SYSTEMDUNITDIR)/$$u || exit 1; \
	done
	install -D -m 0644 dist/sysusers.d/wanopt.conf $(DESTDIR)$(SYSUSERSDIR)/wanopt.conf
	for f in $(EXAMPLES); do install -D -m 0644 dist/examples/$$f $(DESTDIR)$(DOCDIR)/examples/$$f || exit 1; done
	install -D -m 0644 -t $(DESTDIR)$(DOCDIR) dist/systemd-networkd/wo0.netdev dist/systemd-networkd/wo0.network $(addprefix docs/guide/,$(GUIDES))

# File by file, so that a DOCDIR shared with other files loses only ours.
uninstall: ## remove what 'make install' installed (same PREFIX and DESTDIR)
	rm -f $(DESTDIR)$(BINDIR)/wanopt $(DESTDIR)$(SYSUSERSDIR)/wanopt.conf
	rm -f $(DESTDIR)$(MANDIR)/man8/wanopt.8 $(DESTDIR)$(BASHCOMPDIR)/wanopt $(DESTDIR)$(ZSHCOMPDIR)/_wanopt
	rm -f $(addprefix $(DESTDIR)$(SYSTEMDUNITDIR)/,$(UNITS))
	rm -f $(addprefix $(DESTDIR)$(DOCDIR)/examples/,$(EXAMPLES)) $(addprefix $(DESTDIR)$(DOCDIR)/,$(DOCS))
	-rmdir $(DESTDIR)$(DOCDIR)/examples/wanopt@near.service.d $(DESTDIR)$(DOCDIR)/examples/wanopt-tun@wo0.service.d $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(DOCDIR) 2>/dev/null

vet: ## go vet
	$(GO) vet $(PKGS)

fmt-check: ## fail if any file is not gofmt-clean
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

docs-check: ## check the docs: every 'wanopt run' flag in docs/guide/configuration.md, every relative link resolving
	$(GO) test -count=1 -run 'TestConfigurationReference|TestDocLinks' ./cmd/wanopt/

unit: ## race-enabled tests (end-to-end tests skip unless root)
	$(GO) test -race -count=1 -timeout 40m $(PKGS)

allocs: ## the hot paths' allocation checks without the race detector (whose instrumentation allocates, so some skip under -race)
	$(GO) test -count=1 -run 'Alloc|DoNotAllocate' $(PKGS)

bench-path: ## the data path's cost, in process and without root: Gbit/s, cpu-s/GB, allocs per MiB
	$(GO) test -run '^$$' -bench 'EdgePath|LoopbackThroughput' -benchtime 100x ./ingress/ ./tunnel/driver/

flood: ## the handshake flood test at full rate (20,000 initiations/s for 10 s; the race detector's run goes at a tenth)
	bash -o pipefail -c "$(GO) test -count=1 -v -run 'TestHandshakeFlood' ./tunnel/driver/ | grep -E '^(---|ok|FAIL)|initiations in'"

test: vet fmt-check docs-check unit allocs flood bench-path ## the project's test command (what .ci/run runs); its log ends with the data path's cost

# The lab needs root: sudo when not already root.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

lab-deps: ## install what the lab runs (iperf 2, iperf3, iproute2; nginx, curl, tcpdump for 'wanbench file-mix') if missing
	@need=""; for p in iperf:iperf iperf3:iperf3 ip:iproute2 nginx:nginx curl:curl tcpdump:tcpdump; do \
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
	$(SUDO) $(BIN)/wanbench rtt-sweep --rtt 200ms --profile legacy --runs 1 --bytes 25MB --out $(OUT)/demo

clean: ## remove build outputs
	rm -rf $(BIN) $(OUT)
