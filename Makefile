# The two commands a new developer needs: `make demo` and `make test`.
# Both bootstrap .venv from the pinned requirements and reuse it while they are unchanged.

PYTHON ?= python3
VENV := .venv
VENV_PY := $(VENV)/bin/python
# Holds the hash of both requirement files the venv was last installed from.
STAMP := $(VENV)/.requirements.sha256
REQUIREMENTS := requirements.txt requirements-dev.txt
PIP_FLAGS := -qq --disable-pip-version-check --no-input
# Extra arguments for pytest: make test ARGS="-k quota -x"
ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help venv k8s demo test lint fmt bench bench-quota bench-ingest bench-auth bench-signin \
	bench-telemetry bench-podruns bench-worker-kill bench-pages bench-reclaim

help:
	@echo "make demo   run the portal with the demo cluster, embedded Postgres and Redis,"
	@echo "            a Celery worker and beat (Ctrl-C stops everything)"
	@echo "make test   run the whole test suite (ARGS=\"...\" passes arguments to pytest)"
	@echo "make k8s    build the real control plane (kube-apiserver, etcd, controller manager,"
	@echo "            scheduler, kwok, Kueue) from pinned Go modules into a shared cache"
	@echo "make lint   ruff format --check, ruff check, manage.py check"
	@echo "make fmt    ruff format and ruff check --fix"
	@echo "make bench  inventory sync benchmark at 5,000 nodes / 150,000 pods (ARGS to adjust)"
	@echo "make bench-quota  1,000 requests approved by 4 concurrent admins over the API"
	@echo "make bench-ingest  5,000 simulated node agents posting 8-GPU reports (500/s)"
	@echo "make bench-auth  what authentication and RBAC cost per request in the simulated cluster"
	@echo "make bench-telemetry  telemetry pages at 5,000 nodes x 8 GPUs: Prometheus source vs agent ingest"
	@echo "make bench-podruns  recording ended GPU pods and a month of allocated GPU-hours at fleet size"
	@echo "make bench-reclaim  the idle-grant reclaim pass over 5,000 team namespaces"
	@echo "make bench-worker-kill  a worker killed with kill -9 mid-apply: time until its operation completes"
	@echo "make bench-pages  every page and API list, admin and member, cold and warm, at 500 and 5,000 nodes, then bench-telemetry"
	@echo "make venv   create or update .venv from $(REQUIREMENTS)"

# Always runs (cheap): creates .venv if it is missing or broken, and installs when the stamp
# does not match the requirement files (including a hand-made venv that has no stamp yet).
venv:
	@if ! $(VENV_PY) -c "" >/dev/null 2>&1; then \
		$(PYTHON) -c "import sys; sys.exit(sys.version_info < (3, 11))" 2>/dev/null || { \
			echo "Python 3.11 or newer is needed to create $(VENV); try: make $@ PYTHON=python3.11"; \
			exit 1; }; \
		echo "Creating $(VENV) with $$($(PYTHON) --version 2>&1)..."; \
		$(PYTHON) -m venv --clear $(VENV) || exit 1; \
	fi; \
	hash=$$(cat $(REQUIREMENTS) | $(VENV_PY) -c "import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())") || exit 1; \
	if [ "$$(cat $(STAMP) 2>/dev/null)" != "$$hash" ]; then \
		echo "Installing $(REQUIREMENTS) into $(VENV) (only when they change)..."; \
		$(VENV_PY) -m pip install $(PIP_FLAGS) -r requirements-dev.txt || exit 1; \
		echo "$$hash" > $(STAMP); \
	fi

# The control plane's binaries (stdlib Python: no venv needed). `make test` and `make demo`
# build them too when Go is there and they are missing.
k8s:
	$(PYTHON) -m devstack.k8sbuild

demo: venv
	$(VENV_PY) -m devstack demo

test: venv
	$(VENV_PY) -m devstack test $(ARGS)

lint: venv
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(VENV_PY) manage.py check

fmt: venv
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: venv
	$(VENV_PY) -m devstack run -- $(VENV_PY) bench/sync_bench.py $(ARGS)

bench-quota: venv
	$(VENV_PY) -m devstack run -- $(VENV_PY) bench/quota_bench.py $(ARGS)

bench-ingest: venv
	$(VENV_PY) -m devstack run -- $(VENV_PY) bench/ingest_bench.py $(ARGS)

bench-auth: venv
	$(VENV_PY) bench/auth_bench.py $(ARGS)

bench-signin: venv
	$(VENV_PY) -m devstack run -- $(VENV_PY) bench/signin_bench.py $(ARGS)

bench-telemetry: venv
	$(VENV_PY) -m devstack run -- $(VENV_PY) bench/telemetry_bench.py $(ARGS)

bench-podruns: venv
	$(VENV_PY) -m devstack run -- $(VENV_PY) bench/podruns_bench.py $(ARGS)

bench-reclaim: venv
	$(VENV_PY) -m devstack run -- $(VENV_PY) bench/reclaim_bench.py $(ARGS)

bench-pages: venv
	$(VENV_PY) -m devstack run -- $(VENV_PY) bench/pages_bench.py $(ARGS)

bench-worker-kill: venv
	$(VENV_PY) -m devstack run -- $(VENV_PY) bench/worker_kill_bench.py $(ARGS)
