# Ferry: see README.md.
GO       ?= go
BIN      := bin
BINARIES := ferry ferry-base ferry-spawn ferry-shim ferry-rustc ferry-gc ferry-watch
# Where script/bootstrap mounts XFS with reflink; make test passes it on as
# FERRY_TEST_XFS when it is mounted (unless FERRY_TEST_XFS is set already).
XFS      := /mnt/ferry-xfs
# The Claude Code release the real-client tests drive (internal/claudestub
# pins the same); script/bootstrap installs it with npm into CLAUDE_DIR.
CLAUDE_VERSION := 2.1.332
CLAUDE_DIR     ?= $(HOME)/.cache/ferry-test/claude-code-$(CLAUDE_VERSION)
# An old release whose worktree sessions read their settings from the
# worktree (internal/claudestub.OldVersion): the hooks copy them in.
CLAUDE_OLD_VERSION := 2.1.197
CLAUDE_OLD_DIR     ?= $(HOME)/.cache/ferry-test/claude-code-$(CLAUDE_OLD_VERSION)

.PHONY: all bootstrap build install test oracle demo bench vet cross dist clean

all: build

# Install and create what the demo and the tests need (idempotent; quick
# when all is in place). See script/bootstrap.
bootstrap:
	@GO=$(GO) FERRY_CLAUDE_VERSION=$(CLAUDE_VERSION) FERRY_CLAUDE_DIR=$(CLAUDE_DIR) \
		FERRY_CLAUDE_OLD_VERSION=$(CLAUDE_OLD_VERSION) FERRY_CLAUDE_OLD_DIR=$(CLAUDE_OLD_DIR) script/bootstrap

# The shim runs on every cargo call and enters an agent's sandbox through a
# C constructor (pkg/sandbox/inplace): linked statically, neither of its two
# execs per call loads the dynamic linker.
# TAGS=ferrytest builds binaries that read the test knobs (internal/knobs);
# make bench uses them, in their own directory.
TAGS :=
# The version `ferry --version` names: the tag, or git describe's name for
# a commit after it (the commit alone without tags), "-dirty" when the
# checkout is modified. -buildvcs=auto records the commit too where git can
# tell it (a GOFLAGS of -buildvcs=false would not).
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo unknown)
VERSIONX := -X github.com/ferrydev/ferry/pkg/cli.release=$(VERSION)
build:
	@mkdir -p $(BIN)
	$(GO) build -buildvcs=auto -tags '$(TAGS)' -ldflags '$(VERSIONX)' -o $(BIN)/ $(addprefix ./cmd/,$(filter-out ferry-shim,$(BINARIES)))
	$(GO) build -buildvcs=auto -tags '$(TAGS)' -ldflags '$(VERSIONX) -extldflags=-static' -o $(BIN)/ ./cmd/ferry-shim

# Install every binary side by side in $(PREFIX)/bin (the front finds its
# stages beside itself): make install PREFIX=$HOME/.local.
PREFIX ?= /usr/local
install: build
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(addprefix $(BIN)/,$(BINARIES)) $(DESTDIR)$(PREFIX)/bin/

# Both builds: the release one, and the tests' (-tags ferrytest, which reads
# the test knobs: see internal/knobs).
vet:
	$(GO) vet ./...
	$(GO) vet -tags ferrytest ./...

# macOS: every package (tests included) vets and every binary links for
# darwin/amd64 and darwin/arm64; nothing runs. Cgo is off, as in any cross
# build, and the links leave out symbols and DWARF (-s -w), most of their
# time: with a warm build cache this takes seconds, from a cold one (a CI
# machine) minutes a platform. make test checks darwin/arm64 alone: no file
# of Ferry's differs between the two darwin architectures, and make dist
# builds both.
CROSS := darwin/amd64 darwin/arm64
cross:
	@set -e; for p in $(CROSS); do \
		echo "vet and build for $$p"; \
		GOOS=$${p%/*} GOARCH=$${p#*/} CGO_ENABLED=0 $(GO) vet ./...; \
		GOOS=$${p%/*} GOARCH=$${p#*/} CGO_ENABLED=0 $(GO) build -ldflags='-s -w' ./cmd/...; \
	done

# Release files in $(DIST) (docs/releases.md): for each of linux/amd64,
# linux/arm64, darwin/amd64 and darwin/arm64 an archive of every binary with
# the docs, an SBOM of the Go modules they link, and SHA256SUMS; the same
# bytes on every run from the same commit. The linux/arm64 shim links its C
# constructor with a C cross compiler: when it is missing, dist names the
# Debian packages to install (script/bootstrap does not: the tests need none).
DIST := dist
dist:
	rm -rf $(DIST)
	GO=$(GO) $(GO) run ./internal/cmd/dist -version '$(VERSION)' -out $(DIST) $(BINARIES)

# The tests: real git, real cargo, real namespaces. As root they also re-run
# the sandbox tests as the unprivileged user script/bootstrap creates
# (ferrytest). A prerequisite bootstrap could have provided fails a test here
# (FERRY_TEST_REQUIRE=1) where plain go test skips it; testreport ends with
# the tests that skipped and why. The timeout is a hang detector, per test
# binary: on a 2-core machine at load 5-10 the slowest packages took 24-25
# minutes before they shared and lightened their builds.
test: bootstrap build vet
	$(MAKE) cross CROSS=darwin/arm64
	FERRY_TEST_REQUIRE=1 \
	FERRY_TEST_XFS="$${FERRY_TEST_XFS:-$$(findmnt -n -o TARGET -t xfs --mountpoint $(XFS) || true)}" \
	FERRY_TEST_CLAUDE="$${FERRY_TEST_CLAUDE:-$(CLAUDE_DIR)/node_modules/.bin/claude}" \
	FERRY_TEST_CLAUDE_OLD="$${FERRY_TEST_CLAUDE_OLD:-$(CLAUDE_OLD_DIR)/node_modules/.bin/claude}" \
	$(GO) tool testreport -count=1 -timeout 40m ./...

# The correctness oracle alone and deeper than make test runs it: more
# agents and rounds, a new seed each time (FERRY_ORACLE_SEED repeats one).
ORACLE_AGENTS ?= 4
ORACLE_ROUNDS ?= 20
oracle: bootstrap build
	FERRY_TEST_REQUIRE=1 FERRY_ORACLE_AGENTS=$(ORACLE_AGENTS) FERRY_ORACLE_ROUNDS=$(ORACLE_ROUNDS) \
	$(GO) test -count=1 -v -timeout 90m -run '^TestFerryAgentsBuildTheirOwnCode$$' ./internal/oracle

# Generate a sample Cargo workspace, build its base with the real binaries,
# and print what happened with timings.
demo: bootstrap build
	$(GO) run ./internal/cmd/demo -bin $(CURDIR)/$(BIN)

# Side-by-side timings; prints a table of medians and ratios. The bench
# turns test knobs (to time what recording a call costs, or remap mode on a
# toolchain its probe refuses), so its binaries are built with them.
bench:
	$(MAKE) build BIN=$(BIN)/ferrytest TAGS=ferrytest
	$(GO) run ./internal/cmd/bench -bin $(CURDIR)/$(BIN)/ferrytest

clean:
	rm -rf $(BIN) $(DIST)
