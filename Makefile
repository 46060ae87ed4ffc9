# Developer and CI entry points. Everything runs from the project's own virtualenv.
# `make test` is what CI runs (through .ci/run); it needs nothing but Python 3.11 and, as
# root on Debian, network access to install PostgreSQL.

SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 >/dev/null 2>&1 && echo python3.11 || echo python3)
VENV := .venv
STAMP := $(VENV)/.installed
# Where Debian's postgresql packages put the server binaries (overridable for testing
# this Makefile; likewise APT_GET).
PG_BIN_GLOB ?= /usr/lib/postgresql/*/bin
APT_GET ?= apt-get
PYTEST_ARGS ?=
# pytest-xdist workers for `make test`. Most of the suite's time is real processes waiting on
# leases and timers, not CPU (a whole run keeps 1.3-1.5 of the 2 cores busy), so 4 workers
# pay off even on 2 cores (560 s of pytest for 2,072 tests on a machine at 5.3 GB/s AES-GCM per core; 1,508 s for 3,019 on one at 2.3). 6 were no faster there
# (595-614 s: load 14-16 slows every process) and two of three runs lost a test to timing
# (a lease renewal, a Prometheus rule). PYTEST_WORKERS=0 runs it
# serially in one process. --dist loadgroup keeps the files of tests/support/xdist_sched.py's
# FILE_GROUPS on one worker each (one SparkSession, a module's shared cluster);
# --no-loadscope-reorder keeps the longest-first order it gives (xdist would put groups
# first, by size). Two per core this process may run on (nproc honours taskset): 4 on two
# cores; on one core (taskset -c 0), 4 workers starved the root services' 1-2 s leases
# (stepped down, statements refused OB_RS_NOT_MASTER, a dry run past its 60 s deadline).
PYTEST_WORKERS ?= $(shell echo $$(( 2 * $$(nproc) )))
# Where `make test` puts the tests' disposable files (its TMPDIR: pytest's tmp_path, the private
# PostgreSQL servers' data directories, the SQLite databases, the processes' logs): /dev/shm when
# it is a tmpfs with at least 4 GiB free (a whole run writes about 270 MB). On the 2-core CI
# machine (ext4 on a virtual disk) creating 400 files of 22 KB cost 250 ms of system CPU against
# 9 ms on tmpfs, and a PostgreSQL CREATE DATABASE (400 files) 55-120 ms; a PostgreSQL test made
# two, so the unit tests on 4 workers spent 40-80 % of the machine in the kernel (253 s against
# 175 s on tmpfs). TEST_TMPDIR= keeps the system's temporary directory.
TEST_TMPDIR ?= $(shell [ "$$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] && [ "$$(df -Pk /dev/shm | awk 'NR==2 {print $$4}')" -ge 4194304 ] && echo /dev/shm/ob-tests-$$(id -u))
TEST_ENV := $(if $(TEST_TMPDIR),TMPDIR=$(TEST_TMPDIR))

.PHONY: proto-compat setup pg-binaries mysql-clients browser faketime prometheus nftables test-partitions test demo demo-upgrade demo-spark-cluster bench bench-storm bench-mysql bench-spark bench-empty bench-parse bench-lease-path chaos soak-lag lint docs dist proto clean

# The Spark jobs (rootservice/jobs) read PostgreSQL through JDBC with Debian's driver jar.
PG_JDBC_JAR ?= /usr/share/java/postgresql.jar

setup: $(STAMP) pg-binaries mysql-clients browser faketime prometheus nftables
	@if [ ! -f $(PG_JDBC_JAR) ]; then \
	    if [ "$$(id -u)" != 0 ] || ! command -v $(firstword $(APT_GET)) >/dev/null 2>&1; then \
	        echo "$(PG_JDBC_JAR) (the PostgreSQL JDBC driver of the Spark jobs) not found: install Debian's libpostgresql-jdbc-java, e.g. 'sudo apt-get install libpostgresql-jdbc-java', or run 'make setup' as root." >&2; \
	        exit 1; \
	    fi; \
	    echo "Installing libpostgresql-jdbc-java with apt-get (the Spark jobs' JDBC driver)"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    $(APT_GET) install -y -q --no-install-recommends libpostgresql-jdbc-java </dev/null || \
	    { $(APT_GET) update -q && $(APT_GET) install -y -q --no-install-recommends libpostgresql-jdbc-java </dev/null; } || exit 1; \
	    [ -f $(PG_JDBC_JAR) ] || { echo "libpostgresql-jdbc-java installed but $(PG_JDBC_JAR) is missing" >&2; exit 1; }; \
	fi

# The MySQL-protocol tests drive the RS with real clients: Debian's mariadb
# command-line client, MariaDB Connector/J (a tiny Java program compiled with javac at test
# time) and so a JDK. Missing ones are installed with apt-get when run as root.
MARIADB_JAR ?= /usr/share/java/mariadb-java-client.jar
mysql-clients:
	@missing=""; \
	command -v mariadb >/dev/null 2>&1 || command -v mysql >/dev/null 2>&1 || missing="$$missing mariadb-client"; \
	[ -f $(MARIADB_JAR) ] || missing="$$missing libmariadb-java"; \
	command -v javac >/dev/null 2>&1 || missing="$$missing default-jdk-headless"; \
	[ -z "$$missing" ] && exit 0; \
	if [ "$$(id -u)" != 0 ] || ! command -v $(firstword $(APT_GET)) >/dev/null 2>&1; then \
	    echo "The MySQL-client tests need:$$missing (Debian packages): install them, e.g. 'sudo apt-get install$$missing', or run 'make setup' as root." >&2; \
	    exit 1; \
	fi; \
	echo "Installing$$missing with apt-get (the MySQL-client tests)"; \
	export DEBIAN_FRONTEND=noninteractive; \
	$(APT_GET) install -y -q --no-install-recommends $$missing </dev/null || \
	{ $(APT_GET) update -q && $(APT_GET) install -y -q --no-install-recommends $$missing </dev/null; } || exit 1; \
	[ -f $(MARIADB_JAR) ] || { echo "libmariadb-java installed but $(MARIADB_JAR) is missing" >&2; exit 1; }

# The dashboard test drives Debian's headless Chromium through selenium
# and Debian's chromedriver (selenium is never let to download a browser: CI has no internet).
# Missing ones are installed with apt-get when run as root.
CHROMIUM ?= /usr/bin/chromium
CHROMEDRIVER ?= /usr/bin/chromedriver
browser:
	@missing=""; \
	[ -x $(CHROMIUM) ] || missing="$$missing chromium"; \
	[ -x $(CHROMEDRIVER) ] || missing="$$missing chromium-driver"; \
	[ -z "$$missing" ] && exit 0; \
	if [ "$$(id -u)" != 0 ] || ! command -v $(firstword $(APT_GET)) >/dev/null 2>&1; then \
	    echo "The dashboard test needs:$$missing (Debian packages): install them, e.g. 'sudo apt-get install$$missing', or run 'make setup' as root." >&2; \
	    exit 1; \
	fi; \
	echo "Installing$$missing with apt-get (the dashboard test's headless browser)"; \
	export DEBIAN_FRONTEND=noninteractive; \
	$(APT_GET) install -y -q --no-install-recommends $$missing </dev/null || \
	{ $(APT_GET) update -q && $(APT_GET) install -y -q --no-install-recommends $$missing </dev/null; } || exit 1; \
	[ -x $(CHROMIUM) ] && [ -x $(CHROMEDRIVER) ] || { echo "chromium / chromium-driver installed but $(CHROMIUM) or $(CHROMEDRIVER) is missing" >&2; exit 1; }

# The wall-clock jump test runs the RS under Debian's libfaketime and steps
# its clock. Installed with apt-get when run as root; without it that one test is skipped.
FAKETIME_LIB ?= /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
faketime:
	@[ -f $(FAKETIME_LIB) ] && exit 0; \
	if [ "$$(id -u)" != 0 ] || ! command -v $(firstword $(APT_GET)) >/dev/null 2>&1; then \
	    echo "The wall-clock jump test needs Debian's faketime (libfaketime): install it, e.g. 'sudo apt-get install faketime', or run 'make setup' as root; the test is skipped meanwhile." >&2; \
	    exit 0; \
	fi; \
	echo "Installing faketime with apt-get (the wall-clock jump test)"; \
	export DEBIAN_FRONTEND=noninteractive; \
	$(APT_GET) install -y -q --no-install-recommends faketime </dev/null || \
	{ $(APT_GET) update -q && $(APT_GET) install -y -q --no-install-recommends faketime </dev/null; } || exit 1; \
	[ -f $(FAKETIME_LIB) ] || { echo "faketime installed but $(FAKETIME_LIB) is missing" >&2; exit 1; }

# The Prometheus test scrapes a real RS and agent with Debian's Prometheus
# server and checks the shipped deploy/prometheus files with its promtool. Missing ones are
# installed with apt-get when run as root (Debian's package never starts its service in a
# container whose policy-rc.d forbids it; the test runs its own server on loopback).
PROMETHEUS ?= /usr/bin/prometheus
PROMTOOL ?= /usr/bin/promtool
prometheus:
	@[ -x $(PROMETHEUS) ] && [ -x $(PROMTOOL) ] && exit 0; \
	if [ "$$(id -u)" != 0 ] || ! command -v $(firstword $(APT_GET)) >/dev/null 2>&1; then \
	    echo "The Prometheus test needs Debian's prometheus package (prometheus and promtool): install it, e.g. 'sudo apt-get install prometheus', or run 'make setup' as root." >&2; \
	    exit 1; \
	fi; \
	echo "Installing prometheus with apt-get (the Prometheus scrape test)"; \
	export DEBIAN_FRONTEND=noninteractive; \
	$(APT_GET) install -y -q --no-install-recommends prometheus </dev/null || \
	{ $(APT_GET) update -q && $(APT_GET) install -y -q --no-install-recommends prometheus </dev/null; } || exit 1; \
	[ -x $(PROMETHEUS) ] && [ -x $(PROMTOOL) ] || { echo "prometheus installed but $(PROMETHEUS) or $(PROMTOOL) is missing" >&2; exit 1; }

# The partition tests (tests/integration/test_*partitions.py) give every process its own network namespace and
# cut links between them with Debian's nftables (`nft`). Installed with apt-get when run as
# root; without root the tests cannot make namespaces at all and say so.
NFT ?= /usr/sbin/nft
nftables:
	@[ -x $(NFT) ] && exit 0; \
	if [ "$$(id -u)" != 0 ] || ! command -v $(firstword $(APT_GET)) >/dev/null 2>&1; then \
	    echo "The partition tests need Debian's nftables (nft) and root: install it, e.g. 'sudo apt-get install nftables', or run 'make setup' as root." >&2; \
	    exit 0; \
	fi; \
	echo "Installing nftables with apt-get (the partition tests)"; \
	export DEBIAN_FRONTEND=noninteractive; \
	$(APT_GET) install -y -q --no-install-recommends nftables </dev/null || \
	{ $(APT_GET) update -q && $(APT_GET) install -y -q --no-install-recommends nftables </dev/null; } || exit 1; \
	[ -x $(NFT) ] || { echo "nftables installed but $(NFT) is missing" >&2; exit 1; }

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall only when pyproject.toml changed since the last install.
$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install --disable-pip-version-check -q -e '.[dev,spark]'
	touch $@

# The test suite runs every database test on PostgreSQL too (tests/support/pgserver.py starts a
# private server), so the server binaries are a hard requirement. Installing Debian's
# package also creates a default cluster; one this install created is dropped again, since
# the tests never use it and it would only sit on port 5432.
pg-binaries:
	@if command -v initdb >/dev/null 2>&1 || ls $(PG_BIN_GLOB)/initdb >/dev/null 2>&1; then \
	    exit 0; \
	fi; \
	if [ "$$(id -u)" != 0 ]; then \
	    echo "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found." >&2; \
	    echo "Install them, e.g. 'sudo apt-get install postgresql' on Debian/Ubuntu," >&2; \
	    echo "or run 'make setup' as root to have it done." >&2; \
	    exit 1; \
	fi; \
	if ! command -v $(firstword $(APT_GET)) >/dev/null 2>&1; then \
	    echo "PostgreSQL server binaries not found and there is no apt-get: install PostgreSQL 15 (initdb, pg_ctl, postgres) yourself." >&2; \
	    exit 1; \
	fi; \
	before="$$(ls -d /etc/postgresql/*/main 2>/dev/null | tr "\n" " " || true)"; \
	echo "Installing PostgreSQL with apt-get (needed by the test suite)"; \
	export DEBIAN_FRONTEND=noninteractive; \
	$(APT_GET) update -q && \
	$(APT_GET) install -y -q --no-install-recommends postgresql </dev/null || exit 1; \
	for d in $$(ls -d /etc/postgresql/*/main 2>/dev/null); do \
	    case " $$before " in *" $$d "*) continue;; esac; \
	    v="$$(basename "$$(dirname "$$d")")"; \
	    pg_dropcluster --stop "$$v" main || true; \
	done; \
	if ! command -v initdb >/dev/null 2>&1 && ! ls $(PG_BIN_GLOB)/initdb >/dev/null 2>&1; then \
	    echo "apt-get installed postgresql but initdb is still missing" >&2; exit 1; \
	fi

