"""Delivery against a tiny local HTTP server: success, outage buffer, recovery, 4xx, backoff."""

from __future__ import annotations

import logging
import socket

from gpuagent.report import iso_timestamp
from gpuagent.sender import Sender, reports_url


def report(clock_now: float, n: int = 0) -> dict:
    return {"node": "n1", "timestamp": iso_timestamp(clock_now), "agent_version": "0.1.0", "n": n}


def make_sender(url: str, clock, **kw) -> Sender:
    kw.setdefault("rand", lambda: 1.0)  # no jitter: the upper bound of each backoff
    return Sender(reports_url(url), lambda: "tok-1", clock=clock, timeout_s=2, **kw)


def closed_port_url() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


def test_reports_url():
    assert reports_url("http://p:8000") == "http://p:8000/api/v1/agent/reports/"
    assert reports_url("http://p:8000/") == "http://p:8000/api/v1/agent/reports/"
    assert reports_url("http://p/api/v1/agent/reports") == "http://p/api/v1/agent/reports/"


def test_success_posts_json_with_the_bearer_token(portal, clock):
    sender = make_sender(portal.url, clock)
    sender.enqueue(report(clock()))
    assert sender.flush() == 1
    assert portal.received == [report(clock())]
    assert portal.headers[0]["Authorization"] == "Bearer tok-1"
    assert portal.headers[0]["Content-Type"] == "application/json"
    assert not sender.buffer and sender.sent == 1


def test_duplicate_200_counts_as_delivered(portal, clock):
    portal.statuses = [200]
    sender = make_sender(portal.url, clock)
    sender.enqueue(report(clock()))
    assert sender.flush() == 1 and not sender.buffer


def test_portal_down_buffers_with_a_bound_and_drops_the_oldest(clock, caplog):
    sender = make_sender(closed_port_url(), clock, capacity=3)
    with caplog.at_level(logging.WARNING):
        for n in range(5):
            sender.enqueue(report(clock(), n))
            sender.flush()
            clock.advance(400)  # past any backoff
    assert [r["n"] for _, r in sender.buffer] == [2, 3, 4]
    assert sender.dropped_full == 2 and sender.sent == 0
    assert "unreachable" in caplog.text and "buffer full" in caplog.text
    assert caplog.text.count("buffer full") == 1  # said once per outage, not per report


def test_flush_order_after_recovery(portal, clock):
    sender = make_sender(portal.url, clock)
    portal.statuses = [503]
    sender.enqueue(report(clock(), 0))
    assert sender.flush() == 0
    for n in (1, 2, 3):
        clock.advance(15)
        sender.enqueue(report(clock(), n))
    clock.advance(300)
    assert sender.flush() == 4
    assert [r["n"] for r in portal.received] == [0, 1, 2, 3]
    assert sender.failures == 0 and sender.next_attempt == 0


def test_reports_older_than_an_hour_are_dropped(portal, clock):
    sender = make_sender(portal.url, clock)
    sender.enqueue(report(clock(), 0))
    clock.advance(1800)
    sender.enqueue(report(clock(), 1))
    clock.advance(1801)
    assert sender.flush() == 1
    assert [r["n"] for r in portal.received] == [1]
    assert sender.dropped_expired == 1


def test_401_is_not_retried_and_says_why(portal, clock, caplog):
    portal.statuses = [401, 202]
    sender = make_sender(portal.url, clock)
    sender.enqueue(report(clock(), 0))
    sender.enqueue(report(clock() + 15, 1))
    with caplog.at_level(logging.ERROR):
        assert sender.flush() == 1
    assert portal.answers == [401, 202]
    assert [r["n"] for r in portal.received] == [1]  # the refused one is gone, not re-sent
    assert sender.rejected == 1 and not sender.buffer and sender.failures == 0
    assert "refused the token" in caplog.text


def test_400_is_dropped_with_the_portals_reasons(portal, clock, caplog):
    portal.statuses = [400]
    sender = make_sender(portal.url, clock)
    sender.enqueue(report(clock()))
    with caplog.at_level(logging.ERROR):
        sender.flush()
    assert not sender.buffer and "HTTP 400" in caplog.text and '"detail"' in caplog.text


def test_429_and_503_are_retried_with_exponential_backoff(portal, clock):
    portal.statuses = [503, 429, 503]
    sender = make_sender(portal.url, clock, backoff_base_s=2, backoff_max_s=10)
    sender.enqueue(report(clock()))
    delays = []
    for _ in range(3):
        start = clock()
        assert sender.flush() == 0
        delays.append(sender.next_attempt - start)
        assert not sender.due()  # nothing is posted before the backoff ends
        assert sender.flush() == 0 and len(portal.answers) == len(delays)
        clock.now = sender.next_attempt
    assert delays == [2, 4, 8]
    assert sender.flush() == 1 and len(portal.received) == 1
    assert sender.backoff_delay() == 2  # reset after success


def test_backoff_is_capped_and_jittered(clock):
    sender = Sender("http://x/", lambda: "t", clock=clock, rand=lambda: 0.0, backoff_max_s=300)
    sender.failures = 30
    assert sender.backoff_delay() == 150  # half the cap with zero jitter draw
    sender.rand = lambda: 1.0
    assert sender.backoff_delay() == 300


def test_retry_after_is_honoured(portal, clock):
    portal.statuses = [(429, {"Retry-After": "42"})]
    sender = make_sender(portal.url, clock)
    sender.enqueue(report(clock()))
    sender.flush()
    assert sender.next_attempt - clock() == 42


def test_missing_token_file_is_retried_not_fatal(portal, clock, tmp_path, caplog):
    from gpuagent.sender import token_from_file

    path = tmp_path / "token"
    sender = Sender(reports_url(portal.url), token_from_file(path), clock=clock)
    sender.enqueue(report(clock()))
    with caplog.at_level(logging.ERROR):
        assert sender.flush() == 0
    assert "cannot read the node token" in caplog.text and len(sender.buffer) == 1
    path.write_text("tok-2\n")
    clock.advance(600)
    assert sender.flush() == 1
    assert portal.headers[0]["Authorization"] == "Bearer tok-2"
