"""Sending to the broker (portal/broker.py): one attempt, and after a failure none for
``BROKER_DOWN_SECONDS``, so decisions answer at once while Redis is down (#24 finding 2;
the live outage is tests/portal/test_redis_outage.py)."""

from __future__ import annotations

import time

import pytest
from kombu.exceptions import OperationalError

from portal import broker
from tests.factories import make_cluster


class Task:
    """What broker.send needs of a Celery task: ``apply_async``."""

    def __init__(self, *, fails: bool) -> None:
        self.fails, self.calls = fails, []

    def apply_async(self, args, countdown=None, retry=True):
        self.calls.append((args, countdown, retry))
        if self.fails:
            raise OperationalError("Error 111 connecting to unix socket. Connection refused.")


@pytest.fixture(autouse=True)
def _broker_up():
    broker._down_until = 0.0
    yield
    broker._down_until = 0.0


def test_a_failed_send_skips_sends_for_the_window_then_tries_again(settings, caplog):
    settings.BROKER_DOWN_SECONDS = 0.3
    down, up = Task(fails=True), Task(fails=False)
    assert broker.send(down, ("op-1",), what="operation op-1") is False
    assert down.calls == [(("op-1",), None, False)]  # one attempt, no publish retries
    assert "could not enqueue operation op-1" in caplog.text
    assert broker.send(up, ("op-2",), what="operation op-2") is False
    assert up.calls == []  # not even tried while the broker is known to be down
    deadline = time.monotonic() + 5
    while broker.is_down():
        assert time.monotonic() < deadline
    assert broker.send(up, ("op-3",), countdown=4, what="operation op-3") is True
    assert up.calls == [(("op-3",), 4, False)]


@pytest.mark.django_db
def test_a_manual_sync_while_the_broker_is_down_is_a_503(admin_api):
    make_cluster("prod")
    broker.mark_down()
    response = admin_api.post("/api/v1/clusters/prod/sync/")
    assert response.status_code == 503
    assert int(response["Retry-After"]) > 0
    assert "not queued" in response.json()["detail"]
