"""Object storage: one global resourceVersion, cached JSON bytes, per-resource event history.

Every stored object keeps its serialized JSON (``raw``); a list page is a join of cached
bytes, so listing 150,000 pods does no JSON encoding. Objects are decoded only when written.

Every write bumps the global resourceVersion (etcd's revision) and appends one event to the
history of its resource type, as the API server's watch cache keeps one event buffer per
type (``staging/src/k8s.io/apiserver/pkg/storage/cacher/watch_cache.go``): a burst of Lease
or Event writes never pushes node events out of the node watch window. An event carries the
state before the write (``prev``, the replaced :class:`Record`, ``None`` on create), so a
watch with a selector can tell "starts matching" from "stops matching"
(``cache_watcher.go`` convertToWatchEvent) and a list can be served as of an older
resourceVersion: the state at ``T`` of every key written since is the ``prev`` of its first
event after ``T`` (:meth:`Store.state_at`), O(writes since ``T``) and never O(objects).

Keys are kept in etcd's order (``/registry/<resource>/<namespace>/<name>`` compared as
bytes), which differs from tuple order when one namespace name is a prefix of another
(``team-a/x`` sorts before ``team/x``).
"""

from __future__ import annotations

import bisect
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from simcluster.quota import PodQuotaInfo, pod_quota_info
from simcluster.resources import RESOURCES

Key = tuple[str, str]
_DUMP = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_EV_RV = attrgetter("rv")


def order_key(key: Key) -> str:
    """The key relative to ``/registry/<resource>/``, as etcd orders keys."""
    return f"{key[0]}/{key[1]}" if key[0] else key[1]


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
    """One write, pre-serialized, with the state it replaced.

    ``raw``/``labels``/``fields`` describe the object after the write (for ``DELETED``: its
    last state, with the deletion resourceVersion); ``prev`` is the record before the write
    (``None`` for ``ADDED``; for ``DELETED`` the removed record).
    """

    rv: int
    resource: str
    type: str
    namespace: str
    name: str
    raw: bytes
    labels: dict[str, str]
    fields: dict[str, str]
    prev: Record | None = None

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)

    def line(self) -> bytes:
        return b'{"type":"' + self.type.encode() + b'","object":' + self.raw + b"}\n"


class History:
    """The recent writes of one resource type, oldest first (a watch cache event buffer).

    ``floor`` is the oldest resourceVersion this history can answer for: every write with a
    resourceVersion above it is kept. A watch or list as of an older version is "too old"
    (410), as ``watch_cache.go`` getAllEventsSinceLocked answers below ``oldest - 1``.
    ``cache_rv`` is the version the type's watch cache has reached (its last event, or a
    progress notification from storage): what a list served from the cache reports.
    """

    __slots__ = ("cache_rv", "cond", "events", "floor")

    def __init__(self, rv: int, cond: threading.Condition) -> None:
        self.events: list[Event] = []
        self.floor = rv
        self.cache_rv = rv
        self.cond = cond

    def append(self, ev: Event, limit: int) -> None:
        self.events.append(ev)
        self.cache_rv = ev.rv
        if len(self.events) > 2 * limit:  # amortized: trim in bulk
            del self.events[: len(self.events) - limit]
            self.floor = self.events[0].rv - 1

    def since(self, rv: int) -> list[Event] | None:
        """Events with resourceVersion > ``rv``, or ``None`` if some were already dropped."""
        if rv < self.floor:
            return None
        return self.events[bisect.bisect_right(self.events, rv, key=_EV_RV) :]

    def reset(self, rv: int) -> None:
        self.events.clear()
        self.floor = rv
        self.cache_rv = rv


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
    elif resource == "events":  # pkg/registry/core/event/strategy.go ToSelectableFields
        inv = obj.get("involvedObject") or {}
        for k in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath"):
            base[f"involvedObject.{k}"] = inv.get(k) or ""
        reporting = obj.get("reportingComponent") or ""
        base["reason"] = obj.get("reason") or ""
        base["reportingComponent"] = reporting
        base["source"] = (obj.get("source") or {}).get("component") or reporting
        base["type"] = obj.get("type") or ""
    return base


