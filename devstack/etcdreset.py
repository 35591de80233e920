"""Return a test cluster to a baseline through etcd, under a running kube-apiserver.

:func:`snapshot` reads every key under ``/registry/`` with its value and revision;
:func:`reset` then deletes the keys written since and puts back the changed and the deleted
ones, 128 per etcd transaction, over etcd's JSON gateway (``/v3/kv/range``, ``/v3/kv/txn``). The API
server's watch cache and every controller see ordinary DELETED and MODIFIED events, as if
an admin had removed the objects, so a fresh cluster costs milliseconds instead of a
restart. Left alone (:func:`kept`): the system namespaces (the controllers' own
ServiceAccounts and leases live there), leases, IP allocations and what the API server
maintains itself (APIServices, priority-and-fairness objects).
"""

from __future__ import annotations

import base64
from typing import Any

import requests

SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")
KEEP_RESOURCES = (
    "leases",
    "masterleases",
    "ranges",
    "apiregistration.k8s.io",
    "flowschemas",
    "prioritylevelconfigurations",
    "ipaddresses",
    "servicecidrs",
)
TXN_OPS = 128  # etcd's default --max-txn-ops


def _post(etcd_url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    resp = requests.post(etcd_url + path, json=body, timeout=30)
    resp.raise_for_status()
    return resp.json()


def _range(etcd_url: str, keys_only: bool, prefix: bytes = b"/registry/") -> list[dict[str, Any]]:
    end = prefix[:-1] + bytes([prefix[-1] + 1])  # the range of every key with the prefix
    body = {
        "key": base64.b64encode(prefix).decode(),
        "range_end": base64.b64encode(end).decode(),
        "keys_only": keys_only,
    }
    return _post(etcd_url, "/v3/kv/range", body).get("kvs", [])


def snapshot(etcd_url: str) -> dict[str, dict[str, Any]]:
    """{base64 key: {"key", "value", "mod_revision", ...}} of every key now."""
    return {kv["key"]: kv for kv in _range(etcd_url, keys_only=False)}


def new_pods_owned_by(etcd_url: str, baseline: dict[str, dict[str, Any]], kind: str) -> int:
    """How many pods written since ``baseline`` a ``kind`` controls (their stored owner
    reference names the kind; core objects are stored as protobuf, strings verbatim)."""
    needle = kind.encode()
    return sum(
        1
        for kv in _range(etcd_url, keys_only=False, prefix=b"/registry/pods/")
        if kv["key"] not in baseline and needle in base64.b64decode(kv["value"])
    )


def kept(b64_key: str, extra_namespaces: tuple[str, ...] = ()) -> bool:
    """Whether a reset leaves this key alone (module docstring)."""
    key = base64.b64decode(b64_key).decode(errors="replace")
    parts = key.split("/")[2:]  # [group,] resource, [namespace,] name
    if parts and "." in parts[0]:  # CRDs and some built-in groups: /registry/<group>/...
        if parts[0] in KEEP_RESOURCES:
            return True
        parts = parts[1:]
    if not parts or parts[0] in KEEP_RESOURCES:
        return True
    return len(parts) >= 3 and parts[1] in (*SYSTEM_NAMESPACES, *extra_namespaces)


def reset(etcd_url: str, baseline: dict[str, dict[str, Any]], *keep_namespaces: str) -> int:
    """Delete the keys written since ``baseline``, put back the changed and deleted ones;
    the count. Any state becomes the baseline, so one cluster can switch between several."""
    ops = []
    present = set()
    for kv in _range(etcd_url, keys_only=True):
        key = kv["key"]
        present.add(key)
        if kept(key, keep_namespaces):
            continue
        base = baseline.get(key)
        if base is None:
            ops.append({"request_delete_range": {"key": key}})
        elif base["mod_revision"] != kv["mod_revision"]:
            ops.append({"request_put": {"key": key, "value": base["value"]}})
    for key, base in baseline.items():
        if key not in present and not kept(key, keep_namespaces):
            ops.append({"request_put": {"key": key, "value": base["value"]}})
    for start in range(0, len(ops), TXN_OPS):
        _post(etcd_url, "/v3/kv/txn", {"success": ops[start : start + TXN_OPS]})
    return len(ops)
