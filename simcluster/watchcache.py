"""Watch streams as the v1.32 watch cache serves them.

Follows ``staging/src/k8s.io/apiserver/pkg/storage/cacher/``:

- ``cacher.go`` Watch: the resourceVersion to start from (getWatchCacheResourceVersion:
  "" with ``sendInitialEvents`` is the current etcd revision; "0" is any; N is N), the wait
  for the cache to be fresh when ``sendInitialEvents=true`` (waitUntilWatchCacheFresh...,
  3 s, then an ``ERROR`` event with the 504 ``Too large resource version``), and
  getBookmarkAfterResourceVersionLockedFunc for the watch-list end bookmark.
- ``watch_cache.go`` getAllEventsSinceLocked: initial ``ADDED`` events from the store for
  watch-list requests (which every watch from "" or "0" is in 1.32, see
  :mod:`simcluster.listopts`), else the buffered events after the version, or an ``ERROR``
  event ``too old resource version: N (oldest-1)`` (410) when the buffer no longer has them.
- ``cache_watcher.go`` convertToWatchEvent: with a label or field selector an update that
  makes an object match is ``ADDED``, one that keeps it matching ``MODIFIED``, one that
  makes it stop matching ``DELETED`` carrying the previous object with the event's
  resourceVersion; process() sends only events (and bookmarks) newer than the start
  version; nextBookmarkTime: bookmarks roughly every ``bookmark_interval_s`` (the real
  frequency is one minute) and 2 s before the watch's deadline, dispatched on the cacher's
  ~1 s ticks; the first bookmark of a watch-list request carries the annotation
  ``k8s.io/initial-events-end: "true"`` (storage.AnnotateInitialEventsEndBookmark).

A watcher that falls behind the bounded history is closed without an error, as the cacher
terminates unresponsive watchers; its client re-watches from its last resourceVersion.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from simcluster.errors import status_body
from simcluster.listopts import internal, parse_options, rv_error, too_large
from simcluster.resources import ResourceType, conversion_name
from simcluster.selectors import parse_field_selector, parse_label_selector
from simcluster.store import Event, serialize

if TYPE_CHECKING:
    from simcluster.cluster import SimCluster

BLOCK_TIMEOUT_S = 3.0  # watch_cache.go blockTimeout
MIN_REQUEST_TIMEOUT_S = 1800.0  # kube-apiserver --min-request-timeout
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
_TICK_ORIGIN = time.monotonic()  # when "the cacher" started ticking


@dataclass
class WatchPlan:
    """Everything decided before the stream starts (under the store lock)."""

    rt: ResourceType
    ns: str | None
    lsel: Any
    fsel: Any
    timeout: float
    bookmarks: bool
    start_rv: int = 0  # process(): only events newer than this are sent
    last: int = 0  # position in the type's history already consumed
    bookmark_after: int = 0  # > 0: a watch-list request waiting for its end bookmark
    initial: list[bytes] = field(default_factory=list)
    error: bytes | None = None  # a single ERROR event, then the stream ends


def prepare(
    cluster: SimCluster, rt: ResourceType, ns: str | None, params: dict[str, str]
) -> WatchPlan:
    """Validate the request and compute the start of the stream.

    Raises :class:`~simcluster.errors.ApiError` for what the real server answers before
    the stream starts (400/422 options, 500 for an unparsable resourceVersion).
    """
    opts = parse_options(params, watch=True)
    err = rv_error(opts.resource_version)
    if err:  # cacher.Watch returns the versioner's error: not an API status, so a 500
        raise internal(err)
    lsel = parse_label_selector(params.get("labelSelector"))
    fsel = parse_field_selector(params.get("fieldSelector"), rt.fields, conversion_name(rt))
    if opts.timeout_seconds:
        timeout = float(opts.timeout_seconds)
    else:  # get.go: minRequestTimeout * (1 + rand)
        timeout = MIN_REQUEST_TIMEOUT_S * (random.random() + 1.0)
    plan = WatchPlan(rt, ns, lsel, fsel, timeout, opts.allow_bookmarks)
    s = cluster.store
    send_initial = opts.send_initial_events is True
    with s.lock:
        # getWatchCacheResourceVersion: "" is the current revision (read from etcd)
        required = s.rv if opts.resource_version == "" else opts.rv
        if send_initial:
            if required > s.rv:
                deadline = time.monotonic() + BLOCK_TIMEOUT_S
                while required > s.rv and not s.closed:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        plan.error = _error_line(
                            too_large(required, s.cache_rv(rt.name), 1).status()
                        )
                        return plan
                    s.cond.wait(timeout=left)
            # the store's state at the cache's version: the interval of initial events
            snapshot_rv = s.progress(rt.name) if required else s.cache_rv(rt.name)
            if plan.bookmarks:
                plan.bookmark_after = required if required else snapshot_rv
            keys, lo, hi = s.key_range(rt.name, ns)
            objs = s.objects[rt.name]
            for k in keys[lo:hi]:
                rec = objs[k]
                if (lsel is None or lsel(rec.labels)) and (fsel is None or fsel(rec.fields)):
                    plan.initial.append(b'{"type":"ADDED","object":' + rec.raw + b"}\n")
            plan.last = snapshot_rv
            # processInterval: initial events carry the snapshot's version
            plan.start_rv = max(required, snapshot_rv) if plan.initial else required
            return plan
        if opts.resource_version != "" and required == 0:
            required = s.cache_rv(rt.name)  # sendInitialEvents=false at "0": from now on
        if s.events_since(rt.name, required) is None:
            floor = s.floor(rt.name)
            st = status_body(410, f"too old resource version: {required} ({floor})", "Expired")
            plan.error = _error_line(st)
            return plan
        plan.start_rv = plan.last = required
    return plan


def run(cluster: SimCluster, plan: WatchPlan, send: Callable[[bytes], None]) -> None:
    """Stream events until the deadline, the server stops or the watcher falls behind."""
    if plan.error is not None:
        send(plan.error)
        return
    for i in range(0, len(plan.initial), 500):
        send(b"".join(plan.initial[i : i + 500]))
    s = cluster.store
    h = s.history(plan.rt.name)
    t0 = time.monotonic()
    deadline = t0 + plan.timeout
    freq = float(cluster.bookmark_interval_s)
    tick = float(getattr(cluster, "bookmark_tick_s", min(1.0, freq)))
    # cacheWatcher state: waiting for the watch-list end bookmark, or already past it
    waiting = plan.bookmark_after > 0
    sent_end = not waiting

    def schedule(now: float) -> float | None:
        if not plan.bookmarks:
            return None
        if waiting:
            due = now  # nextBookmarkTime: "schedule immediately" (the next tick)
        else:
            due = min(now + freq, deadline - 2.0)
            if due <= now:  # the deadline was set before the watcher was registered
                return None
        # the cacher's bookmark timer ticks for all its watchers, not from each watch's
        # start (cacher.go dispatchEvents, watcherBookmarkTimeBuckets): the next tick of the
        # process-wide grid, so a watch-list's end bookmark comes within a tick
        due = max(due, now + 1e-6)
        return _TICK_ORIGIN + math.ceil((due - _TICK_ORIGIN) / tick - 1e-9) * tick

    next_bm = schedule(t0)
    last = plan.last
    while True:
        now = time.monotonic()
        if now >= deadline:
            return
        with h.cond:
            events = h.since(last)
            if events == [] and not s.closed:
                wake = deadline if next_bm is None else min(deadline, next_bm)
                h.cond.wait(timeout=max(0.0, wake - now))
                events = h.since(last)
            closed = s.closed
            bookmark_rv = h.cache_rv
        if events is None:
            return  # fell behind the history: the cacher terminates such watchers
        out = []
        for ev in events:
            last = ev.rv
            if ev.rv <= plan.start_rv:
                continue
            line = convert(ev, plan.ns, plan.lsel, plan.fsel)
            if line is not None:
                out.append(line)
        if out:
            send(b"".join(out))
        now = time.monotonic()
        if next_bm is not None and now >= next_bm and now < deadline:
            if bookmark_rv >= plan.bookmark_after:  # nonblockingAdd drops older bookmarks
                waiting = False
                if bookmark_rv > plan.start_rv or (bookmark_rv == plan.start_rv and not sent_end):
                    send(bookmark(plan.rt, bookmark_rv, annotate=not sent_end))
                    sent_end = True
            next_bm = schedule(now)
        if closed:
            return


def convert(ev: Event, ns: str | None, lsel: Any, fsel: Any) -> bytes | None:
    """``cacheWatcher.convertToWatchEvent``: the event this watcher sees, if any."""
    if ns and ev.namespace != ns:
        return None
    prev = ev.prev
    if lsel is None and fsel is None:
        cur_ok = ev.type != "DELETED"
        old_ok = prev is not None
    else:
        cur_ok = (
            ev.type != "DELETED"
            and (lsel is None or lsel(ev.labels))
            and (fsel is None or fsel(ev.fields))
        )
        old_ok = (
            prev is not None
            and (lsel is None or lsel(prev.labels))
            and (fsel is None or fsel(prev.fields))
        )
    if cur_ok:
        kind = b"MODIFIED" if old_ok else b"ADDED"
        return b'{"type":"' + kind + b'","object":' + ev.raw + b"}\n"
    if not old_ok:
        return None
    if ev.type == "DELETED":  # raw is already the last state at the deletion version
        return b'{"type":"DELETED","object":' + ev.raw + b"}\n"
    # stopped matching: the previous object, with the event's resourceVersion
    obj = json.loads(prev.raw)  # type: ignore[union-attr]
    obj.setdefault("metadata", {})["resourceVersion"] = str(ev.rv)
    return b'{"type":"DELETED","object":' + serialize(obj) + b"}\n"


def bookmark(rt: ResourceType, rv: int, annotate: bool = False) -> bytes:
    """A BOOKMARK event: an empty object of the type carrying only a resourceVersion."""
    # (no zero creationTimestamp: omitted since v1.33, metav1.ObjectMeta ``omitzero``)
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    if annotate:
        meta["annotations"] = {INITIAL_EVENTS_END: "true"}
    obj = {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}
    return b'{"type":"BOOKMARK","object":' + _dumps(obj) + b"}\n"


def _error_line(status: dict[str, Any]) -> bytes:
    return b'{"type":"ERROR","object":' + _dumps(status) + b"}\n"


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()