# pytest rewrites the asserts of every test module it imports, 8 CPU-s for the suite, and
# keeps the result in __pycache__ unless PYTHONDONTWRITEBYTECODE is set (as it is on some CI
# machines). Each xdist worker imports every module, so one collection first, with bytecode
# allowed, fills the cache and the workers read it (3.5 CPU-s each instead of 8).
test: setup
	$(if $(TEST_TMPDIR),mkdir -p $(TEST_TMPDIR))
	-env -u PYTHONDONTWRITEBYTECODE $(TEST_ENV) $(VENV)/bin/pytest -q -p no:cacheprovider --collect-only $(PYTEST_ARGS) > /dev/null
	env -u PYTHONDONTWRITEBYTECODE $(TEST_ENV) $(VENV)/bin/pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=25 $(PYTEST_ARGS)

# Every network-fault scenario (tests/integration/test_partitions.py: each process on its own
# host in a network namespace, links cut or made lossy with nftables; test_rs_partitions.py:
# PostgreSQL and two root services on hosts of their own too); `make test` runs a short
# selection. Needs root. OB_PARTITION_SEED=<n> replays a run's printed seed.
test-partitions: setup
	OB_PARTITIONS=all $(VENV)/bin/pytest -q -p no:cacheprovider -s tests/unit/support/test_history.py tests/integration/test_partitions.py tests/integration/test_rs_partitions.py

