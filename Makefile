# EchoMQ: the verbs a newcomer types.
#   make run    build the module and start valkey-server with module.conf (foreground)
#   make web / make top  the emq console's dashboard / terminal view against that server
#   make test   unit tests and integration tests against real servers, the Rust and Python
#               clients' and the emq console's included (its browser tests in headless Chromium),
#               and the chaos checker's own tests
#   make lint   cargo fmt --check, clippy with warnings denied, the layer, docs and shape checks,
#               and mypy --strict on the Python client
#   make test-redis7  the core suites against redis-server 7.0
#   make test-valkey-latest  every suite against the newest Valkey in Debian's archive
#   make test-python-versions  the Python client's suite on Python 3.9, where found
#   make test-valgrind  the suites with valkey-server under valgrind memcheck
#   make docker-image / docker-up / docker-down / docker-test
#   make bench  EMQ.ENQUEUE against the reference Lua script and native commands
#   make bench-clients  one Python worker of the package against bullmq's and rq's
#   make test-node / lint-node  the Node.js client's tests and type check (in test and lint)

CARGO  ?= cargo
MODULE := target/release/libechomq.so
# The Python client's venv: the package installed editable with its dev tools (mypy, pytest),
# from PyPI, made again when clients/python/pyproject.toml changes.
PY_VENV := target/py
VALKEY_SERVER ?= valkey-server

.PHONY: all deps build python bench-clients run web top test test-modules test-redis7 test-valkey-latest test-python-versions test-valgrind lint bench clean docker-image docker-up docker-down docker-test reliability chaos chaos-short compose profile

all: build

# Installs libclang-dev and valkey-server (bookworm-backports on Debian 12) when missing.
deps:
	@bash scripts/install-deps.sh
	@command -v $(CARGO) >/dev/null 2>&1 || { \
	  echo "echomq: cargo (Rust >= 1.88) is required; install it with rustup (https://rustup.rs)" >&2; exit 1; }

build: deps
	$(CARGO) build --release

python: $(PY_VENV)/.installed

$(PY_VENV)/.installed: clients/python/pyproject.toml | deps
	python3 -m venv $(PY_VENV)
	$(PY_VENV)/bin/pip install --quiet --upgrade pip
	$(PY_VENV)/bin/pip install --quiet -e 'clients/python[dev]'
	touch $@

# PORT=6380 picks another port when 6379 is taken (by a packaged valkey-server, say).
run: build
	$(VALKEY_SERVER) module.conf $(if $(PORT),--port $(PORT))

# The console against the server `make run` started (same PORT): the dashboard on
# http://127.0.0.1:8080, or the terminal view.
web: build
	$(CARGO) run --release -q -p emq -- --url redis://127.0.0.1:$(or $(PORT),6379) web
top: build
	$(CARGO) run --release -q -p emq -- --url redis://127.0.0.1:$(or $(PORT),6379) top

# The test-only module (testing/caller-module) that the acl, hostile and blocking_claim suites
# load beside EchoMQ, to call it as another module would.
test-modules: build
	$(CARGO) build --release -p emq-test-caller

test: build test-modules python
	@bash scripts/install-deps.sh --with-browser --with-prometheus
	$(CARGO) build --workspace --examples
	$(CARGO) test --all-targets
	ECHOMQ_MODULE=$(CURDIR)/$(MODULE) $(CARGO) test -p echomq-client --features otel
	ECHOMQ_MODULE=$(CURDIR)/$(MODULE) $(CARGO) test -p emq
	$(CARGO) test -p emq-chaos
	cd clients/python && ECHOMQ_MODULE=$(CURDIR)/$(MODULE) VALKEY_SERVER=$(VALKEY_SERVER) ../../$(PY_VENV)/bin/pytest -q tests
	@$(MAKE) --no-print-directory test-node

