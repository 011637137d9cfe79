# Ferry: see README.md.
GO       ?= go
BIN      := bin
BINARIES := ferry ferry-base ferry-spawn ferry-shim ferry-rustc ferry-gc ferry-watch

.PHONY: all build test demo bench vet clean

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ $(addprefix ./cmd/,$(BINARIES))

vet:
	$(GO) vet ./...

# The tests: real git, real cargo, real namespaces. As root they also re-run
# the sandbox tests as the unprivileged user .ci/run creates (ferrytest).
test: build vet
	$(GO) test -count=1 -timeout 25m ./...

# Generate a sample Cargo workspace, build its base with the real binaries,
# and print what happened with timings.
demo: build
	$(GO) run ./internal/cmd/demo -bin $(CURDIR)/$(BIN)

# Side-by-side timings; prints a table of medians and ratios.
bench: build
	$(GO) run ./internal/cmd/bench -bin $(CURDIR)/$(BIN)

clean:
	rm -rf $(BIN)