demo: setup
	$(VENV)/bin/python -m rootservice.demo

# A rolling upgrade from the previous release (built from this repository's history into a
# virtualenv of its own under the temporary directory, offline) to this one, zone by zone, on
# SQLite: each stage with the cluster version, the checker's counts, then the previous
# release refused; under 3 minutes. OB_UPGRADE_SEED=<n> replays a run's restart order.
demo-upgrade: setup
	$(VENV)/bin/python -m tests.demo.upgrade

# A DELETE SERVER whose plans run on a Spark standalone master + worker
# (from the installed pyspark) reading a private PostgreSQL over JDBC; 4 minutes on a loaded 2-core machine.
demo-spark-cluster: setup
	$(VENV)/bin/python -m tests.demo.spark_cluster

# BENCH_ARGS go to the heartbeat benchmark, e.g. BENCH_ARGS="--agents 5000 --servers rs-tls,echo-tls
# --scrape-interval 0 --duration 30 --repeat 3" for the RS/echo ratio as a median of rounds.
BENCH_ARGS ?=
bench: setup
	$(VENV)/bin/python -m tests.bench.heartbeat_bench $(BENCH_ARGS)
	$(VENV)/bin/python -m tests.bench.mysql_bench $(BENCH_MYSQL_ARGS)
	$(VENV)/bin/python -m tests.bench.empty_bench $(BENCH_EMPTY_ARGS)
	$(VENV)/bin/python -m tests.bench.storm_bench $(BENCH_STORM_ARGS)