# The core suites against Debian's redis-server 7.0 (installed if missing). Redis 7 only: a
# later Redis loads modules of its own, which the suites' exact module lists do not expect.
# REDIS7_SKIP: tests of what Redis 7.0 lacks (dual-channel replication, a module's RM_Call
# that blocks, lookups uncounted in keyspace_hits, the `emq` ACL category the queue-scoped users
# of operate, inspect and queues are granted, a Valkey cluster), which fail where it is lacking;
# the runner counts them as filtered out. Then the test that needs a server whose RM_Call
# cannot block (ignored by `make test`), and the one test of the acl suite, which needs the
# `emq` ACL category (Redis 7.4+), that needs no category.
REDIS7_SUITES := span enqueue grammar interop lua_speakers replication effects menqueue delayed claim blocking_claim lease cancel_requeue timeouts groups events concurrency model hostile persistence module_load oom readme operate inspect queues priority limits unique cron
REDIS7_SKIP := a_dual_channel_replica_attaching_late_gets_every_write another_modules_blocking_call_of_claim_is_served_when_a_job_arrives keyspace_hits_and_misses_count_only_what_clients_read \
  a_user_limited_to_one_queue_inspects_it_and_gets_noperm_for_another a_queue_scoped_user_operates_its_queue_and_no_other \
  a_user_who_may_read_few_of_many_queues_pages_past_the_rest a_user_sees_only_the_queues_it_may_read the_command_is_a_keyless_read \
  on_a_cluster_every_primary_lists_its_own_queues_and_together_all_of_them
REDIS7_ENV := VALKEY_SERVER=redis-server VALKEY_CLI=redis-cli
# The clients' tests on a cluster (the Python ones are marked `cluster`).
CLIENT_CLUSTER_TESTS := queues_on_every_primary_of_a_cluster a_primary_killed_under_load_leaves_every_job_done_once a_worker_goes_on_through_a_slot_migration_of_its_queue \
  on_a_cluster_the_partitions_spread_over_every_primary_and_a_worker_blocks_once_on_each \
  a_worker_drains_every_partition_once_after_one_s_slot_moved_under_its_blocked_claims \
  on_a_cluster_a_partitioned_queue_s_schedules_listings_and_metrics_span_its_partitions \
  on_a_cluster_a_flow_s_grouped_parent_is_in_its_group_s_partition_and_runs_after_its_children
test-redis7: build test-modules python
	@bash scripts/install-deps.sh --with-redis
	@redis-server --version | grep -q ' v=7\.' || { \
	  echo "echomq: test-redis7 runs against Redis 7.x; this machine has: $$(redis-server --version)" >&2; exit 1; }
	@echo "echomq: test-redis7 skips, as Redis 7.0 cannot run them: $(REDIS7_SKIP)"
	$(REDIS7_ENV) $(CARGO) test $(addprefix --test ,$(REDIS7_SUITES)) -- $(addprefix --skip ,$(REDIS7_SKIP))
	$(REDIS7_ENV) $(CARGO) test --test blocking_claim -- --ignored
	$(REDIS7_ENV) $(CARGO) test --test acl -- --exact lifecycle_commands_check_acl_on_derived_keys
	@echo "echomq: test-redis7 runs the clients on single servers; it skips their cluster tests: $(CLIENT_CLUSTER_TESTS)"
	ECHOMQ_MODULE=$(CURDIR)/$(MODULE) $(REDIS7_ENV) $(CARGO) test -p echomq-client -- $(addprefix --skip ,$(CLIENT_CLUSTER_TESTS))
	cd clients/python && ECHOMQ_MODULE=$(CURDIR)/$(MODULE) $(REDIS7_ENV) ../../$(PY_VENV)/bin/pytest -q tests -m "not cluster"

# The Python client's suite on Python 3.9, the oldest it declares, wherever an interpreter is found
# (python3.X on PATH, or pyenv's); skipped, saying so, where none is (on CI a failure where
# .ci/tiers says the machine has the tier).
test-python-versions: build
	@bash scripts/test-python-versions.sh

# Every suite against the newest Valkey in Debian's archive (unstable), built from Debian's
# source package into target/valkey-latest (kept for the next run); skipped, with a message,
# where no such server can be had (the archive out of reach, a file that does not verify, a
# build that fails); on CI a failure where .ci/tiers says the machine has the tier. Then the
# cluster_atomic suite (Valkey 9.0: atomic slot migration, databases in cluster mode),
# which `make test` ignores; each fails, saying so, on an older one.
VALKEY_LATEST := target/valkey-latest
test-valkey-latest: build test-modules python
	@bash scripts/build-valkey.sh $(VALKEY_LATEST); rc=$$?; \
	if [ $$rc = 3 ]; then bash scripts/tier-skip.sh valkey-latest "no newest Valkey could be had here (see above)"; exit $$?; fi; \
	[ $$rc = 0 ] || exit $$rc; \
	$(CARGO) build --workspace --examples && \
	VALKEY_SERVER=$(CURDIR)/$(VALKEY_LATEST)/bin/valkey-server VALKEY_CLI=$(CURDIR)/$(VALKEY_LATEST)/bin/valkey-cli \
	  $(CARGO) test --all-targets && \
	VALKEY_SERVER=$(CURDIR)/$(VALKEY_LATEST)/bin/valkey-server VALKEY_CLI=$(CURDIR)/$(VALKEY_LATEST)/bin/valkey-cli \
	  $(CARGO) test --test cluster_atomic -- --ignored

