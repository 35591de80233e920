"""The suite in several processes (pytest-xdist): what each process must have of its own.

``make test`` runs the whole suite in ``TEST_WORKERS`` processes (``devstack/testrun.py``;
``--dist loadfile``: a file's tests stay in one process). Each process already has its own
PostgreSQL test database (pytest-django adds ``_gw0``, ``_gw1``... to the name) and its own
control plane (``tests/realcluster.py`` starts one per process, on free ports). This plugin,
loaded with ``-p tests.parallel`` before Django's settings are read, gives each process its
own Redis database too: the tests clear the cache, and the real Celery workers a test starts
take tasks from the broker, so two processes on one database would clear each other's
throttle counters and run each other's tasks.

Serial runs (no ``PYTEST_XDIST_WORKER``) keep database 0. A process's second database
(:func:`spare_redis_db`) is for a test whose subprocesses must reach no other test (beat).

The summary line (``tests/kubesim.py``) and the skipped prerequisites (``tests/prereqs.py``)
are counted where tests run; each process sends its counts home at the end
(``workeroutput``), and the controller adds them up before it prints.
"""

from __future__ import annotations

import os
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

WORKERS_MAX = 7  # Redis has 16 databases: 0 (serial), 1-7 (workers), 9-15 (their spares)


def worker_index() -> int | None:
    """0, 1, ... in an xdist worker (``gw0``, ``gw1``...); ``None`` in a serial run."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name[2:]) if name.startswith("gw") else None


def redis_db(url: str, db: int) -> str:
    """The same Redis, database ``db`` (redis-py's unix-socket or TCP spelling)."""
    parts = urlsplit(url)
    if parts.scheme == "unix":  # urlunsplit would drop the "//" of a scheme it does not know
        query = dict(parse_qsl(parts.query))
        query["db"] = str(db)
        return f"unix://{parts.path}?{urlencode(query)}"
    return urlunsplit(parts._replace(path=f"/{db}"))


def spare_redis_db(url: str) -> str:
    """This process's second database: what its subprocesses enqueue reaches no other test."""
    index = worker_index()
    return redis_db(url, 8 if index is None else 9 + index)


def _own_redis_database() -> None:
    index = worker_index()
    if index is None or "REDIS_URL" not in os.environ:
        return
    if index >= WORKERS_MAX:
        raise pytest.UsageError(f"at most {WORKERS_MAX} test processes (Redis has 16 databases)")
    os.environ["REDIS_URL"] = redis_db(os.environ["REDIS_URL"], 1 + index)


_own_redis_database()  # at import: before pytest-django reads the settings


def _counts() -> dict[str, list[str]]:
    from tests.kubesim import RAN_AGAINST
    from tests.prereqs import SKIPPED

    return {
        "real": sorted(RAN_AGAINST["real"]),
        "simulator": sorted(RAN_AGAINST["simulator"]),
        "skipped": sorted(SKIPPED),
    }


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In a worker: send what it counted to the controller."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["gpu_portal_counts"] = _counts()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """In the controller: add a finished worker's counts to its own."""
    from tests.kubesim import RAN_AGAINST
    from tests.prereqs import SKIPPED

    counts = getattr(node, "workeroutput", {}).get("gpu_portal_counts")
    if not counts:
        return
    RAN_AGAINST["real"].update(counts["real"])
    RAN_AGAINST["simulator"].update(counts["simulator"])
    SKIPPED.update(counts["skipped"])


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give each test a node id of its own. schemathesis' items (one per API operation,
    named ``test_x[GET /api/v1/...]``) share their function's node id under pytest 9, and
    xdist's ``loadfile`` scheduler keys work by node id: it would run one of the 73."""
    seen: dict[str, int] = {}
    for item in items:
        seen[item.nodeid] = seen.get(item.nodeid, 0) + 1
    for item in items:
        if seen[item.nodeid] > 1 and item.name not in item.nodeid:
            # pytest 9 builds a Function's id from ``originalname`` and its callspec
            # (_pytest/python.py Function.__init__); schemathesis passes no callspec.
            item._id = item.parent.id.child(item.name)
