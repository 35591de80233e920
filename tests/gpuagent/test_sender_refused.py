"""A report the portal refuses (4xx) is dropped with a log line; the buffer moves on.

Against the real portal (``live_server``: Django, PostgreSQL, a real node token): a report
with NUL or a lone surrogate in a text field used to be a 500, which the agent retries, so
its buffer stalled behind a report that could never be accepted. Now the portal answers
400 and the agent drops that one report and delivers the next.
"""

from __future__ import annotations

import logging
import time

import pytest

from gpuagent.report import iso_timestamp
from gpuagent.sender import Sender, reports_url
from telemetry import tokens
from telemetry.models import GpuState
from tests.factories import make_cluster, make_node, make_pod


def _report(n: int, **gpu) -> dict:
    return {
        "node": "a100-00",
        "timestamp": iso_timestamp(time.time() - 60 + n),
        "agent_version": "0.1.0",
        "gpus": [{"index": 0, "name": "NVIDIA A100", **gpu}],
    }


@pytest.fixture
def sender(live_server, transactional_db):
    node = make_node(make_cluster("agents"), "a100-00")
    make_pod(node, "train-0", namespace="ml")  # the reports' process runs in it
    _, raw = tokens.issue(node)
    return Sender(reports_url(live_server.url), lambda: raw, timeout_s=10, rand=lambda: 1.0)


@pytest.mark.parametrize("bad", ["A100\u0000", "A100\ud800"], ids=["nul", "surrogate"])
def test_refused_report_is_dropped_and_the_next_delivered(sender, caplog, bad):
    sender.enqueue(_report(0, name=bad))
    sender.enqueue(_report(1, processes=[{"pid": 7, "pod": "ml/train-0"}]))
    with caplog.at_level(logging.ERROR, logger="gpuagent.sender"):
        assert sender.flush() == 1
    assert not sender.buffer and sender.rejected == 1 and sender.sent == 1
    assert sender.failures == 0 and sender.next_attempt == 0  # no backoff: not retried
    assert "(HTTP 400), not retrying" in caplog.text and "gpus[0].name" in caplog.text
    assert GpuState.objects.get().processes[0]["pod"] == "ml/train-0"


def test_report_that_is_not_json_is_dropped_before_posting(sender, caplog):
    sender.enqueue(_report(0, power_w=float("nan")))
    sender.enqueue(_report(1))
    with caplog.at_level(logging.ERROR, logger="gpuagent.sender"):
        assert sender.flush() == 1
    assert sender.rejected == 1 and not sender.buffer
    assert "not valid JSON" in caplog.text
