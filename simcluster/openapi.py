"""``/openapi/v2`` and ``/openapi/v3`` documents, generated from :mod:`simcluster.schema`.

kubectl needs them: its query-parameter verifier (k8s.io/cli-runtime
``pkg/resource/query_param_verifier_v3.go``) looks for ``fieldValidation`` among the
parameters of the PATCH operation carrying the kind's ``x-kubernetes-group-version-kind``
and then validates server-side; ``kubectl apply`` computes its 3-way strategic merge patch
from the ``x-kubernetes-patch-strategy`` / ``-patch-merge-key`` of the v3 schemas
(``strategicpatch.PatchMetaFromOpenAPIV3``: ``allOf[0]`` then ``$ref``); ``kubectl
explain`` renders the v3 document (k8s.io/kubectl ``pkg/explain/v2/templates``: the GVK
comes from the operations on ``/api/v1/namespaces/{namespace}/pods``...).

Serving follows k8s.io/kube-openapi: ``pkg/handler3/handler.go`` for
``/openapi/v3/<gv>`` (JSON only here; ``Etag`` = upper-case hex SHA-512, ``?hash=`` that
matches -> ``Cache-Control: public, immutable`` + ``Expires``, a stale hash -> 301 to the
current one, an Accept it cannot serve -> 406), kube-aggregator
``pkg/controllers/openapiv3/aggregator/aggregator.go`` for the ``/openapi/v3`` discovery
(``http.ServeContent`` without a type: sniffed ``text/plain; charset=utf-8``; unknown
group-version -> 404) and ``pkg/handler/handler.go`` for ``/openapi/v2`` (JSON, or
gnostic's protobuf of the same document, :mod:`simcluster.openapi_proto`, chosen from
``Accept`` as goautoneg sorts it; one ETag for both, ``Vary: Accept``; anything else -> 406).
Both documents reflect exactly the resources :mod:`simcluster.resources` serves.
"""

from __future__ import annotations

import hashlib
import html
import json
import threading
import time
from email.utils import formatdate
from functools import cache
from typing import Any

from simcluster import schema
from simcluster.openapi_build import META, Builder, gvk
from simcluster.resources import GROUP_VERSIONS, ResourceType

_lock = threading.Lock()


def _gvks(resources: list[ResourceType]) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    for rt in resources:
        for kind in (rt.kind, rt.kind + "List"):
            d = schema.for_kind(rt.group, rt.version, kind)
            if d is not None:
                out.setdefault(d.name, []).append(gvk(rt, kind))
    seen: set[tuple[str, str]] = set()
    for rt in resources:
        if (rt.group, rt.version) in seen:
            continue
        seen.add((rt.group, rt.version))
        for kind in ("DeleteOptions", "WatchEvent"):
            out.setdefault(f"{META}.{kind}", []).append(gvk(rt, kind))
    out[f"{META}.Status"] = [{"group": "", "kind": "Status", "version": "v1"}]
    out["io.k8s.api.policy.v1.Eviction"] = [
        {"group": "policy", "kind": "Eviction", "version": "v1"}
    ]
    out["io.k8s.api.authentication.v1.TokenRequest"] = [
        {"group": "authentication.k8s.io", "kind": "TokenRequest", "version": "v1"}
    ]
    return out


def _info() -> dict[str, str]:
    from simcluster.server import VERSION

    return {"title": "Kubernetes", "version": VERSION["gitVersion"]}


@cache
def v3_document(gv: str) -> bytes:
    """The OpenAPI 3.0 document of one group-version (``api/v1``, ``apis/policy/v1``)."""
    resources = GROUP_VERSIONS[gv]
    b = Builder(v3=True)
    paths: dict[str, Any] = {}
    for rt in resources:
        if schema.for_kind(rt.group, rt.version, rt.kind) is not None:
            paths.update(b.resource_paths(rt))
    b.ref(f"{META}.WatchEvent")
    doc = {
        "openapi": "3.0.0",
        "info": _info(),
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": b.finish(_gvks(list(resources))),
            "securitySchemes": {
                "BearerToken": {
                    "description": "Bearer Token authentication",
                    "in": "header",
                    "name": "authorization",
                    "type": "apiKey",
                }
            },
        },
    }
    return json.dumps(doc, separators=(",", ":")).encode()