# The integration suites with every server under valgrind memcheck; fails on any error or
# leak whose stack passes through the module. Slow: not part of every CI run. The I/O threads
# test is skipped: it floods the server to start its threads, which valgrind runs one at a time.
VALGRIND_SUITES := enqueue grammar menqueue acl module_load replication effects interop delayed claim blocking_claim lease cancel_requeue events concurrency hostile
VALGRIND_DIR := target/valgrind
test-valgrind: build test-modules
	@command -v valgrind >/dev/null 2>&1 || { apt-get install -y -qq valgrind || { echo "echomq: install valgrind" >&2; exit 1; }; }
	rm -rf $(VALGRIND_DIR) && mkdir -p $(VALGRIND_DIR)
	ECHOMQ_VALGRIND_DIR=$(CURDIR)/$(VALGRIND_DIR) ECHOMQ_GRACEFUL_STOP=1 \
	  VALKEY_SERVER=$(CURDIR)/scripts/valgrind-server.sh \
	  $(CARGO) test $(addprefix --test ,$(VALGRIND_SUITES)) -- --test-threads=1 --skip with_io_threads
	bash scripts/valgrind-report.sh $(VALGRIND_DIR)

# Instruction counts per job under callgrind (repeatable, unlike timings).
profile: build
	@command -v valgrind >/dev/null 2>&1 || apt-get install -y -qq valgrind
	bash scripts/profile.sh

# The fault-injection harness (chaos/): ten faults under load, flows across primaries
# included, on a 3+3 cluster in containers on a docker network of its own, each checked
# against its history (zombie workers included); the workers are the shipped Python, Rust and Node
# clients' (the Python one on the venv's interpreter, Node on Debian's node-redis); `make chaos` runs three seeds, each on a
# cluster of its own, and writes their table into docs/reliability.md. CHAOS_JOBS: enqueues
# tried per fault (3 seeds x 10 faults x 3400 = 102,000), and a flow of 1 to 10 children built
# for every 15 of them (6,780); CHAOS_SEEDS: the seeds. It cuts links inside the nodes' network namespaces and
# loop-mounts each node's data filesystem, so it runs as root.
CHAOS_JOBS ?= 3400
CHAOS_SEEDS ?= 1,2,3
CHAOS_SEED ?= 1
# The clock fault's shim, bind-mounted into every node (the harness finds it here).
CLOCK_SHIM := target/shims/clock-shift-shim.so
$(CLOCK_SHIM): scripts/clock-shift-shim.c
	@mkdir -p $(dir $@)
	cc -shared -fPIC -O2 -Wall -o $@ $<

# The harness's workers are the shipped clients: the Python one runs in the venv.
CHAOS_ENV = ECHOMQ_CLOCK_SHIM=$(CURDIR)/$(CLOCK_SHIM) EMQ_CHAOS_PYTHON=$(CURDIR)/$(PY_VENV)/bin/python
chaos: docker-image python node-deps $(CLOCK_SHIM)
	bash scripts/install-deps.sh --with-iptables
	$(CARGO) build --release -p emq-chaos
	$(CHAOS_ENV) target/release/emq-chaos --seeds $(CHAOS_SEEDS) --jobs $(CHAOS_JOBS) --report docs/reliability.md

# The same faults and zombies, one seed, a few hundred jobs and a few dozen flows each,
# nothing written (CI).
chaos-short: docker-image python node-deps $(CLOCK_SHIM)
	bash scripts/install-deps.sh --with-iptables
	$(CARGO) build --release -p emq-chaos
	$(CHAOS_ENV) target/release/emq-chaos --seed $(CHAOS_SEED) --jobs 400

# The fault tests' figures (failover, resharding, kill -9, a simulated power loss) into
# docs/reliability.md.
reliability: build
	bash scripts/reliability-report.sh

# Docker. The image builds on VALKEY_IMAGE (default: the official valkey/valkey:8.0). When that
# cannot be pulled (no registry), a local stand-in is assembled from this machine's Debian
# packages once and cached as echomq/valkey-base:8.0.
VALKEY_IMAGE ?= valkey/valkey:8.0
LOCAL_BASE := echomq/valkey-base:8.0
COMPOSE := docker-compose -f docker/compose.yml