# Storms at 10,000 agents over mutual TLS: RS kill -9 and restart,
# 30 % of the agents silent at once, CPU hog and 1.5x capacity, failover on PostgreSQL;
# e.g. BENCH_STORM_ARGS="--quick" (N=200) or "--scenarios reconnect --down 80".
BENCH_STORM_ARGS ?=
bench-storm: setup
	$(VENV)/bin/python -m tests.bench.storm_bench $(BENCH_STORM_ARGS)

# The MySQL endpoint alone: statements/s and p99 of two dashboard queries over
# 1,000 servers, beside the same queries run directly against the database.
bench-mysql: setup
	$(VENV)/bin/python -m tests.bench.mysql_bench $(BENCH_MYSQL_ARGS)

# Emptying speed: DELETE SERVER of a server holding 2 GiB of replicas (4 LS)
# beside cp -r + sync of the same files on the same disk; e.g. BENCH_EMPTY_ARGS="--quick".
BENCH_EMPTY_ARGS ?=
bench-empty: setup
	$(VENV)/bin/python -m tests.bench.empty_bench $(BENCH_EMPTY_ARGS)

# Spark jobs beside pandas and SQL in PostgreSQL at 100k, 1M and 5M replicas;
# e.g. BENCH_SPARK_ARGS="--sizes 100k" for a quick run.
BENCH_SPARK_ARGS ?=
bench-spark: setup
	$(VENV)/bin/python tests/bench/spark_bench.py $(BENCH_SPARK_ARGS)