@cache
def v2_document() -> bytes:
    """The swagger 2.0 document of everything served."""
    b = Builder(v3=False)
    paths: dict[str, Any] = {}
    all_rt: list[ResourceType] = []
    for resources in GROUP_VERSIONS.values():
        for rt in resources:
            if schema.for_kind(rt.group, rt.version, rt.kind) is not None:
                all_rt.append(rt)
                paths.update(b.resource_paths(rt))
    b.ref(f"{META}.WatchEvent")
    doc = {
        "swagger": "2.0",
        "info": _info(),
        "paths": dict(sorted(paths.items())),
        "definitions": b.finish(_gvks(all_rt)),
        "securityDefinitions": {
            "BearerToken": {
                "description": "Bearer Token authentication",
                "in": "header",
                "name": "authorization",
                "type": "apiKey",
            }
        },
        "security": [{"BearerToken": []}],
    }
    return json.dumps(doc, separators=(",", ":")).encode()


@cache
def v2_protobuf() -> bytes:
    """The swagger document as ``openapi.v2.Document`` protobuf (kube-openapi ``ToProtoBinary``)."""
    from simcluster.openapi_proto import encode

    return encode(json.loads(v2_document()))


# kube-openapi pkg/handler/handler.go RegisterOpenAPIVersionedService: (type, subtype) that
# an Accept clause must name, and the Content-Type answered.
_V2_FORMATS = (
    ("application", "json", "application/json"),
    ("application", "com.github.proto-openapi.spec.v2@v1.0+protobuf", "protobuf"),
    ("application", "com.github.proto-openapi.spec.v2.v1.0+protobuf", "protobuf"),
)


def parse_accept(header: str) -> list[tuple[str, str, float]]:
    """github.com/munnerz/goautoneg ``ParseAccept``: (type, subtype, q) clauses, sorted as
    its ``sort.Sort`` sorts a short slice (an insertion sort with its ``Less``)."""
    clauses: list[tuple[str, str, float]] = []
    for part in header.split(","):
        part = part.strip(" ")
        if not part:
            continue
        media, _, params = part.partition(";")
        typ, slash, sub = media.partition("/")
        typ = typ.strip(" ")
        if not slash:
            if typ != "*":
                continue
            sub = "*"
        elif "/" in sub:
            continue
        q = 1.0
        for param in params.split(";") if params else []:
            name, eq, value = param.partition("=")
            if eq and "=" not in value and name.strip(" ") == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        clauses.append((typ, sub.strip(" "), q))

    def less(a: tuple[str, str, float], b: tuple[str, str, float]) -> bool:
        return a[2] > b[2] or (a[0] != "*" and b[0] == "*") or (a[1] != "*" and b[1] == "*")

    for i in range(1, len(clauses)):
        j = i
        while j > 0 and less(clauses[j], clauses[j - 1]):
            clauses[j], clauses[j - 1] = clauses[j - 1], clauses[j]
            j -= 1
    return clauses


def _v2_format(accept: str) -> str:
    """``application/json``, ``protobuf`` or "" (406) for an Accept header."""
    for typ, sub, _q in parse_accept(accept or "*/*"):
        for want_type, want_sub, answer in _V2_FORMATS:
            if typ in (want_type, "*") and sub in (want_sub, "*"):
                return answer
    return ""


def etag(data: bytes) -> str:
    """kube-openapi's ``computeETag``: upper-case hex SHA-512."""
    return hashlib.sha512(data).hexdigest().upper()


def gv_paths() -> list[str]:
    """The discovery keys: ``api/v1``, ``apis/<group>/<version>`` for every served GV."""
    out = []
    for gv, resources in GROUP_VERSIONS.items():
        if not any(schema.for_kind(r.group, r.version, r.kind) for r in resources):
            continue
        out.append(f"api/{gv}" if "/" not in gv else f"apis/{gv}")
    return out


_STARTED = time.time()


@cache
def v3_discovery() -> bytes:
    """``/openapi/v3``: ``{"paths": {"api/v1": {"serverRelativeURL": "...?hash=..."}}}``."""
    with _lock:
        paths = {}
        for p in gv_paths():
            gv = p.split("/", 1)[1]
            paths[p] = {"serverRelativeURL": f"/openapi/v3/{p}?hash={etag(v3_document(gv))}"}
    return json.dumps({"paths": dict(sorted(paths.items()))}, separators=(",", ":")).encode()


def _accepts(accept: str, subtype: str) -> bool:
    """Whether an Accept header admits application/<subtype> (goautoneg-style)."""
    for clause in (accept or "*/*").split(","):
        media = clause.split(";")[0].strip().lower()
        if not media:
            continue
        typ, _, sub = media.partition("/")
        if typ in ("application", "*") and sub in (subtype, "*"):
            return True
    return False


def http_date(ts: float) -> str:
    return formatdate(ts, usegmt=True)


def handles(path: str) -> bool:
    """Whether ``path`` is one of the OpenAPI endpoints (others are ordinary 404s)."""
    return path in ("/openapi/v2", "/openapi/v3") or path.startswith("/openapi/v3/")