docker-image: build
	@base="$(VALKEY_IMAGE)"; \
	if ! docker image inspect "$$base" >/dev/null 2>&1 && ! timeout 60 docker pull -q "$$base" >/dev/null 2>&1; then \
	  echo "docker: $$base cannot be pulled here; using the local base $(LOCAL_BASE)"; \
	  docker image inspect $(LOCAL_BASE) >/dev/null 2>&1 || bash scripts/docker-base.sh $(LOCAL_BASE) target/release/libechomq.so; \
	  base=$(LOCAL_BASE); \
	fi; \
	docker build -q -f docker/Dockerfile --build-arg VALKEY_IMAGE="$$base" -t echomq:dev .

compose:
	@bash scripts/install-deps.sh --with-compose

docker-up: docker-image compose
	$(COMPOSE) up -d

docker-down: compose
	$(COMPOSE) --profile cluster --profile tls down -v --remove-orphans

docker-test: docker-image compose
	$(CARGO) build --workspace --examples
	bash scripts/docker-test.sh

# Figures, not assertions: writes docs/bench.md (BENCH_ROUNDS, BENCH_JOBS tune it).
bench: build
	@# Its own target dir: a bench build links dev features into the cdylib; the real module
	@# stays target/release/libechomq.so, built by `make build`.
	CARGO_TARGET_DIR=target/bench $(CARGO) bench --bench enqueue

# Figures, not assertions: the clients section of docs/bench.md (BENCH_CLIENT_ROUNDS and
# BENCH_CLIENT_JOBS tune it). The peers come from PyPI into the package's venv.
bench-clients: build python
	$(PY_VENV)/bin/pip install --quiet -e 'clients/python[dev,bench]'
	$(CARGO) build --release -p echomq-client --example drain
	@$(MAKE) --no-print-directory node-deps
	ECHOMQ_MODULE=$(CURDIR)/$(MODULE) $(PY_VENV)/bin/python clients/python/bench/clients.py

# The layer check (tests/layers.rs) reads src/ and console/src and fails on an upward import, an import cycle
# or unsafe code outside host/ (docs/architecture.md); the docs check (tests/docs.rs) fails on a
# README over 250 lines or a `protocol.md §N` that docs/protocol.md lacks; the shape check
# (tests/shape.rs) on a test file over 900 lines or a src/ file over 600 that gives no reason.
lint: deps python
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p echomq-client --all-targets --features otel -- -D warnings
	$(CARGO) test --test layers --test docs --test clients_table --test shape
	cd clients/python && ../../$(PY_VENV)/bin/mypy --strict src tests
	@# The package supports Python 3.9+: its syntax and standard library, checked against 3.9 (mypy
	@# checks types for the oldest Python it knows, pyproject.toml's python_version).
	cd clients/python && ../../$(PY_VENV)/bin/vermin -q -t=3.9- --no-tips --violations --eval-annotations src tests ../../examples/worker.py
	@$(MAKE) --no-print-directory lint-node

# The Node.js client (clients/node). Its dependency, node-redis v4, and tsc come from Debian
# (install-deps.sh --with-node); node_modules links to them where npm has not installed them,
# and NODE_PATH lets node-redis find its own @redis packages there. test-node runs its suites
# against real servers (single, 3-primary cluster, and beside the Python client's venv);
# lint-node type-checks index.d.ts against test/types.ts (tsc --strict) and src/ itself (checkJs).
.PHONY: node-deps test-node lint-node
NODE_DIR := clients/node
NODE_SHARE := /usr/share/nodejs
node-deps:
	@bash scripts/install-deps.sh --with-node
	@mkdir -p $(NODE_DIR)/node_modules
	@[ -e $(NODE_DIR)/node_modules/redis ] || ln -sfn $(NODE_SHARE)/redis $(NODE_DIR)/node_modules/redis
	@[ -e $(NODE_DIR)/node_modules/@redis ] || ln -sfn $(NODE_SHARE)/@redis $(NODE_DIR)/node_modules/@redis

test-node: build python node-deps
	cd $(NODE_DIR) && NODE_PATH=$(NODE_SHARE) ECHOMQ_MODULE=$(CURDIR)/$(MODULE) VALKEY_SERVER=$(VALKEY_SERVER) \
	  ECHOMQ_PYTHON=$(CURDIR)/$(PY_VENV)/bin/python node --test test/*.test.js

lint-node: node-deps
	cd $(NODE_DIR) && tsc -p tsconfig.json && tsc -p tsconfig.src.json

clean:
	$(CARGO) clean