class Store:
    """Thread-safe in-memory object store. All access goes through ``lock``."""

    def __init__(self, history_size: int = 10_000) -> None:
        self.lock = threading.RLock()
        # notified on every write (and on close); per-type conditions below wake only the
        # watchers of the type written, so 500 Lease renewals/s leave node watchers asleep
        self.cond = threading.Condition(self.lock)
        self.rv = 1
        self.objects: dict[str, dict[Key, Record]] = {r.name: {} for r in RESOURCES}
        self.by_ns: dict[str, dict[str, set[str]]] = {r.name: {} for r in RESOURCES}
        self._sorted: dict[str, list[Key] | None] = {r.name: None for r in RESOURCES}
        self.history_size = history_size
        self.histories: dict[str, History] = {
            r.name: History(self.rv, threading.Condition(self.lock)) for r in RESOURCES
        }
        self.closed = False

    # ------------------------------------------------------------------ reads
    def get(self, resource: str, namespace: str, name: str) -> Record | None:
        return self.objects[resource].get((namespace, name))

    def sorted_keys(self, resource: str) -> list[Key]:
        """Every key of ``resource`` in etcd order (kept sorted incrementally)."""
        keys = self._sorted[resource]
        if keys is None:
            keys = sorted(self.objects[resource], key=order_key)
            self._sorted[resource] = keys
        return keys

    def key_range(self, resource: str, namespace: str | None) -> tuple[list[Key], int, int]:
        """``(keys, lo, hi)``: ``keys[lo:hi]`` are the keys under ``namespace`` (all if None)."""
        keys = self.sorted_keys(resource)
        if not namespace:
            return keys, 0, len(keys)
        lo = bisect.bisect_left(keys, namespace + "/", key=order_key)
        hi = bisect.bisect_left(keys, namespace + "0", key=order_key)  # "0" follows "/"
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

    # ----------------------------------------------------------------- history
    def history(self, resource: str) -> History:
        return self.histories[resource]

    def events_since(self, resource: str, rv: int) -> list[Event] | None:
        """Writes to ``resource`` after ``rv``; ``None`` when the history no longer reaches it."""
        return self.histories[resource].since(rv)

    def events_after(self, rv: int) -> list[Event] | None:
        """Writes of every type after ``rv``, oldest first; ``None`` if a type's history
        no longer reaches ``rv``. For "did anything I cache change" checks (rbac.py)."""
        out: list[Event] = []
        for h in self.histories.values():
            events = h.since(rv)
            if events is None:
                return None
            out.extend(events)
        out.sort(key=_EV_RV)
        return out

    def floor(self, resource: str) -> int:
        """The oldest resourceVersion of ``resource`` still answerable (watch or list)."""
        return self.histories[resource].floor

    def cache_rv(self, resource: str) -> int:
        """The resourceVersion the type's watch cache has reached."""
        return self.histories[resource].cache_rv

    def progress(self, resource: str) -> int:
        """A progress notification: the type's cache catches up with the global version.

        The real cacher asks etcd for one when a consistent read or a watch-list waits for
        the cache to be fresh (``cacher.go`` waitUntilWatchCacheFreshAndForceAllEvents).
        """
        h = self.histories[resource]
        h.cache_rv = max(h.cache_rv, self.rv)
        return h.cache_rv

    def state_at(self, resource: str, rv: int) -> dict[Key, Record | None] | None:
        """Keys written after ``rv`` -> their record as of ``rv`` (``None``: absent then).

        Every other key is unchanged since ``rv``. ``None`` when the history no longer
        reaches ``rv`` (the stand-in for etcd compaction).
        """
        events = self.histories[resource].since(rv)
        if events is None:
            return None
        overlay: dict[Key, Record | None] = {}
        for ev in events:
            key = (ev.namespace, ev.name)
            if key not in overlay:
                overlay[key] = ev.prev
        return overlay

    # ----------------------------------------------------------------- writes
    def put(self, resource: str, obj: dict[str, Any], event_type: str, emit: bool = True) -> Record:
        """Store ``obj`` (already fully prepared) under a new resourceVersion.

        ``emit=False`` (bulk loading) records no event and forgets the type's history: a
        watch or list from an older resourceVersion of this type then gets 410.
        """
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
        prev = objs.get(key)
        if prev is None:
            keys = self._sorted[resource]
            if keys is not None:
                bisect.insort(keys, key, key=order_key)
            self.by_ns[resource].setdefault(ns, set()).add(name)
        objs[key] = rec
        if emit:
            ev = Event(self.rv, resource, event_type, ns, name, raw, rec.labels, rec.fields, prev)
            self._emit(ev)
        else:
            self.histories[resource].reset(self.rv)
        return rec

    def remove(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        """Delete an object; the DELETED event carries the deletion resourceVersion."""
        key = (namespace, name)
        rec = self.objects[resource].pop(key, None)
        if rec is None:
            return None
        keys = self._sorted[resource]
        if keys is not None:
            i = bisect.bisect_left(keys, order_key(key), key=order_key)
            if i < len(keys) and keys[i] == key:
                del keys[i]
            else:  # pragma: no cover - defensive: rebuild lazily
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
            Event(self.rv, resource, "DELETED", namespace, name, raw, rec.labels, rec.fields, rec)
        )
        return obj

    def _emit(self, ev: Event) -> None:
        h = self.histories[ev.resource]
        h.append(ev, self.history_size)
        h.cond.notify_all()
        self.cond.notify_all()

    def compact(self) -> None:
        """Forget all history (a watch or list from any older resourceVersion then gets 410)."""
        with self.lock:
            for h in self.histories.values():
                h.reset(self.rv)

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.cond.notify_all()
            for h in self.histories.values():
                h.cond.notify_all()
