"""HTTP front end: routing, auth, fault injection, discovery, Table output and watch streams."""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import socket
import ssl
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from simcluster import context, fieldvalidation, openapi, protobuf, reviews, watchcache
from simcluster.auth import impersonate, token_request, unauthorized
from simcluster.errors import ApiError, NoSuchResource, PageNotFound
from simcluster.faults import Faults
from simcluster.patch import load_body
from simcluster.rbac import forbidden
from simcluster.requestinfo import parse as parse_request
from simcluster.resources import (
    BY_PATH,
    CUSTOM_RESOURCE_GROUPS,
    GROUP_VERSIONS,
    REVIEWS,
    ResourceType,
    api_group_list,
    api_resource_list,
)
from simcluster.tables import table
from simcluster.tls import server_context

if TYPE_CHECKING:
    from simcluster.cluster import SimCluster

log = logging.getLogger("simcluster.http")

VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.4-simcluster",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.23.6",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def _no_such(group_version: str) -> ApiError:
    """The 404 for ``/api/<gv>/...`` or ``/apis/<group>/<version>/...`` naming nothing:
    go-restful's Status under a built-in group, the mux's text for an unknown group or a
    custom resource group."""
    group = group_version.rpartition("/")[0]
    builtin = {rt.group for rts in GROUP_VERSIONS.values() for rt in rts} - CUSTOM_RESOURCE_GROUPS
    if "/" not in group_version or group in builtin:
        return NoSuchResource()
    return PageNotFound()


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class SimHTTPServer(ThreadingHTTPServer):
    """Threaded server that does not wait for open watch streams on shutdown."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, addr: tuple[str, int], cluster: SimCluster) -> None:
        self.cluster = cluster
        self.stats: Counter[str] = Counter()
        self.stats_lock = threading.Lock()
        self.tls: ssl.SSLContext | None = None
        super().__init__(addr, Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("connection from %s failed", client_address, exc_info=True)


def make_server(cluster: SimCluster, host: str, port: int) -> SimHTTPServer:
    """The server; one port speaks both HTTP and TLS (kubectl sends tokens only over TLS)."""
    srv = SimHTTPServer((host, port), cluster)
    extra = [cluster.advertise_host] if cluster.advertise_host else []
    srv.tls, cluster.ca_pem = server_context(host, extra)
    return srv


class Handler(BaseHTTPRequestHandler):
    """One request; most work is delegated to :class:`SimCluster`."""

    protocol_version = "HTTP/1.1"
    server: SimHTTPServer
    server_version = "simcluster/1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def setup(self) -> None:
        """Start TLS when the client opens with a TLS handshake record (tls.py)."""
        self._tls = False
        # Go's net/http sets TCP_NODELAY on every connection. Without it, a keep-alive
        # client waits for the delayed ACK (~40 ms) on each small response, and TLS
        # records (16 KiB each) wait for an ACK at their tail.
        with contextlib.suppress(OSError):
            self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.server.tls is not None:
            try:
                first = self.request.recv(1, socket.MSG_PEEK)
            except OSError:
                first = b""
            if first == b"\x16":
                self.request = self.server.tls.wrap_socket(self.request, server_side=True)
                self._tls = True
        super().setup()

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            if self._tls:
                with contextlib.suppress(OSError):
                    self.request.close()

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    # ------------------------------------------------------------ plumbing
    def _count(self, key: str) -> None:
        with self.server.stats_lock:
            self.server.stats[key] += 1

    def _body(self) -> bytes:
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def _send(
        self, code: int, body: bytes, ctype: str = "application/json", retry_after: int = 0
    ) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache, private")
        if retry_after > 0:  # responsewriters.ErrorNegotiated: details.retryAfterSeconds
            self.send_header("Retry-After", str(retry_after))
        for message in context.current().warnings:
            self.send_header("Warning", warning_header(message))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_openapi(self, code: int, headers: dict[str, Any], body: bytes) -> None:
        """An OpenAPI answer with the handler's own caching headers (openapi.py); a list
        value is one header line per item (``Vary: Accept-Encoding``, ``Vary: Accept``)."""
        self.send_response(code)
        headers = {"Cache-Control": "no-cache, private", **headers}
        for k, v in headers.items():
            for item in v if isinstance(v, list) else [v]:
                self.send_header(k, item)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and code not in (304,):
            self.wfile.write(body)

    def _send_error(self, err: ApiError) -> None:
        if isinstance(err, PageNotFound):
            self._send(404, err.BODY, err.CONTENT_TYPE)
            return
        retry = int((err.details or {}).get("retryAfterSeconds") or 0)
        self._send(err.code, _dumps(err.status()), retry_after=retry)

    def _handle(self, method: str) -> None:
        cluster = self.server.cluster
        url = urlsplit(self.path)
        path = url.path.rstrip("/") or "/"
        params = dict(parse_qsl(url.query, keep_blank_values=True))
        if path.startswith("/_sim"):
            self._control(method, path)
            return
        self._count("requests")
        self._count(f"{method} {_kind_of(path)}")
        # authenticate (auth.py), then authorize (requestinfo.py + rbac.py), as the
        # API server's filter chain does before anything else
        user = cluster.authn.authenticate(self.headers.get("Authorization"))
        if user is None:
            self._body()
            self._send_error(unauthorized())
            return
        try:  # kubectl --as: Impersonate-* headers (auth.py)
            user = impersonate(cluster.authz, user, self.headers, url.path)
        except ApiError as err:
            self._body()
            self._send_error(err)
            return
        context.begin(user)
        info = parse_request(method, url.path, params)
        allowed, reason = cluster.authz.authorize(user, info)
        if not allowed:
            self._body()
            self._send_error(forbidden(user, info, reason))
            context.end()
            return
        decision = cluster.faults.decide(path)
        if decision.refuse:
            self._count("faults.refused")
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            context.end()
            return
        if decision.latency_s:
            time.sleep(decision.latency_s)
        body = self._body()
        if decision.error_code:
            self._count("faults.errors")
            fault = Faults.error_for(decision.error_code)
            # an injected 429 stands for API priority & fairness, which sends Retry-After: 1
            retry = 1 if fault.code == 429 else 0
            self._send(fault.code, _dumps(fault.status()), retry_after=retry)
            context.end()
            return
        try:
            self._route(method, path, params, body)
        except ApiError as err:
            self._send_error(err)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:
            log.exception("internal error on %s %s", method, self.path)
            self._send_error(ApiError(500, f"simcluster internal error: {exc}"))
        finally:
            context.end()

    # ------------------------------------------------------------- control
    def _control(self, method: str, path: str) -> None:
        cluster = self.server.cluster
        body = self._body()
        try:
            if path == "/_sim/faults":
                if method == "GET":
                    self._send(200, _dumps(cluster.faults.snapshot()))
                    return
                if method in ("PUT", "POST", "PATCH"):
                    changes = load_body(body)
                    if not isinstance(changes, dict):
                        raise ApiError(400, "faults body must be a JSON object")
                    try:
                        state = cluster.faults.update(**changes)
                    except (ValueError, TypeError) as exc:
                        raise ApiError(400, str(exc)) from exc
                    self._send(200, _dumps(state))
                    return
            elif path == "/_sim/reset-faults" and method == "POST":
                cluster.faults.reset()
                self._send(200, _dumps(cluster.faults.snapshot()))
                return
            elif path == "/_sim/stats" and method == "GET":
                with self.server.stats_lock:
                    stats = dict(self.server.stats)
                stats["objects"] = cluster.counts()
                stats["resourceVersion"] = cluster.store.rv
                self._send(200, _dumps(stats))
                return
            elif path == "/_sim/reset-stats" and method == "POST":
                with self.server.stats_lock:
                    self.server.stats.clear()
                self._send(200, b"{}")
                return
            elif path == "/_sim/compact" and method == "POST":
                cluster.compact_history()
                self._send(200, _dumps({"resourceVersion": cluster.store.rv}))
                return
            elif path == "/_sim/clock" and method in ("GET", "POST"):
                self._sim_clock(cluster, method, body)  # simcluster/clock.py
                return
            elif path == "/_sim/healthz":
                self._send(200, b"ok", "text/plain")
                return
            raise ApiError(404, f"unknown control endpoint {method} {path}")
        except ApiError as err:
            self._send_error(err)

    def _sim_clock(self, cluster: Any, method: str, body: bytes) -> None:
        """``POST /_sim/clock {"advance_s": N}``: the admin moves the sim clock forward."""
        auth = self.headers.get("Authorization") or ""
        if not hmac.compare_digest(auth.encode(), f"Bearer {cluster.token}".encode()):
            raise ApiError(403, "the sim clock is the cluster admin's (admin bearer token)")
        if method == "POST":
            req = load_body(body)
            step = req.get("advance_s") if isinstance(req, dict) else None
            if isinstance(step, bool) or not isinstance(step, int | float) or not step >= 0:
                raise ApiError(400, 'body must be {"advance_s": <number of seconds >= 0>}')
            cluster.clock.advance(step)
        self._send(200, _dumps({"offset_s": cluster.clock.offset}))

    # ------------------------------------------------------------- routing
    def _route(self, method: str, path: str, params: dict[str, str], body: bytes) -> None:
        if path in ("/healthz", "/readyz", "/livez"):
            self._send(200, b"ok", "text/plain")
            return
        if method == "GET" and openapi.handles(path):  # openapi.py (kubectl needs it)
            self._send_openapi(*openapi.serve(path, params, self.headers))
            return
        if path == "/version":
            self._send(200, _dumps(VERSION))
            return
        if path == "/api":
            host = self.headers.get("Host", "127.0.0.1")
            self._send(
                200,
                _dumps(
                    {
                        "kind": "APIVersions",
                        "versions": ["v1"],
                        "serverAddressByClientCIDRs": [
                            {"clientCIDR": "0.0.0.0/0", "serverAddress": host}
                        ],
                    }
                ),
            )
            return
        if path == "/apis":
            self._send(200, _dumps(api_group_list()))
            return
        parts = path.strip("/").split("/")
        if parts[0] == "api" and len(parts) >= 2:
            gv, rest = parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) >= 3:
            gv, rest = f"{parts[1]}/{parts[2]}", parts[3:]
        elif parts[0] == "apis" and len(parts) == 2:
            self._group(parts[1])
            return
        elif parts[0] == "version":
            raise NoSuchResource()
        else:
            raise PageNotFound()
        if gv not in GROUP_VERSIONS:
            raise _no_such(gv)
        if not rest:
            self._send(200, _dumps(api_resource_list(gv)))
            return
        # /api/v1/watch/...: the deprecated watch routes, a watch whatever the query says
        # (installer.go registers them with forceWatch; requestinfo.go's "watch" verb)
        legacy_watch = rest[0] == "watch"
        if legacy_watch:
            rest = rest[1:]
            if not rest:
                raise NoSuchResource()
        ns: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            cand = BY_PATH.get((gv, rest[2]))
            if cand is not None and cand.namespaced:
                ns, rest = rest[1], rest[2:]
        rt = BY_PATH.get((gv, rest[0]))
        if rt is None or len(rest) > 3:
            raise _no_such(gv)
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else ""
        if sub and sub not in rt.subresources:
            raise NoSuchResource()
        if rt.namespaced and name is not None and ns is None:
            raise NoSuchResource()
        if legacy_watch:
            if sub or rt.name in REVIEWS:  # only the main resources of watchable types
                raise NoSuchResource()
            if method != "GET":
                raise _method_not_allowed()
            self._watch(rt, ns, named_watch_params(params, name) if name else params)
            return
        if name is None:
            self._collection(method, rt, ns, params, body, path)
        else:
            self._item(method, rt, ns or "", name, sub, params, body)

    def _group(self, group: str) -> None:
        for g in api_group_list()["groups"]:
            if g["name"] == group:
                self._send(200, _dumps({"kind": "APIGroup", "apiVersion": "v1", **g}))
                return
        raise PageNotFound()

    def _manager(self, params: dict[str, str]) -> str:
        if params.get("fieldManager"):
            return params["fieldManager"]
        ua = self.headers.get("User-Agent", "unknown")
        return ua.split("/")[0] or "unknown"

    def _json_body(self, body: bytes, rt: ResourceType | None = None) -> Any:
        ctype = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip()
        if ctype in ("application/json", ""):
            return load_body(body)
        if ctype in ("application/yaml", "application/x-yaml"):
            return fieldvalidation.yaml_body(body)  # duplicate keys kept for fieldValidation
        if ctype == protobuf.MEDIA_TYPE:  # kubectl's create/auth commands (protobuf.py)
            obj = protobuf.decode(body)
            if obj is not None:
                return obj
        accepted = "application/json, application/yaml"  # serializers of the type's codec
        if rt is None or rt.group not in CUSTOM_RESOURCE_GROUPS:
            accepted += f", {protobuf.MEDIA_TYPE}"
        raise ApiError(
            415,
            f"the body of the request was in an unknown format - accepted media types include: "
            f"{accepted}",
            "UnsupportedMediaType",
        )

    def _object_body(self, rt: ResourceType, body: bytes) -> Any:
        """A create/update body; unparseable JSON worded as the decoder does (rest.go)."""
        ctype = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip()
        try:
            return self._json_body(body, rt)
        except ApiError as err:
            if err.code != 400 or ctype not in ("application/json", ""):
                raise
            raise fieldvalidation.unrecognized(rt, body, err.message) from None

    def _wants_table(self) -> bool:
        accept = self.headers.get("Accept", "")
        return "as=Table" in accept

    def _collection(
        self,
        method: str,
        rt: ResourceType,
        ns: str | None,
        params: dict[str, str],
        body: bytes,
        path: str,
    ) -> None:
        cluster = self.server.cluster
        if rt.name in REVIEWS:  # create-only, nothing stored (reviews.py)
            if method != "POST":
                raise _method_not_allowed()
            user = context.current().user
            obj = fieldvalidation.decode_body(rt, self._json_body(body), params, "CreateOptions")
            out = reviews.HANDLERS[rt.name](cluster, user, obj)
            if rt.name == "selfsubjectaccessreviews":
                reviews.with_managed_fields(obj, out, self._manager(params))
            self._send(201, _dumps(out))
            return
        if method == "GET":
            if query_bool(params, "watch"):
                self._watch(rt, ns, params)
                return
            if self._wants_table():
                lst = cluster.list_objects(rt, ns, params, path)
                self._send(200, _dumps(table(rt, lst["items"], lst["metadata"])))
                return
            self._send(200, cluster.op_list(rt, ns, params, path))
            return
        if method == "POST":
            if rt.namespaced and ns is None:
                raise _method_not_allowed()
            code, out = cluster.op_create(
                rt, ns or "", self._object_body(rt, body), params, self._manager(params)
            )
            self._send(code, out)
            return
        if method == "DELETE":
            self._send(200, cluster.op_delete_collection(rt, ns, params, load_body(body)))
            return
        raise _method_not_allowed()

    def _item(
        self,
        method: str,
        rt: ResourceType,
        ns: str,
        name: str,
        sub: str,
        params: dict[str, str],
        body: bytes,
    ) -> None:
        cluster = self.server.cluster
        if rt.name in REVIEWS:
            raise NoSuchResource()
        if sub == "token":  # TokenRequest (auth.py)
            if method != "POST":
                raise _method_not_allowed()
            obj = fieldvalidation.decode_sub("TokenRequest", self._json_body(body), params)
            self._send(201, _dumps(token_request(cluster, ns, name, obj, params)))
            return
        if sub == "eviction":
            if method != "POST":
                raise _method_not_allowed()
            obj = fieldvalidation.decode_sub("Eviction", self._json_body(body), params)
            code, out = cluster.op_evict(ns, name, obj, params)
            self._send(code, out)
            return
        if method == "GET":
            raw = cluster.op_get(rt, ns, name)
            if self._wants_table():
                obj = json.loads(raw)
                meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
                self._send(200, _dumps(table(rt, [obj], meta)))
                return
            self._send(200, raw)
            return
        if method == "PUT":
            out = cluster.op_update(
                rt,
                ns,
                name,
                "status" if sub == "status" else "",
                self._object_body(rt, body),
                params,
                self._manager(params),
            )
            self._send(200, out)
            return
        if method == "PATCH":
            ctype = self.headers.get("Content-Type") or ""
            code, out = cluster.op_patch(
                rt, ns, name, sub, body, ctype, params, self._manager(params)
            )
            self._send(code, out)
            return
        if method == "DELETE" and not sub:
            self._send(200, cluster.op_delete(rt, ns, name, load_body(body), params))
            return
        raise _method_not_allowed()

    # --------------------------------------------------------------- watch
    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _watch(self, rt: ResourceType, ns: str | None, params: dict[str, str]) -> None:
        """Newline-delimited JSON events over chunked encoding, as the watch cache serves
        them (simcluster/watchcache.py)."""
        cluster = self.server.cluster
        plan = watchcache.prepare(cluster, rt, ns, params)
        self._count("watches")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        try:
            watchcache.run(cluster, plan, self._chunk)
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True


def query_bool(params: dict[str, str], key: str) -> bool:
    """A bool query parameter as the parameter codec converts it
    (``Convert_Slice_string_To_bool``): absent, ``0`` or ``false`` (any case) is false,
    anything else -- the empty string included -- is true."""
    if key not in params:
        return False
    value = params[key]
    return value != "0" and value.lower() != "false"


def named_watch_params(params: dict[str, str], name: str) -> dict[str, str]:
    """``ListResource`` for a watch of one object (``/watch/.../pods/{name}``): the name is
    a ``metadata.name`` field selector; any other selector must select that same name."""
    from simcluster.requestinfo import _exact_name  # RequiresExactMatch("metadata.name")

    selector = params.get("fieldSelector") or ""
    if selector.strip():
        if _exact_name(selector) != name:
            raise ApiError(
                400, "fieldSelector metadata.name doesn't match requested name", "BadRequest"
            )
        return params
    return {**params, "fieldSelector": f"metadata.name={name}"}


def warning_header(message: str) -> str:
    """``299 - "text"``: the API server's warning header (RFC 7234 warn-code 299)."""
    text = message.replace("\\", "\\\\").replace('"', '\\"')
    return f'299 - "{text}"'


def _method_not_allowed() -> ApiError:
    return ApiError(
        405, "the server does not allow this method on the requested resource", "MethodNotAllowed"
    )


def _kind_of(path: str) -> str:
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 5 and parts[-3] == "namespaces":
        return parts[-1]
    for p in reversed(parts):
        if (("v1", p) in BY_PATH) or any(k[1] == p for k in BY_PATH):
            return p
    return path
