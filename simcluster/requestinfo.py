"""What a request asks to do, in the authorizer's terms (verb, group, resource, name, ...).

Follows ``staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go``
(``RequestInfoFactory.NewRequestInfo``) with the prefixes kube-apiserver uses (``api`` is
groupless, ``apis`` carries a group). The authorizer (:mod:`simcluster.rbac`) sees exactly
these attributes, so a rule matches or fails to match here as it would on a real server:
``GET /api/v1/namespaces/ml`` is ``get namespaces "ml"`` *in the namespace* ``ml``;
``GET .../pods`` is ``list`` (``watch`` with ``watch=true``); a list or watch with
``fieldSelector=metadata.name=x`` carries the name ``x``; ``DELETE`` of a collection is
``deletecollection``; paths outside the API (``/healthz``, ``/version``, discovery) are
non-resource requests whose verb is the lowercase HTTP method.
"""

from __future__ import annotations

from typing import NamedTuple

_API_PREFIXES = frozenset({"api", "apis"})
_GROUPLESS_PREFIXES = frozenset({"api"})
_SPECIAL_VERBS = frozenset({"proxy", "watch"})
_SPECIAL_VERBS_NO_SUBRESOURCES = frozenset({"proxy"})
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
_METHOD_VERBS = {
    "POST": "create",
    "GET": "get",
    "HEAD": "get",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}


class RequestInfo(NamedTuple):
    """The parsed request, as ``request.RequestInfo`` (the authorizer's attributes)."""

    is_resource_request: bool
    path: str
    verb: str
    api_prefix: str = ""
    api_group: str = ""
    api_version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""


def resource_attributes(
    verb: str,
    resource: str,
    *,
    group: str = "",
    version: str = "*",
    namespace: str = "",
    name: str = "",
    subresource: str = "",
) -> RequestInfo:
    """Attributes for a check the server makes itself (create-on-apply, access reviews)."""
    return RequestInfo(True, "", verb, "", group, version, namespace, resource, subresource, name)


def non_resource_attributes(verb: str, path: str) -> RequestInfo:
    """Attributes for a non-resource path (``/healthz``), as an access review asks them."""
    return RequestInfo(False, path, verb)


def parse(method: str, path: str, query: dict[str, str]) -> RequestInfo:
    """The :class:`RequestInfo` of ``method path?query`` (query: first value per key)."""
    verb = method.lower()
    stripped = path.strip("/")
    parts = stripped.split("/") if stripped else []
    if len(parts) < 3 or parts[0] not in _API_PREFIXES:
        return RequestInfo(False, path, verb)
    prefix = parts[0]
    parts = parts[1:]
    group = ""
    if prefix not in _GROUPLESS_PREFIXES:
        if len(parts) < 3:
            return RequestInfo(False, path, verb)
        group, parts = parts[0], parts[1:]
    version, parts = parts[0], parts[1:]
    if parts[0] in _SPECIAL_VERBS:
        if len(parts) < 2:
            # the real server fails the request here; treat it like any resource request
            return RequestInfo(True, path, parts[0], prefix, group, version)
        verb, parts = parts[0], parts[1:]
    else:
        verb = _METHOD_VERBS.get(method, "")
    namespace = ""
    if parts[0] == "namespaces" and len(parts) > 1:
        namespace = parts[1]
        if len(parts) > 2 and parts[2] not in _NAMESPACE_SUBRESOURCES:
            parts = parts[2:]
    resource = parts[0]
    name = parts[1] if len(parts) >= 2 else ""
    sub = parts[2] if len(parts) >= 3 and verb not in _SPECIAL_VERBS_NO_SUBRESOURCES else ""
    if not name and verb == "get":
        watch = query.get("watch")
        verb = "watch" if watch is not None and watch.lower() not in ("false", "0") else "list"
        selected = _exact_name(query.get("fieldSelector") or "")
        if selected and _valid_path_segment(selected):
            name = selected
    if not name and verb == "delete":
        verb = "deletecollection"
    return RequestInfo(True, path, verb, prefix, group, version, namespace, resource, sub, name)


def _exact_name(selector: str) -> str:
    """``RequiresExactMatch("metadata.name")`` of a field selector ('' when there is none)."""
    for term in _split_terms(selector):
        for op in ("==", "="):
            key, sep, value = term.partition(op)
            if sep and key.strip() == "metadata.name" and not key.endswith("!"):
                return value.strip().replace("\\,", ",").replace("\\=", "=")
    return ""


def _split_terms(selector: str) -> list[str]:
    terms, cur, escaped = [], [], False
    for ch in selector:
        if escaped:
            cur.append(ch)
            escaped = False
        elif ch == "\\":
            cur.append(ch)
            escaped = True
        elif ch == ",":
            terms.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    terms.append("".join(cur))
    return terms


def _valid_path_segment(name: str) -> bool:
    """``path.IsValidPathSegmentName``: not ``.``/``..``, no ``/`` or ``%``."""
    return name not in (".", "..") and "/" not in name and "%" not in name
