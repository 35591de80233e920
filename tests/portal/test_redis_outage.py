"""Redis down (#24, finding 2): a live portal (gunicorn, its own Redis) keeps answering,
fast and truthfully.

Before: every member write answered 500 (the write rate limit's cache read raised), and an
admin's approval got no answer for over 90 s although it was committed (the broker
publish retried a stopped Redis). Now: a write that needs Redis is a 503 with
``Retry-After`` and changes nothing; a committed decision answers at once, its operation
waits in the outbox for beat; reads keep working; and once Redis is back the same
processes recover without a restart.

Two kinds of outage: Redis killed (connections refused) and Redis stopped with SIGSTOP
(connections accepted, never answered: the kind that hangs a client without timeouts).
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import signal
import time
from pathlib import Path
from urllib.parse import quote

import pytest
import redis

from devstack.services import EmbeddedRedis
from portal.models import ApiToken
from quotas.models import Operation, QuotaRequest
from tests.conftest import _database_url_for_current_db
from tests.factories import make_cluster, make_node
from tests.quotas.builders import make_namespace, make_team, make_user
from tests.webserver import free_port, serving

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
GPU = "nvidia.com/gpu"
# No answer within this is a hang (before: over 90 s); every answer below must come sooner.
CLIENT_TIMEOUT = 20


@pytest.fixture
def own_redis(tmp_path):
    server = EmbeddedRedis(tmp_path / "redis", persistent=False)
    server.start(lambda _m: None)
    yield server
    if server.proc is not None and server.proc.poll() is None:
        os.kill(server.proc.pid, signal.SIGCONT)
    server.stop(lambda _m: None)


def start_web(tmp_path: Path, stack: contextlib.ExitStack, **overrides: str):
    """gunicorn serving the portal on the test database, with ``overrides`` in its env."""
    port = free_port()
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="portal.settings",
        DEBUG="false",
        DATABASE_URL=_database_url_for_current_db(),
        DB_CONN_MAX_AGE="0",
        QUOTA_CONFIRM_INLINE_SECONDS="0",
    )
    env.update(overrides)
    argv = ["gunicorn", "portal.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "1",
            "--threads", "4", "--timeout", "120"]  # fmt: skip
    log_path = tmp_path / f"web-{port}.log"
    stack.enter_context(serving(argv, env, port, log_path))
    return type("Web", (), {"port": port, "log": log_path})()


@pytest.fixture
def web(tmp_path, own_redis):
    with contextlib.ExitStack() as stack:
        # Every send tries the broker (the skip after a failure is tested in
        # test_broker.py), so the first decision after the outage is sent at once.
        yield start_web(tmp_path, stack, REDIS_URL=own_redis.url(), BROKER_DOWN_SECONDS="0")


def call(web, method: str, path: str, token: str, body: dict | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=CLIENT_TIMEOUT)
    try:
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        payload = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=payload, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
        return resp.status, dict(resp.getheaders()), json.loads(raw) if raw else None
    finally:
        conn.close()


@pytest.fixture
def world(db):
    prod = make_cluster("prod")
    make_node(prod, "a100-1", resources={GPU: (8, 8, 0)})
    member, admin = make_user("rob"), make_user("ada", staff=True)
    make_namespace(make_team("vision", members=[member]), prod, "vision-train")
    w = type("World", (), {})()
    w.member_token = ApiToken.issue(member, "t")[1]
    w.admin_token = ApiToken.issue(admin, "t")[1]
    return w


def file_request(web, world, amount: int = 1):
    return call(web, "POST", "/api/v1/quota-requests/", world.member_token,
                {"team": "vision", "namespace": "vision-train", "resource": GPU,
                 "amount": amount, "justification": "Training the detector."})  # fmt: skip


def queued_args(server: EmbeddedRedis) -> list[list]:
    """The arguments of the messages waiting in Celery's default queue of this Redis."""
    client = redis.Redis(unix_socket_path=str(server.socket_path))
    try:
        raw = client.lrange("celery", 0, -1)
    finally:
        client.close()
    return [json.loads(base64.b64decode(json.loads(m)["body"]))[0] for m in raw]


@pytest.mark.parametrize("outage", ["killed", "stopped"])
def test_redis_down_is_a_fast_503_for_writes_and_committed_decisions_answer(
    web, world, own_redis, outage
):
    status, _, first = file_request(web, world)
    assert status == 201, first
    status, _, second = file_request(web, world, amount=2)
    assert status == 201, second

    if outage == "killed":
        own_redis.proc.kill()
        own_redis.proc.wait()
    else:
        os.kill(own_redis.proc.pid, signal.SIGSTOP)

    # A member's write needs the rate limit's counter: 503 with Retry-After, nothing stored.
    status, headers, body = file_request(web, world, amount=3)
    assert status == 503, body
    assert int(headers["Retry-After"]) > 0
    assert "Redis" in body["detail"] and "Nothing was changed" in body["detail"]
    assert not QuotaRequest.objects.filter(amount=3).exists()

    # Reads need no Redis.
    status, _, page = call(web, "GET", "/api/v1/quota-requests/", world.member_token)
    assert status == 200 and page["count"] == 2

    # An admin's decision is committed and answered; its operation waits for beat.
    status, _, decided = call(web, "POST", f"/api/v1/quota-requests/{first['id']}/approve/",
                              world.admin_token, {})  # fmt: skip
    assert status == 200, decided
    assert decided["status"] == "approved"
    op = Operation.objects.get(requests=first["id"])
    assert op.status == "pending"

    # Redis back: the same web process recovers, without a restart.
    if outage == "killed":
        own_redis.start(lambda _m: None)
    else:
        os.kill(own_redis.proc.pid, signal.SIGCONT)
    deadline = time.monotonic() + 30
    while (status := file_request(web, world, amount=4)[0]) != 201:
        assert status == 503 and time.monotonic() < deadline, status
        time.sleep(0.2)
    status, _, decided = call(web, "POST", f"/api/v1/quota-requests/{second['id']}/approve/",
                              world.admin_token, {})  # fmt: skip
    assert status == 200, decided
    op = Operation.objects.get(requests=second["id"])
    assert [str(op.pk)] in queued_args(own_redis)


def test_a_database_that_does_not_answer_is_a_503_not_a_500(tmp_path, world):
    """PostgreSQL down: the token check (API) and the session (pages) cannot be read; the
    answer says so with Retry-After, on the API as JSON and on a page as HTML."""
    nowhere = tmp_path / "no-postgres"
    nowhere.mkdir()
    with contextlib.ExitStack() as stack:
        web = start_web(
            tmp_path,
            stack,
            DATABASE_URL=f"postgres://portal@/{quote(str(nowhere), safe='')}/portal",
        )
        status, headers, body = call(web, "GET", "/api/v1/quota-requests/", world.member_token)
        assert status == 503, body
        assert "database" in body["detail"] and int(headers["Retry-After"]) > 0
        conn = http.client.HTTPConnection("127.0.0.1", web.port, timeout=CLIENT_TIMEOUT)
        conn.request("GET", "/", headers={"Cookie": "sessionid=" + "a" * 32})
        resp = conn.getresponse()
        page = resp.read().decode()
        conn.close()
        assert resp.status == 503 and "database does not answer" in page
        assert resp.getheader("Retry-After")
