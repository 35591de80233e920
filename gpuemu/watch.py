"""List-then-watch informers and a delayed work queue over the plain Kubernetes REST API.

The shapes follow client-go:

- :class:`Informer` is ``tools/cache/reflector.go`` ``ListAndWatch`` plus an indexer: a
  paginated LIST (``limit``/``continue``; an expired continue token, 410, restarts the list),
  then a WATCH from the list's ``resourceVersion`` with bookmarks; a watch that ends or drops
  is resumed from the last resourceVersion seen, and ``410 Gone`` ("too old resource
  version", as an HTTP status or a watch ``ERROR`` event) makes it list again. A relist
  replaces the cache like ``DeltaFIFO.Replace``: objects that disappeared meanwhile are
  delivered as deletions, changed ones as updates.
- :class:`WorkQueue` is ``util/workqueue``'s delaying, de-duplicating queue: a key queued
  twice runs once, a key is never run by two workers at once (added while running, it runs
  again afterwards), a failing item is retried with exponential backoff
  (``DefaultControllerRateLimiter``'s per-item 5 ms .. 1000 s, capped lower here).

Handlers run on the informer's thread and must be quick: they queue work.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Any

import requests

from devstack.kubeapi import KubeAPI, KubeError

log = logging.getLogger("gpuemu.watch")


@dataclass(frozen=True)
class Event:
    """One change as a handler sees it: ``type`` ADDED/MODIFIED/DELETED, ``old``/``new``
    (None where absent) and ``initial`` (part of the informer's first list)."""

    type: str
    old: dict[str, Any] | None
    new: dict[str, Any] | None
    initial: bool = False

    @property
    def obj(self) -> dict[str, Any]:
        return self.new if self.new is not None else (self.old or {})


Handler = Callable[[Event], None]


def key_of(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace", ""), meta["name"]


class Gone(Exception):
    """410: the resourceVersion (or continue token) is too old; list again."""


class Informer:
    """A cache of one resource kept current by list-then-watch on a thread of its own."""

    def __init__(
        self,
        api: KubeAPI,
        resource: str,
        handler: Handler,
        *,
        namespace: str = "",
        label_selector: str = "",
        field_selector: str = "",
        watch_timeout_s: int = 60,
        retry_s: float = 1.0,
        page_size: int = 500,
        absent_retry_s: float = 5.0,
    ) -> None:
        self.api = api
        self.resource = resource
        self.handler = handler
        self.namespace = namespace
        self.selectors = {
            k: v
            for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector))
            if v
        }
        self.watch_timeout_s = watch_timeout_s
        self.retry_s = retry_s
        self.page_size = page_size
        self.absent_retry_s = absent_retry_s
        self.name = f"informer-{resource}" + (f"-{namespace}" if namespace else "")
        self.lists = 0  # how many times it listed (tests: a relist happened)
        self._cache: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._dispatching = False
        self._response: requests.Response | None = None
        self._thread: threading.Thread | None = None
        # A session of its own, so stop() can cut this watch without touching others.
        self._session = requests.Session()
        self._session.trust_env = api.session.trust_env  # kubeapi.py: no REQUESTS_CA_BUNDLE
        self._session.verify = api.session.verify
        self._session.cert = api.session.cert
        self._session.headers.update(api.session.headers)

    # ---------------------------------------------------------------- reading
    def get(self, name: str, namespace: str = "") -> dict[str, Any] | None:
        with self._lock:
            return self._cache.get((namespace, name))

    def items(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._cache.values())

    def has_synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def busy(self) -> bool:
        """Delivering events to the handler right now."""
        return self._dispatching

    # -------------------------------------------------------------- lifecycle
    def start(self) -> Informer:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._abort()
        if self._thread is not None:
            self._thread.join(timeout)
        self._session.close()

    def _abort(self) -> None:
        """Wake the thread blocked reading the watch stream (shut the socket down)."""
        resp = self._response
        if resp is None:
            return
        with contextlib.suppress(Exception):
            sock = resp.raw.connection.sock  # urllib3 2.x
            sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(Exception):
            resp.close()

    # ------------------------------------------------------------------ loop
    def _run(self) -> None:
        rv = ""
        while not self._stop.is_set():
            try:
                if not self._served():
                    continue
                if not rv:
                    rv = self._list()
                rv = self._watch(rv)
            except Gone:
                log.info("%s: resourceVersion too old (410), listing again", self.name)
                rv = ""
            except (requests.RequestException, KubeError, ValueError, OSError) as exc:
                if self._stop.is_set():
                    break
                log.info("%s: %s; retrying in %.1f s", self.name, exc, self.retry_s)
                self._stop.wait(self.retry_s)
            except Exception:  # a handler bug must not end the informer
                log.exception("%s: unexpected error", self.name)
                self._stop.wait(self.retry_s)

    def _path(self) -> str:
        return self.api.resource(self.resource).path(self.namespace)

    def _served(self) -> bool:
        """A resource the server does not serve (a CRD not installed yet) is an empty list,
        looked up again every ``absent_retry_s``."""
        try:
            self.api.resource(self.resource)
            return True
        except KeyError:
            if not self._synced.is_set():
                log.info("%s: the server does not serve %s (yet)", self.name, self.resource)
                self._synced.set()
            self._stop.wait(self.absent_retry_s)
            return False

    def _list(self) -> str:
        """A full, paginated LIST; the cache is replaced and the differences delivered."""
        items: dict[tuple[str, str], dict[str, Any]] = {}
        query: dict[str, Any] = dict(self.selectors, limit=self.page_size)
        rv = ""
        while True:
            try:
                page = self.api.request("GET", self._path(), params=query)
            except KubeError as exc:
                if exc.status == 410:  # continue token expired: list from the start
                    query.pop("continue", None)
                    items.clear()
                    continue
                raise
            for obj in page.get("items") or []:
                items[key_of(obj)] = obj
            meta = page.get("metadata") or {}
            rv = meta.get("resourceVersion", rv)
            if not meta.get("continue"):
                break
            query["continue"] = meta["continue"]
        self.lists += 1
        initial = not self._synced.is_set()
        with self._lock:
            old_cache, self._cache = self._cache, dict(items)
        self._dispatching = True
        try:
            for key, obj in items.items():
                old = old_cache.get(key)
                if old is None:
                    self._deliver(Event("ADDED", None, obj, initial))
                elif _rv(old) != _rv(obj):
                    self._deliver(Event("MODIFIED", old, obj, initial))
            for key, old in old_cache.items():
                if key not in items:
                    self._deliver(Event("DELETED", old, None, initial))
        finally:
            self._dispatching = False
        self._synced.set()
        return rv

    def _stream(self, rv: str) -> Iterator[dict[str, Any]]:
        params = dict(
            self.selectors,
            watch="true",
            allowWatchBookmarks="true",
            timeoutSeconds=self.watch_timeout_s,
            resourceVersion=rv,
        )
        resp = self._session.get(
            self.api.server + self._path(),
            params=params,
            stream=True,
            timeout=(self.api.timeout, self.watch_timeout_s + 30),
        )
        self._response = resp
        try:
            if self._stop.is_set():  # stop() ran while the request was in flight
                return
            if resp.status_code == 410:
                raise Gone()
            if resp.status_code >= 400:
                raise KubeError(resp.status_code, resp.text, "WATCH", self._path())
            for line in resp.iter_lines():
                if self._stop.is_set():
                    return
                if line:
                    yield json.loads(line)
        finally:
            self._response = None
            resp.close()

    def _watch(self, rv: str) -> str:
        """Deliver watch events until the server ends the watch; the last resourceVersion."""
        for event in self._stream(rv):
            self._dispatching = True  # from the moment it is read (idle() must not miss it)
            try:
                rv = self._apply(event) or rv
            finally:
                self._dispatching = False
        return rv

    def _apply(self, event: dict[str, Any]) -> str:
        """One watch event into the cache and to the handler; its resourceVersion."""
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone()
            raise KubeError(obj.get("code") or 500, obj, "WATCH", self._path())
        if kind == "BOOKMARK":
            return _rv(obj)
        key = key_of(obj)
        with self._lock:
            old = self._cache.get(key)
            if kind == "DELETED":
                self._cache.pop(key, None)
            else:
                self._cache[key] = obj
        if kind == "DELETED":
            self._deliver(Event("DELETED", old or obj, None))
        else:
            self._deliver(Event("ADDED" if old is None else "MODIFIED", old, obj))
        return _rv(obj)

    def _deliver(self, event: Event) -> None:
        try:
            self.handler(event)
        except Exception:
            log.exception("%s: handler failed on %s", self.name, event.type)