# The RS's own lease path without gRPC: CPU per heartbeat of LeaseStream -> receive_hb for
# 5,000 in-process streams; e.g. BENCH_LEASE_PATH_ARGS="--profile".
BENCH_LEASE_PATH_ARGS ?=
bench-lease-path: setup
	$(VENV)/bin/python -m tests.bench.lease_path_bench $(BENCH_LEASE_PATH_ARGS)

# The SQL parser and the admission token count on 1-4 MiB statements: the times the
# unit tests no longer assert; e.g. BENCH_PARSE_ARGS="--quick".
BENCH_PARSE_ARGS ?=
bench-parse: setup
	$(VENV)/bin/python -m tests.bench.parse_bench $(BENCH_PARSE_ARGS)

# RS failover under load: two root services on a private PostgreSQL, 200 agents,
# kill -9 / SIGSTOP / DELETE + kill -9 / PostgreSQL restart in turn; prints the figures.
CHAOS_ARGS ?=
chaos: setup
	$(VENV)/bin/python tests/chaos/chaos.py $(CHAOS_ARGS)

# The lag detector's false-positive check, agents SIGSTOPped 2 s every 20 s,
# for 10 minutes (the suite runs one 20 s cycle); prints the pauses and the LAGGING count.
soak-lag: setup
	OB_LAG_SOAK_S=600 $(VENV)/bin/pytest -q -p no:cacheprovider -s --timeout 900 \
	    tests/integration/test_lag.py -k paused

lint: docs proto-compat
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# Protocol evolution by protobuf's rules: obrpc.proto against the previous release's copy
# (releases/<version>/obrpc.proto, the release before pyproject's in obcommon/releases.toml),
# `buf breaking` with category WIRE_JSON (buf.yaml): fields and enum values only added,
# removed numbers and names reserved. Runs offline.
PREVIOUS_RELEASE ?= $(shell $(VENV)/bin/python -c "from obcommon import releases; t = releases.table(); print(t[-2].release if len(t) > 1 else t[0].release)")
proto-compat: $(STAMP)
	$(VENV)/bin/buf breaking --against . \
	    --against-config '{"version":"v2","modules":[{"path":"releases/$(PREVIOUS_RELEASE)"}]}'


# The manual (mkdocs.yml, docs/): --strict fails the build on a broken link, a missing page or
# an anchor that does not exist; the reference pages are generated from the code
# (docs/gen_ref.py). Built into site/ (git-ignored).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(VENV)/bin/mkdocs build --strict --quiet --site-dir site

# The release: the wheel and the sdist in dist/ (git-ignored).
dist: $(STAMP)
	rm -rf dist
	$(VENV)/bin/python -m build --outdir dist .

# mypy-protobuf's protoc plugins live in the venv's bin, hence the PATH.
proto:
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(VENV)/bin/python -m grpc_tools.protoc -I. \
	    --python_out=. --grpc_python_out=. --mypy_out=. --mypy_grpc_out=. \
	    obcommon/proto/obrpc.proto

clean:
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -print0 | xargs -0 rm -rf
	rm -rf .pytest_cache .mypy_cache .ruff_cache .hypothesis build
	rm -rf demo_data rs_data .bench .test-artifacts site dist
