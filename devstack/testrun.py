"""``make test``: the whole suite against real PostgreSQL and Redis, on a clean machine too.

The test services live in ``$DATA_DIR/test`` so a running demo and a test run never share a
socket or a database.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from . import REPO_ROOT, data_dir
from .prereqs import install_missing
from .services import ServiceError, data_lock, start_services

NO_TESTS_COLLECTED = 5


def log(message: str) -> None:
    """devstack's own lines, told apart from pytest's."""
    print(f"devstack| {message}", flush=True)


def run_foreground(argv: Sequence[str], env: dict[str, str]) -> int:
    """Run a command in our process group (Ctrl-C reaches it directly); forward SIGTERM."""
    proc = subprocess.Popen(list(argv), env=env, cwd=REPO_ROOT)

    def forward(signum: int, _frame: object) -> None:
        proc.send_signal(signum)

    # SIGINT already reaches the child from the terminal; we must only survive it.
    previous = {
        signal.SIGINT: signal.signal(signal.SIGINT, lambda *_: None),
        signal.SIGTERM: signal.signal(signal.SIGTERM, forward),
        signal.SIGHUP: signal.signal(signal.SIGHUP, forward),
    }
    try:
        return proc.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def run_tests(pytest_args: Sequence[str]) -> int:
    """Services, migration check, pytest; returns pytest's exit code (no tests is a failure)."""
    root = data_dir() / "test"
    try:
        with data_lock(root, wait=True, what="test run", log=log):
            services = start_services(root, persistent=False, log=log)
            try:
                return _run(services.env(), services.describe(), root, pytest_args)
            finally:
                services.stop(log)
    except ServiceError as exc:
        log(f"error: {exc}")
        return 2


def run_command(argv: Sequence[str]) -> int:
    """Run any command (benchmarks, a one-off manage.py) with its own embedded services.

    The services live in ``$DATA_DIR/run``, apart from the demo's and the tests'.
    """
    if not argv:
        log("usage: python -m devstack run -- COMMAND [ARGS...]")
        return 2
    root = data_dir() / "run"
    try:
        with data_lock(root, wait=True, what="devstack run", log=log):
            services = start_services(root, persistent=False, log=log)
            try:
                for note in services.describe():
                    log(note)
                env = dict(os.environ)
                env.update(services.env())
                env["DATA_DIR"] = str(root)
                # Benchmarks write their clusters' kubeconfigs to temporary directories.
                env.setdefault("CLUSTER_CREDENTIAL_DIRS", f"{tempfile.gettempdir()},{root}")
                env.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
                return run_foreground(argv, env)
            finally:
                services.stop(log)
    except ServiceError as exc:
        log(f"error: {exc}")
        return 2


def ensure_control_plane(log) -> bool:
    """Build the real control plane's binaries when Go is there and they are missing.

    Without Go (or when the build fails) the tests that need it skip, naming the cause.
    """
    from . import k8sbuild

    if k8sbuild.installed_dir() is not None:
        return True
    if k8sbuild.go_binary() is None:
        log("Go not found: tests against the real control plane will skip (Go 1.24+ builds it)")
        return False
    try:
        k8sbuild.build(out=log)
    except k8sbuild.BuildError as exc:
        log(f"the control plane did not build; its tests will skip: {exc}")
        return False
    return True


def default_workers(cores: int | None = None) -> int:
    """One more process than cores (half a test's time is waiting on a control plane), at
    most 6. Measured on 2 cores, the whole suite (docs/development.md): 1 process 1,303 s,
    2 processes 834 s, 3 processes 592 s."""
    return min((cores or os.cpu_count() or 1) + 1, 6)


def parallel_args(args: Sequence[str], env: dict[str, str]) -> list[str]:
    """``-n N --dist loadfile`` for pytest-xdist (a file's tests stay in one process), or
    nothing: when ``TEST_WORKERS`` is 1, or the arguments choose (``-n``) or need one
    process (``--pdb``). Each process has its own database, Redis database and control
    plane (tests/parallel.py)."""
    raw = env.get("TEST_WORKERS", "").strip()
    workers = int(raw) if raw.isdigit() else default_workers()
    chosen = any(a in ("-n", "--pdb", "--trace") or a.startswith(("-n", "--numprocesses"))
                 for a in args)  # fmt: skip
    if workers <= 1 or chosen:
        return []
    return ["-n", str(workers), "--dist", "loadfile"]


def _run(service_env: dict[str, str], notes: list[str], root: Path, args: Sequence[str]) -> int:
    for note in notes:
        log(note)
    env = dict(os.environ)
    env.update(service_env)
    env["DATA_DIR"] = str(root)
    env.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    py = sys.executable

    rc = run_foreground([py, "manage.py", "makemigrations", "--check", "--dry-run"], env)
    if rc != 0:
        log("a model change has no migration: run `.venv/bin/python manage.py makemigrations`")
        return rc

    install_missing(log)
    ensure_control_plane(log)
    workers = parallel_args(args, env)
    if workers:
        log(f"{workers[1]} test processes (TEST_WORKERS; 1 runs them in this one)")
    rc = run_foreground([py, "-m", "pytest", *workers, *(args or ["tests/"])], env)
    if rc == NO_TESTS_COLLECTED:
        log("pytest collected no tests; treating that as a failure")
    return rc