def _rv(obj: dict[str, Any]) -> str:
    return (obj.get("metadata") or {}).get("resourceVersion", "")


class Retry(Exception):
    """Raised by a work item that wants to run again later (a conflict, a server hiccup)."""


class WorkQueue:
    """Keyed work with delays, run by a few worker threads (client-go's delaying workqueue)."""

    def __init__(self, workers: int = 2, name: str = "gpuemu", max_backoff_s: float = 10.0):
        self.name = name
        self.workers = workers
        self.max_backoff_s = max_backoff_s
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Hashable]] = []
        self._pending: dict[Hashable, tuple[float, Callable[[], Any]]] = {}
        self._running: set[Hashable] = set()
        self._dirty: dict[Hashable, Callable[[], Any]] = {}
        self._failures: dict[Hashable, int] = {}
        self._seq = itertools.count()
        self._stop = False
        self._threads: list[threading.Thread] = []

    def add(self, key: Hashable, fn: Callable[[], Any], delay: float = 0.0) -> None:
        """Queue ``fn`` under ``key`` after ``delay`` s; an already queued key keeps the earlier
        time and takes the newer function."""
        due = time.monotonic() + max(0.0, delay)
        with self._cond:
            if key in self._running:
                self._dirty[key] = fn
                return
            if key in self._pending:
                due = min(due, self._pending[key][0])
            self._pending[key] = (due, fn)
            heapq.heappush(self._heap, (due, next(self._seq), key))
            self._cond.notify()

    def start(self) -> WorkQueue:
        for i in range(self.workers):
            t = threading.Thread(target=self._work, name=f"{self.name}-worker-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout)

    def idle(self) -> bool:
        with self._cond:
            return not self._pending and not self._running and not self._dirty

    def __len__(self) -> int:
        with self._cond:
            return len(self._pending) + len(self._running)

    def _next(self) -> tuple[Hashable, Callable[[], Any]] | None:
        with self._cond:
            while not self._stop:
                now = time.monotonic()
                while self._heap:
                    due, _, key = self._heap[0]
                    entry = self._pending.get(key)
                    if entry is None or entry[0] != due:
                        heapq.heappop(self._heap)  # superseded
                        continue
                    if due > now:
                        break
                    heapq.heappop(self._heap)
                    del self._pending[key]
                    self._running.add(key)
                    return key, entry[1]
                wait = self._heap[0][0] - now if self._heap else None
                self._cond.wait(wait)
            return None

    def _work(self) -> None:
        while True:
            item = self._next()
            if item is None:
                return
            key, fn = item
            retry = False
            try:
                fn()
            except Retry as exc:
                retry = True
                log.info("%s %s: %s (retrying)", self.name, key, exc)
            except KubeError as exc:
                retry = exc.status in (409, 429) or exc.status >= 500
                log.info("%s %s: %s%s", self.name, key, exc, " (retrying)" if retry else "")
            except (requests.RequestException, OSError) as exc:
                retry = True
                log.info("%s %s: %s (retrying)", self.name, key, exc)
            except Exception:
                log.exception("%s %s failed", self.name, key)
            with self._cond:
                self._running.discard(key)
                if retry:
                    n = self._failures.get(key, 0) + 1
                    self._failures[key] = n
                    backoff = min(self.max_backoff_s, 0.05 * 2 ** (n - 1))
                else:
                    self._failures.pop(key, None)
                    backoff = 0.0
                again = self._dirty.pop(key, None)
                if again is None and retry:
                    again = fn
            if again is not None:
                self.add(key, again, backoff)
