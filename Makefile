# EchoMQ: the verbs a newcomer types.
#   make run    build the module and start valkey-server with module.conf (foreground)
#   make test   unit tests and integration tests against real servers
#   make lint   cargo fmt --check and clippy with warnings denied
#   make bench  EMQ.ENQUEUE against the reference Lua script and native commands

CARGO  ?= cargo
MODULE := target/release/libechomq.so
VALKEY_SERVER ?= valkey-server

.PHONY: all deps build run test lint bench clean

all: build

# Installs libclang-dev and valkey-server (bookworm-backports on Debian 12) when missing.
deps:
	@bash scripts/install-deps.sh
	@command -v $(CARGO) >/dev/null 2>&1 || { \
	  echo "echomq: cargo (Rust >= 1.80) is required; install it with rustup (https://rustup.rs)" >&2; exit 1; }

build: deps
	$(CARGO) build --release

run: build
	$(VALKEY_SERVER) module.conf

test: build
	$(CARGO) build --examples
	$(CARGO) test --all-targets

# Figures, not assertions: writes docs/bench.md (BENCH_ROUNDS, BENCH_JOBS tune it).
bench: build
	@# Its own target dir: a bench build links dev features into the cdylib; the real module
	@# stays target/release/libechomq.so, built by `make build`.
	CARGO_TARGET_DIR=target/bench $(CARGO) bench --bench enqueue

lint: deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings

clean:
	$(CARGO) clean
