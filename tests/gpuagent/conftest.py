"""Fixtures for the agent's tests: a tiny portal on a local port, fake NVML scenarios."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


class FakePortal:
    """Answers POSTs with queued statuses (default 202) and records what it received."""

    def __init__(self) -> None:
        self.statuses: list[int | tuple[int, dict[str, str]]] = []
        self.received: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.answers: list[int] = []
        portal = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length))
                status, extra = 202, {}
                if portal.statuses:
                    item = portal.statuses.pop(0)
                    status, extra = item if isinstance(item, tuple) else (item, {})
                portal.headers.append(dict(self.headers))
                portal.answers.append(status)
                if 200 <= status < 300:
                    portal.received.append(body)
                payload = json.dumps({"accepted": True} if status == 202 else {"detail": "no"})
                self.send_response(status)
                for k, v in extra.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload.encode())

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def portal() -> Iterator[FakePortal]:
    p = FakePortal()
    yield p
    p.close()


class FakeClock:
    """A settable clock: tests move time instead of sleeping."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> bool:
        self.now += seconds
        return False  # as Event.wait: "not stopped"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
