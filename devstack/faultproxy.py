"""A fault-injecting HTTPS proxy in front of the real kube-apiserver, for tests of outages.

The portal's kubeconfig points here; every request is passed to the API server unchanged
(the portal's bearer token included, so authentication and RBAC stay the server's) unless a
fault switch says otherwise. The switches and their semantics are the simulator's
(:class:`simcluster.faults.Faults`: ``error_rate``/``error_code``/``fail_after``/``path_regex``,
``latency_ms``, ``refuse_connections``, ``expire_continue[_count]``), so a test reads the same
against either. Injected errors are ``Status`` bodies like the server's own; an expired
continue token gets the real server's 410 ``Expired`` text
(``staging/src/k8s.io/apiserver/pkg/storage/errors.go``, ``NewResourceExpired`` with the
message of ``staging/src/k8s.io/apiserver/pkg/storage/etcd3/store.go``).

Watches and other long answers are streamed through chunk by chunk.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from simcluster.faults import Faults

EXPIRED_MESSAGE = (
    "The provided continue parameter is too old to display a consistent list result. You "
    "can start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted "
    "between the time the first chunk was returned and now may show up in the list."
)
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "content-length",
}
_REASONS = {
    400: "BadRequest",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def status_body(code: int, message: str, reason: str = "") -> bytes:
    return json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason or _REASONS.get(code, "InternalError"),
            "code": code,
        }
    ).encode()


class FaultProxy:
    """``FaultProxy(upstream, ca_file, cert, key).start()``; ``.url``; ``.faults``; ``.stop()``."""

    def __init__(self, upstream: str, ca_file: Path, cert: Path, key: Path):
        parts = urlsplit(upstream)
        self.upstream_host, self.upstream_port = parts.hostname, parts.port or 443
        self.faults = Faults()
        self._upstream_ctx = ssl.create_default_context(cafile=str(ca_file))
        self._server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._server_ctx.load_cert_chain(str(cert), str(key))
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.url = ""
        self._stats_lock = threading.Lock()
        self._watches = 0  # watch requests streaming now
        self._requests = 0

    def stats(self) -> dict[str, int]:
        """``{"requests": N, "watches": M}``: requests seen, watches streaming now."""
        with self._stats_lock:
            return {"requests": self._requests, "watches": self._watches}

    def count(self, watches: int = 0, requests: int = 0) -> None:
        with self._stats_lock:
            self._watches += watches
            self._requests += requests

    def start(self) -> FaultProxy:
        proxy = self

        class Handler(_Handler):
            owner = proxy

        server = _TLSServer(("127.0.0.1", 0), Handler, self._server_ctx)
        self._server = server
        self.url = f"https://127.0.0.1:{server.server_address[1]}"
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def connect_upstream(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            self.upstream_host, self.upstream_port, context=self._upstream_ctx, timeout=600
        )


class _TLSServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, handler, context: ssl.SSLContext):
        super().__init__(address, handler)
        self.context = context

    def get_request(self):
        sock, addr = super().get_request()
        return self.context.wrap_socket(sock, server_side=True), addr


class _Handler(BaseHTTPRequestHandler):
    owner: FaultProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet: the server's own log says enough
        pass

    def _any(self) -> None:
        faults = self.owner.faults
        path = self.path
        decision = faults.decide(urlsplit(path).path)
        if decision.refuse:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if decision.latency_s:
            time.sleep(decision.latency_s)  # the injected latency itself
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        if decision.error_code:
            self._reply(decision.error_code, status_body(decision.error_code, _injected(decision)))
            return
        query = parse_qs(urlsplit(path).query)
        if query.get("continue") and faults.continue_expired(urlsplit(path).path):
            self._reply(410, status_body(410, EXPIRED_MESSAGE, "Expired"))
            return
        watch = query.get("watch", [""])[0].lower() in ("true", "1")
        self.owner.count(watches=int(watch), requests=1)
        try:
            self._forward(body)
        finally:
            if watch:
                self.owner.count(watches=-1)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _any

    def _reply(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _forward(self, body: bytes | None) -> None:
        conn = self.owner.connect_upstream()
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        headers["Host"] = f"{self.owner.upstream_host}:{self.owner.upstream_port}"
        try:
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
        except OSError as exc:
            self._reply(503, status_body(503, f"proxy: upstream unreachable: {exc}"))
            conn.close()
            return
        try:
            self.send_response(resp.status)
            for key, value in resp.getheaders():
                if key.lower() not in _HOP_BY_HOP:
                    self.send_header(key, value)
            length = resp.getheader("Content-Length")
            if length is not None:
                self.send_header("Content-Length", length)
                self.end_headers()
                self.wfile.write(resp.read())
                return
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            while True:
                chunk = resp.read1(65536)
                if not chunk:
                    break
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True
        finally:
            conn.close()


def _injected(decision) -> str:
    return f"injected fault (HTTP {decision.error_code})"
