"""A cluster that does not answer (#24, finding 5): each attempt of an operation ends within
QUOTA_ATTEMPT_SECONDS, and the operation says "cluster unreachable since ..." from the
first unanswered attempt on, on the API and the request's page.

Before, an attempt's calls each waited KUBE_REQUEST_TIMEOUT (30 s) with two retries, so an
operation showed "running" for over a minute with an earlier attempt's error. The cluster
here is a TCP listener that accepts connections and never answers: what a stopped API
server or a black-holed route looks like to a client.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
from django.utils import timezone

from quotas.apply import run_operation
from quotas.models import Operation, OperationAttempt
from tests.conftest import api_for
from tests.factories import make_cluster
from tests.quotas.builders import make_grant, make_namespace, make_team

pytestmark = pytest.mark.django_db


@pytest.fixture
def silent_port():
    """A listener that accepts and never says a word (not even the TLS handshake)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def test_an_attempt_ends_in_time_and_the_operation_says_since_when(
    settings, silent_port, researcher
):
    settings.QUOTA_ATTEMPT_SECONDS = 1.5  # KUBE_REQUEST_TIMEOUT stays 30 s, retries 2
    cluster = make_cluster("dark", auth_method="token", api_url=f"https://127.0.0.1:{silent_port}",
                           bearer_token="t", verify_tls=False)  # fmt: skip
    team = make_team("vision", members=[researcher])
    ns = make_namespace(team, cluster, "vision-train")
    make_grant(ns, 4)
    op = Operation.objects.create(namespace=ns, reason="approval")

    started = time.monotonic()
    assert run_operation(op.pk) == "pending"
    # Within its time (and far from 3 x 30 s); the margin is for a loaded machine.
    assert time.monotonic() - started < 10
    op.refresh_from_db()
    first = OperationAttempt.objects.get(operation=op, number=1)
    assert first.finished_at is not None and first.error
    assert op.unreachable_since == first.started_at
    assert op.last_error.startswith("cluster dark unreachable since ")

    Operation.objects.filter(pk=op.pk).update(next_attempt_at=timezone.now())
    assert run_operation(op.pk) == "pending"
    op.refresh_from_db()
    assert op.attempts == 2
    assert op.unreachable_since == first.started_at  # since the first unanswered attempt

    body = api_for(researcher).get(f"/api/v1/operations/{op.pk}/").json()
    assert body["unreachable_since"] is not None
    assert "unreachable since" in body["last_error"]
