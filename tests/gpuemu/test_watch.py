"""gpuemu.watch without a cluster: the informer relists on 410 Gone and delivers what changed
in between (client-go reflector.go / DeltaFIFO.Replace), and the work queue's semantics."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import requests

from devstack.kubeapi import Resource, wait_for
from gpuemu.watch import Event, Informer, WorkQueue


def node(name: str, rv: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": rv, "labels": labels}}


class FakeAPI:
    """Just what an Informer uses: ``resource``, ``request`` (paginated lists), a session."""

    server = "http://fake"
    timeout = 1.0

    def __init__(self, lists: list[list[dict[str, Any]]]) -> None:
        self.lists = lists
        self.session = requests.Session()
        self.listed = 0

    def resource(self, name: str) -> Resource:
        return Resource("v1", name, "Node", False)

    def request(self, method: str, path: str, params: dict[str, Any]) -> dict[str, Any]:
        items = self.lists[min(self.listed, len(self.lists) - 1)]
        start = int(params.get("continue", 0))
        page = items[start : start + 1]  # one item per page: exercises continue tokens
        meta = {"resourceVersion": str(10 * (self.listed + 1))}
        if start + 1 < len(items):
            meta["continue"] = str(start + 1)
        else:
            self.listed += 1
        return {"items": page, "metadata": meta}


def test_informer_relists_after_gone_and_delivers_the_difference() -> None:
    api = FakeAPI(
        [
            [node("a", "1"), node("b", "2")],
            [node("a", "1"), node("c", "12", x="1")],  # b deleted, c added while away
        ]
    )
    events: list[Event] = []
    informer = Informer(api, "nodes", events.append, retry_s=0.01)  # type: ignore[arg-type]
    watched: list[str] = []
    stop = threading.Event()

    def stream(rv: str) -> Iterator[dict[str, Any]]:
        watched.append(rv)
        if len(watched) == 1:
            yield {"type": "MODIFIED", "object": node("a", "5", y="2")}
            yield {"type": "ERROR", "object": {"code": 410, "reason": "Expired"}}
        else:
            stop.wait(5)
            return

    informer._stream = stream  # type: ignore[method-assign]
    informer.start()
    try:
        wait_for(lambda: informer.lists == 2 and len(watched) == 2, timeout=5)
    finally:
        stop.set()
        informer.stop()
    assert watched == ["10", "20"]  # each watch starts from its list's resourceVersion
    kinds = [(e.type, e.obj["metadata"]["name"], e.initial) for e in events]
    assert kinds == [
        ("ADDED", "a", True),
        ("ADDED", "b", True),
        ("MODIFIED", "a", False),  # from the watch
        ("MODIFIED", "a", False),  # the relist: a differs from what the watch left,
        ("ADDED", "c", False),  # c is new,
        ("DELETED", "b", False),  # b is gone
    ]
    assert informer.get("b") is None and informer.get("c")["metadata"]["labels"] == {"x": "1"}


def test_work_queue_dedups_delays_and_retries() -> None:
    q = WorkQueue(workers=2).start()
    runs: list[str] = []
    try:
        for _ in range(3):
            q.add("k", lambda: runs.append("k"))
        q.add("late", lambda: runs.append("late"), delay=0.2)
        assert not q.idle()
        wait_for(q.idle, timeout=5)
        assert runs.count("k") == 1 and runs[-1] == "late"

        attempts: list[float] = []

        def flaky() -> None:
            attempts.append(time.monotonic())
            if len(attempts) < 3:
                raise requests.ConnectionError("server hiccup")

        q.add("flaky", flaky)
        wait_for(lambda: len(attempts) == 3 and q.idle(), timeout=5)
    finally:
        q.stop()
