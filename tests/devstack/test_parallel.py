"""`make test` in several processes: how many, and what each has of its own (tests/parallel.py)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from devstack.testrun import default_workers, parallel_args
from tests.parallel import redis_db, spare_redis_db, worker_index


def _db(url: str) -> int:
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return int(parse_qs(parts.query)["db"][0])
    return int(parts.path.lstrip("/") or 0)


def test_redis_db_keeps_the_server_and_changes_only_the_database() -> None:
    assert redis_db("unix:///tmp/a b/redis.sock?db=0", 3) == "unix:///tmp/a b/redis.sock?db=3"
    assert redis_db("unix:///tmp/r.sock", 2) == "unix:///tmp/r.sock?db=2"
    assert redis_db("redis://:pw@cache:6379/0", 5) == "redis://:pw@cache:6379/5"


@pytest.mark.parametrize(
    ("env", "args", "expected"),
    [
        ({}, [], ["-n", str(default_workers()), "--dist", "loadfile"]),
        ({"TEST_WORKERS": "3"}, ["tests/quotas", "-x"], ["-n", "3", "--dist", "loadfile"]),
        ({"TEST_WORKERS": "1"}, [], []),
        ({"TEST_WORKERS": "4"}, ["-n", "2"], []),  # the arguments choose
        ({"TEST_WORKERS": "4"}, ["--numprocesses=2"], []),
        ({"TEST_WORKERS": "4"}, ["tests/quotas", "--pdb"], []),  # a debugger needs one process
    ],
)
def test_parallel_args(env, args, expected) -> None:
    if default_workers() <= 1 and not env:
        expected = []
    assert parallel_args(args, env) == expected


def test_default_is_one_more_than_the_cores_and_at_most_six() -> None:
    assert (default_workers(1), default_workers(2), default_workers(4)) == (2, 3, 5)
    assert default_workers(32) == 6


def test_this_process_has_its_own_redis_database(settings) -> None:
    """gw0 uses database 1, gw1 database 2...; a serial run database 0. The cache and the
    Celery broker both follow REDIS_URL."""
    index = worker_index()
    expected = 0 if index is None else 1 + index
    assert _db(settings.REDIS_URL) == expected
    assert _db(settings.CACHES["default"]["LOCATION"]) == expected
    assert _db(spare_redis_db(settings.REDIS_URL)) == (8 if index is None else 9 + index)


def test_every_collected_test_has_a_node_id_of_its_own(request) -> None:
    """xdist's loadfile scheduler keys work by node id: a shared one runs once
    (schemathesis' per-operation items under pytest 9; tests/parallel.py)."""
    ids = [item.nodeid for item in request.session.items]
    assert len(set(ids)) == len(ids)
