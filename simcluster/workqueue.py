"""A delaying, de-duplicating work queue run by one background thread (the controllers).

The simulated controllers (quota, disruption, namespace, kubelet, node leases) are
asynchronous like the real ones, which react to informer events through client-go's
``workqueue.AddAfter``: a key queued again while it waits keeps the earliest due time, and
a key runs at most once at a time. One thread serves every controller, so they never race
one another; each task takes the store lock itself (the lock order is always store lock,
then this queue's lock, so ``add_after`` may be called from write hooks holding the store
lock).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Hashable

log = logging.getLogger("simcluster.controllers")


class WorkQueue:
    """Keyed delayed tasks: ``add_after(key, delay, fn)`` runs ``fn()`` once, ``delay`` s later."""

    def __init__(self, name: str = "sim-controllers") -> None:
        self.name = name
        self._cv = threading.Condition()
        self._heap: list[tuple[float, int, Hashable]] = []
        self._due: dict[Hashable, float] = {}
        self._fns: dict[Hashable, Callable[[], None]] = {}
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._busy = 0

    def add_after(self, key: Hashable, delay: float, fn: Callable[[], None]) -> None:
        """Queue ``fn`` under ``key``; an earlier pending due time for the key wins."""
        due = time.monotonic() + max(0.0, delay)
        with self._cv:
            if self._stopped:
                return
            self._fns[key] = fn
            cur = self._due.get(key)
            if cur is not None and cur <= due:
                return
            self._due[key] = due
            heapq.heappush(self._heap, (due, next(self._seq), key))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._cv.notify()

    def pending(self, key: Hashable) -> bool:
        with self._cv:
            return key in self._due

    def idle(self) -> bool:
        """Nothing queued and nothing running (tests use it to wait for quiescence)."""
        with self._cv:
            return not self._due and self._busy == 0

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._heap.clear()
            self._due.clear()
            self._fns.clear()
            self._cv.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._cv:
                while True:
                    if self._stopped:
                        return
                    now = time.monotonic()
                    while self._heap and self._due.get(self._heap[0][2]) != self._heap[0][0]:
                        heapq.heappop(self._heap)  # superseded entry
                    if self._heap and self._heap[0][0] <= now:
                        _, _, key = heapq.heappop(self._heap)
                        del self._due[key]
                        fn = self._fns.pop(key)
                        self._busy += 1
                        break
                    timeout = (self._heap[0][0] - now) if self._heap else None
                    self._cv.wait(timeout)
            try:
                fn()
            except Exception:
                log.exception("controller task %r failed", key)
            finally:
                with self._cv:
                    self._busy -= 1