def serve(path: str, query: dict[str, str], headers: Any) -> tuple[int, dict[str, str], bytes]:
    """Answer ``GET /openapi/...``: (status, headers, body) as the real handlers do."""
    accept = headers.get("Accept") or "*/*"
    modified = http_date(_STARTED)
    if path == "/openapi/v2":
        return _gzipped(_serve_v2(headers), headers)
    if path == "/openapi/v3":
        data = v3_discovery()
        hdrs = {"Content-Type": "text/plain; charset=utf-8"}
        return _content(data, headers, hdrs, http_date(time.time()), tag=False)
    if path.startswith("/openapi/v3/"):
        key = path[len("/openapi/v3/") :]
        if key not in gv_paths():
            return 404, {}, b""
        base = {"Vary": "Accept"}
        if not _accepts(accept, "json"):
            return 406, base, b""
        data = v3_document(key.split("/", 1)[1])
        tag = etag(data)
        hdrs = {**base, "Content-Type": "application/json"}
        want = query.get("hash", "")
        if want:
            if want != tag:  # http.Redirect: Location and a one-line HTML body
                loc = f"/openapi/v3/{key}?hash={tag}"
                moved = f'<a href="{html.escape(loc)}">Moved Permanently</a>.\n\n'.encode()
                hdrs = {**base, "Etag": f'"{tag}"', "Location": loc}
                return 301, {**hdrs, "Content-Type": "text/html; charset=utf-8"}, moved
            hdrs["Cache-Control"] = "public, immutable"
            hdrs["Expires"] = http_date(time.time() + 365 * 86400)
        return _content(data, headers, hdrs, modified)
    return 404, {}, b""


def _serve_v2(headers: Any) -> tuple[int, dict[str, Any], bytes]:
    from simcluster.openapi_proto import MEDIA_TYPE

    base: dict[str, Any] = {"Vary": ["Accept-Encoding", "Accept"]}  # gziphandler's first
    answer = _v2_format(headers.get("Accept") or "")
    if not answer:
        return 406, base, b""
    modified = http_date(_STARTED)
    if answer == "protobuf":  # the JSON's ETag: "we can re-use the same etag ... Vary"
        hdrs = {**base, "Content-Type": MEDIA_TYPE, "Etag": f'"{etag(v2_document())}"'}
        return _content(v2_protobuf(), headers, hdrs, modified)
    return _content(v2_document(), headers, {**base, "Content-Type": "application/json"}, modified)


_GZIP_MIN_SIZE = 1400  # github.com/NYTimes/gziphandler DefaultMinSize


def _accepts_gzip(header: str) -> bool:
    """gziphandler ``acceptsGzip``: ``gzip`` listed in Accept-Encoding with q > 0."""
    for part in (header or "").split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip() != "gzip":
            continue
        q = 1.0
        name, _, value = params.strip().partition("=")
        if name.strip() == "q":
            try:
                q = float(value)
            except ValueError:
                q = 0.0
        return q > 0
    return False


@cache
def _gzip(data: bytes) -> bytes:
    import gzip

    return gzip.compress(data, compresslevel=6, mtime=0)


def _gzipped(
    answer: tuple[int, dict[str, Any], bytes], req: Any
) -> tuple[int, dict[str, Any], bytes]:
    """kube-openapi wraps the v2 handler in ``gziphandler.GzipHandler``: ``Vary:
    Accept-Encoding`` always, a body of 1400 bytes or more gzipped when the client takes it."""
    code, hdrs, body = answer
    if len(body) >= _GZIP_MIN_SIZE and _accepts_gzip(req.get("Accept-Encoding", "")):
        return code, {**hdrs, "Content-Encoding": "gzip"}, _gzip(body)
    return answer


def _content(
    data: bytes, req: Any, hdrs: dict[str, Any], modified: str, tag: bool = True
) -> tuple[int, dict[str, Any], bytes]:
    """``http.ServeContent``: Etag / If-None-Match -> 304 (``writeNotModified``: no
    Content-Type, no Last-Modified when there is an Etag), Last-Modified, Accept-Ranges."""
    out = dict(hdrs)
    out["Last-Modified"] = modified
    if tag:
        out.setdefault("Etag", f'"{etag(data)}"')
        inm = req.get("If-None-Match")
        if inm and (inm.strip() == "*" or out["Etag"] in [t.strip() for t in inm.split(",")]):
            drop = ("Content-Type", "Last-Modified")
            return 304, {k: v for k, v in out.items() if k not in drop}, b""
    out["Accept-Ranges"] = "bytes"
    return 200, out, data
