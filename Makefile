# rackplane: the two commands a fresh machine needs are `make up` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
SRC    := rackplane tests bench scripts
# pytest-xdist workers for `make test` (its broker tests mostly wait: two workers on two cores
# took 11m20s where one took 13m08s, both on a loaded machine; `make test TEST_WORKERS=0` runs
# serially)
TEST_WORKERS ?= 2

.PHONY: up demo test test-kafka test-acl test-k8s test-slurm test-rules test-faults lint bench bench-kafka bench-k8s bench-slurm clean kcat

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "rackplane needs Python >= 3.11 (set PYTHON=...)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# Stamps: reinstall when pyproject.toml changes.
$(VENV)/.runtime: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	@touch $@

$(VENV)/.dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@ $(VENV)/.runtime

## up: create the virtualenv, install, and run broker + worker + demo load until Ctrl-C
up: $(VENV)/.runtime
	$(BIN)/rackplane up

## demo: the short in-process story (no broker)
demo: $(VENV)/.runtime
	$(BIN)/rackplane demo

## kcat: the Kafka CLI client for the interop tests, into the venv when not on PATH (no root)
kcat: | $(BIN)/python
	@sh scripts/kcat/install.sh $(VENV)

## test: lint, type-check (strict on the pure core) and run every test (Tansu broker tier too)
test: $(VENV)/.dev kcat
	$(BIN)/ruff check $(SRC)
	$(BIN)/ruff format --check $(SRC)
	$(BIN)/mypy
	$(BIN)/pytest -n $(TEST_WORKERS)

## test-kafka: the broker contract suite against a real Apache Kafka 4.x (KRaft), fetched with Maven
test-kafka: $(VENV)/.dev kcat
	$(BIN)/python scripts/kafka/kafka_server.py run -- $(BIN)/pytest -m broker tests/broker tests/streams

## test-acl: the broker enforces who writes what (issue 16): Apache Kafka with SASL/SCRAM and an
## authorizer, the ACLs of `rackplane config acls` applied with Kafka's kafka-acls
test-acl: $(VENV)/.dev
	$(BIN)/python scripts/kafka/kafka_server.py run --acl -- $(BIN)/pytest -m acl tests/acl

## test-k8s: the Kubernetes tier (issue 17): etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kwok built from the Go module
## proxy (cached under ~/.cache/rackplane, keyed by version; ~9-17 min cold), started on 127.0.0.1
test-k8s: $(VENV)/.dev
	$(BIN)/python scripts/k8s/control_plane.py run -- $(BIN)/pytest -m k8s tests/k8s

## test-slurm: the Slurm tier (issue 18): a real slurmctld 22.05 with a slurmd per node (3 racks x 18),
## from Debian's packages unpacked into ~/.cache/rackplane (apt-get download, no install), on 127.0.0.1
test-slurm: $(VENV)/.dev
	$(BIN)/python scripts/slurm/slurm_cluster.py run --job-submit-lua deploy/slurm/job_submit.lua -- $(BIN)/pytest -m slurm tests/slurm

## test-rules: the Prometheus alerting rules (deploy/prometheus) checked and unit-tested by promtool, built
## from the Go module proxy (cached under ~/.cache/rackplane, keyed by version; ~3-5 min cold)
test-rules:
	$(PYTHON) scripts/prometheus/promtool.py test

## test-faults: the fault suite (issue 15): brokers killed and paused, workers crashed, bad
## input; on Apache Kafka 4.x (the suite starts its own) and on the embedded broker where a
## case applies; each case's counts go to $RACKPLANE_FAULT_REPORT (a directory) when set
test-faults: $(VENV)/.dev
	$(BIN)/python scripts/kafka/kafka_server.py fetch
	$(BIN)/pytest -m faults tests/faults

## bench: benchmarks; results go to docs/BENCHMARKS.md by hand, with the machine and date
bench: $(VENV)/.dev
	$(BIN)/python -m bench
	$(BIN)/python -m bench --only sim
	$(BIN)/python -m bench --only scaling

## bench-kafka: the streaming benchmark on a real Apache Kafka 4.x (KRaft), fetched with Maven
bench-kafka: $(VENV)/.dev
	$(BIN)/python scripts/kafka/kafka_server.py run -- \
		sh -c '$(BIN)/python -m bench --only streams --broker "$$RACKPLANE_TEST_BROKER"'

## bench-k8s: the Kubernetes adapter on the test control plane (128 racks x 18 kwok nodes)
bench-k8s: $(VENV)/.dev
	$(BIN)/python scripts/k8s/control_plane.py run -- $(BIN)/python -m bench --only kube

## bench-slurm: Slurm alone (--switches) against rackplane slurm on one seeded job trace with node
## failures, one after the other on the Slurm test cluster (8 racks x 18 nodes); ~12 min
bench-slurm: $(VENV)/.dev
	$(BIN)/python scripts/slurm/slurm_cluster.py run --racks 8 -- $(BIN)/python -m bench --only slurm

lint: $(VENV)/.dev
	$(BIN)/ruff check $(SRC)
	$(BIN)/ruff format --check $(SRC)
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
