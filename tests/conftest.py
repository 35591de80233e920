"""Shared fixtures: personas, API clients, and a simulated cluster per test.

The database is the real PostgreSQL named by DATABASE_URL (``make test`` starts an embedded
one); Redis likewise.
"""

from __future__ import annotations

import os

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from portal.models import ApiToken


@pytest.fixture(autouse=True)
def _fast_settings(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # Operations run in this process finish in one call (no Celery worker runs the
    # confirm tasks here); workers started by tests keep the production default, and
    # tests/quotas/test_apply.py covers the hand-over itself.
    settings.QUOTA_CONFIRM_INLINE_SECONDS = 5.0


@pytest.fixture(scope="session", autouse=True)
def _credential_dirs(tmp_path_factory):
    """Tests' clusters have their kubeconfigs and token files under pytest's temporary
    directory: the portal may read credentials there too (for workers this process
    starts as well, through the environment)."""
    from django.conf import settings

    dirs = [*settings.CLUSTER_CREDENTIAL_DIRS, str(tmp_path_factory.getbasetemp())]
    before_env = os.environ.get("CLUSTER_CREDENTIAL_DIRS")
    before, settings.CLUSTER_CREDENTIAL_DIRS = settings.CLUSTER_CREDENTIAL_DIRS, dirs
    os.environ["CLUSTER_CREDENTIAL_DIRS"] = ",".join(dirs)
    yield
    settings.CLUSTER_CREDENTIAL_DIRS = before
    if before_env is None:
        os.environ.pop("CLUSTER_CREDENTIAL_DIRS", None)
    else:
        os.environ["CLUSTER_CREDENTIAL_DIRS"] = before_env


@pytest.fixture(autouse=True)
def _clear_cache():
    """Throttle counters live in the (real) Redis cache: start every test with none."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture
def admin_user(db):
    return get_user_model().objects.create_user(
        "alice-admin", "alice@example.com", "pw-admin-1", is_staff=True, is_superuser=True
    )


@pytest.fixture
def researcher(db):
    return get_user_model().objects.create_user("rob", "rob@example.com", "pw-researcher-1")


def api_for(user) -> APIClient:
    """An API client authenticated with a fresh personal token of ``user``."""
    return _token_client(user)


def _token_client(user) -> APIClient:
    _, raw = ApiToken.issue(user, "test")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


@pytest.fixture
def admin_api(admin_user) -> APIClient:
    return _token_client(admin_user)


@pytest.fixture
def researcher_api(researcher) -> APIClient:
    return _token_client(researcher)


@pytest.fixture
def anon_api() -> APIClient:
    return APIClient()


# -- the cluster ---------------------------------------------------------------------------


@pytest.fixture
def sim(tmp_path):
    """An empty cluster: the real control plane, reset for this test (tests/kubesim.py).

    ``sim.kubeconfig_path`` holds the portal's ServiceAccount token (RBAC from deploy/);
    ``sim.admin_kubeconfig_path`` the cluster admin's.
    """
    from tests import kubesim

    cluster = kubesim.start({}, tmp_path)
    yield cluster
    cluster.stop()


@pytest.fixture
def sim_api(sim):
    """The official client's CoreV1Api as the cluster admin (for arranging a test)."""
    from tests import kubesim

    core = kubesim.admin_core_api(sim)
    yield core
    core.api_client.close()


@pytest.fixture
def sim_cluster(db, sim):
    from inventory.models import Cluster

    return Cluster.objects.create(
        slug="sim",
        name="Simulated",
        auth_method=Cluster.AuthMethod.KUBECONFIG,
        kubeconfig_path=str(sim.kubeconfig_path),
    )


# -- a real Celery worker -----------------------------------------------------------------


def _database_url_for_current_db() -> str:
    from urllib.parse import quote

    from django.db import connection

    s = connection.settings_dict
    auth = quote(s["USER"] or "")
    if s["PASSWORD"]:
        auth += ":" + quote(s["PASSWORD"])
    host = s["HOST"] or ""
    if host.startswith("/"):  # a unix socket directory: django-environ's form
        return f"postgres://{auth}@/{quote(host, safe='')}/{s['NAME']}"
    port = f":{s['PORT']}" if s["PORT"] else ""
    return f"postgres://{auth}@{host}{port}/{s['NAME']}"


@pytest.fixture
def start_worker(transactional_db, tmp_path):
    """Start real ``celery worker`` subprocesses on the test database and the test Redis.

    ``start_worker(**env)`` returns the process (with ``log_path``); ``kill(proc)`` sends
    SIGKILL as a crash would. Every worker still running is stopped at teardown.
    """
    import itertools
    import os
    import signal
    import subprocess
    import sys
    import time

    from django.conf import settings

    procs = []
    numbers = itertools.count(1)

    def start(**extra_env):
        n = next(numbers)
        env = dict(os.environ, DATABASE_URL=_database_url_for_current_db(), DB_CONN_MAX_AGE="0")
        env["REDIS_URL"] = settings.REDIS_URL
        env.update({k: str(v) for k, v in extra_env.items()})
        log_path = tmp_path / f"worker-{n}.log"
        log = open(log_path, "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "portal", "worker", "-P", "solo",
             "-n", f"test{n}@%h", "--without-gossip", "--without-mingle",
             "--without-heartbeat", "-l", "INFO"],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        proc.log_path, proc.log_file = log_path, log
        procs.append(proc)
        deadline = time.monotonic() + 30
        while b"ready." not in log_path.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(log_path.read_text()[-3000:])
            time.sleep(0.2)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        proc.log_file.close()


def kill(proc) -> None:
    """SIGKILL a worker and its children, as a crash or an OOM kill would."""
    import os
    import signal

    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@pytest.fixture
def celery_worker(start_worker):
    """One real worker for the test."""
    return start_worker()


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.2):
    """Poll until ``predicate()`` is truthy; return its value or fail with a timeout."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


@pytest.fixture
def on_commit(django_capture_on_commit_callbacks):
    """Run (or capture) ``transaction.on_commit`` callbacks inside a test transaction."""
    return django_capture_on_commit_callbacks


def pytest_runtest_logreport(report):
    """Count the simulator's own tests for the summary line (tests/kubesim.py)."""
    if report.when == "call" and report.nodeid.startswith("tests/simcluster/"):
        from tests.kubesim import SIMULATOR_SUITE

        SIMULATOR_SUITE.add(report.nodeid)


def pytest_sessionfinish(session):
    """Stop the session's control plane (tests/realcluster.py), if a test started one."""
    import sys

    if "tests.realcluster" in sys.modules:
        sys.modules["tests.realcluster"].stop_session()


def pytest_terminal_summary(terminalreporter):
    """Name every missing test prerequisite, once; then what the cluster tests ran against."""
    from tests.kubesim import summary
    from tests.prereqs import SKIPPED

    if SKIPPED:
        terminalreporter.section("skipped: missing test prerequisites")
        for line in sorted(SKIPPED):
            terminalreporter.write_line(f"  {line}")
    terminalreporter.write_line(summary())
