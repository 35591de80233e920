"""Object storage: one global resourceVersion, cached JSON bytes, event history for watches.

Every stored object keeps its serialized JSON (``raw``); a list page is a join of cached
bytes, so listing 150,000 pods does no JSON encoding. Objects are decoded only when written.
Every write bumps the global resourceVersion and appends one event, so the history is a
contiguous run of resourceVersions and a watch can resume from any of them it still holds.
"""

from __future__ import annotations

import bisect
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from simcluster.quota import PodQuotaInfo, pod_quota_info
from simcluster.resources import RESOURCES

Key = tuple[str, str]
_DUMP = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


class Record:
    """One stored object: its cached bytes plus the few fields selectors and quota need."""

    __slots__ = ("fields", "info", "labels", "name", "namespace", "raw", "rv")

    def __init__(
        self,
        namespace: str,
        name: str,
        rv: int,
        raw: bytes,
        labels: dict[str, str],
        fields: dict[str, str],
        info: PodQuotaInfo | None,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.rv = rv
        self.raw = raw
        self.labels = labels
        self.fields = fields
        self.info = info

    def obj(self) -> dict[str, Any]:
        """A fresh decoded copy (callers may mutate it)."""
        return json.loads(self.raw)


@dataclass(slots=True)
class Event:
    """One watch event, pre-serialized."""

    rv: int
    resource: str
    type: str
    namespace: str
    name: str
    raw: bytes
    labels: dict[str, str]
    fields: dict[str, str]

    def line(self) -> bytes:
        return b'{"type":"' + self.type.encode() + b'","object":' + self.raw + b"}\n"


def serialize(obj: dict[str, Any]) -> bytes:
    """Serialize with apiVersion/kind/metadata first, as the API server does."""
    ordered = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind")}
    ordered["metadata"] = obj.get("metadata", {})
    for k, v in obj.items():
        if k not in ordered:
            ordered[k] = v
    return _DUMP(ordered).encode()


def extract_fields(resource: str, obj: dict[str, Any]) -> dict[str, str]:
    """Values for field selectors beyond metadata.name/namespace."""
    meta = obj.get("metadata") or {}
    base = {"metadata.name": meta.get("name", ""), "metadata.namespace": meta.get("namespace", "")}
    if resource == "pods":
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        base.update(
            {
                "spec.nodeName": spec.get("nodeName") or "",
                "status.phase": status.get("phase") or "",
                "spec.schedulerName": spec.get("schedulerName") or "",
                "spec.serviceAccountName": spec.get("serviceAccountName") or "",
                "spec.restartPolicy": spec.get("restartPolicy") or "",
                "status.podIP": status.get("podIP") or "",
                "status.nominatedNodeName": status.get("nominatedNodeName") or "",
            }
        )
    elif resource == "nodes":
        base["spec.unschedulable"] = (
            "true" if (obj.get("spec") or {}).get("unschedulable") else "false"
        )
    elif resource == "namespaces":
        base["status.phase"] = (obj.get("status") or {}).get("phase") or ""
    elif resource == "secrets":
        base["type"] = obj.get("type") or ""
    return base


class Store:
    """Thread-safe in-memory object store. All access goes through ``lock``."""

    def __init__(self, history_size: int = 10_000) -> None:
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.rv = 1
        self.objects: dict[str, dict[Key, Record]] = {r.name: {} for r in RESOURCES}
        self.by_ns: dict[str, dict[str, set[str]]] = {r.name: {} for r in RESOURCES}
        self._sorted: dict[str, list[Key] | None] = {r.name: None for r in RESOURCES}
        self.history: list[Event] = []
        self.history_size = history_size
        self.history_first_rv = self.rv + 1
        self.closed = False

    # ------------------------------------------------------------------ reads
    def get(self, resource: str, namespace: str, name: str) -> Record | None:
        return self.objects[resource].get((namespace, name))

    def sorted_keys(self, resource: str) -> list[Key]:
        keys = self._sorted[resource]
        if keys is None:
            keys = sorted(self.objects[resource])
            self._sorted[resource] = keys
        return keys

    def key_range(self, resource: str, namespace: str | None) -> tuple[list[Key], int, int]:
        keys = self.sorted_keys(resource)
        if namespace is None:
            return keys, 0, len(keys)
        lo = bisect.bisect_left(keys, (namespace, ""))
        hi = bisect.bisect_left(keys, (namespace + "\x00", ""))
        return keys, lo, hi

    def in_namespace(self, resource: str, namespace: str) -> Iterator[Record]:
        objs = self.objects[resource]
        for name in list(self.by_ns[resource].get(namespace, ())):
            rec = objs.get((namespace, name))
            if rec is not None:
                yield rec

    def count(self, resource: str, namespace: str | None = None) -> int:
        if namespace is None:
            return len(self.objects[resource])
        return len(self.by_ns[resource].get(namespace, ()))

    # ----------------------------------------------------------------- writes
    def put(self, resource: str, obj: dict[str, Any], event_type: str, emit: bool = True) -> Record:
        """Store ``obj`` (already fully prepared) under a new resourceVersion."""
        meta = obj["metadata"]
        ns = meta.get("namespace", "") or ""
        name = meta["name"]
        self.rv += 1
        meta["resourceVersion"] = str(self.rv)
        raw = serialize(obj)
        info = pod_quota_info(obj) if resource == "pods" else None
        rec = Record(
            ns,
            name,
            self.rv,
            raw,
            dict(meta.get("labels") or {}),
            extract_fields(resource, obj),
            info,
        )
        objs = self.objects[resource]
        key = (ns, name)
        if key not in objs:
            self._sorted[resource] = None
            self.by_ns[resource].setdefault(ns, set()).add(name)
        objs[key] = rec
        if emit:
            self._emit(Event(self.rv, resource, event_type, ns, name, raw, rec.labels, rec.fields))
        else:
            self.history.clear()
            self.history_first_rv = self.rv + 1
        return rec

    def remove(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        """Delete an object; the DELETED event carries the deletion resourceVersion."""
        rec = self.objects[resource].pop((namespace, name), None)
        if rec is None:
            return None
        self._sorted[resource] = None
        names = self.by_ns[resource].get(namespace)
        if names is not None:
            names.discard(name)
            if not names:
                del self.by_ns[resource][namespace]
        obj = rec.obj()
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        raw = serialize(obj)
        self._emit(
            Event(self.rv, resource, "DELETED", namespace, name, raw, rec.labels, rec.fields)
        )
        return obj

    def _emit(self, ev: Event) -> None:
        if not self.history:
            self.history_first_rv = ev.rv
        self.history.append(ev)
        if len(self.history) > 2 * self.history_size:
            del self.history[: len(self.history) - self.history_size]
            self.history_first_rv = self.history[0].rv
        self.cond.notify_all()

    def events_after(self, rv: int) -> list[Event] | None:
        """Events with resourceVersion > rv, or ``None`` if some were already dropped."""
        if rv + 1 < self.history_first_rv:
            return None
        idx = max(0, rv + 1 - self.history_first_rv)
        return self.history[idx:]

    def oldest_watchable_rv(self) -> int:
        return self.history_first_rv - 1

    def compact(self) -> None:
        """Forget all history (a watch from any older resourceVersion then gets 410)."""
        with self.lock:
            self.history.clear()
            self.history_first_rv = self.rv + 1

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.cond.notify_all()
