"""A real local HTTP receiver for webhook deliveries, and the quota test world."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.quotas.conftest import setup  # noqa: F401  (the synced cluster with team vision)


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self):
        return json.loads(self.body)


@dataclass
class Receiver:
    """Records every POST; answers the statuses queued in ``answers``, then ``default``."""

    port: int = 0
    answers: list[int] = field(default_factory=list)
    default: int = 200
    requests: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"


def _handler(receiver: Receiver):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            with receiver.lock:
                receiver.requests.append(Received(self.path, dict(self.headers), body))
                status = receiver.answers.pop(0) if receiver.answers else receiver.default
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"ok" if status < 300 else b"receiver says no")

        def log_message(self, *args):
            pass

    return Handler


@pytest.fixture
def receiver():
    rec = Receiver()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(rec))
    rec.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield rec
    server.shutdown()
    server.server_close()
