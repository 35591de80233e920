"""The simulator's clock for delays that tests must not wait out (simcluster/gpuoperator.py).

Real (monotonic) time by default; :meth:`SimClock.advance` moves it forward at once, in
process (``sim.clock.advance(60)``) or over ``POST /_sim/clock {"advance_s": 60}`` (admin
only). Used by the ConfigMap mount delay, mig-manager's client-pause timeout and the
device-plugin restart delay; the API machinery (watches, leases, controllers) keeps to real
time.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("simcluster.clock")


class SimClock:
    """Monotonic seconds plus an offset that only grows; waiters wake on every advance."""

    def __init__(self) -> None:
        self._offset = 0.0
        self._cond = threading.Condition()

    def now(self) -> float:
        return time.monotonic() + self._offset

    @property
    def offset(self) -> float:
        return self._offset

    def advance(self, seconds: float) -> float:
        """Move the clock ``seconds`` forward (>= 0); returns the total offset."""
        if not seconds >= 0:
            raise ValueError("advance_s must be a number >= 0")
        with self._cond:
            self._offset += float(seconds)
            self._cond.notify_all()
            return self._offset

    def wait_until(self, deadline: float, stop: threading.Event, tick: float = 0.05) -> bool:
        """Block until ``now() >= deadline``; False when ``stop`` is set first."""
        while not stop.is_set():
            left = deadline - self.now()
            if left <= 0:
                return True
            with self._cond:
                self._cond.wait(min(left, tick))
        return False

    def sleep(self, seconds: float, stop: threading.Event) -> bool:
        return self.wait_until(self.now() + seconds, stop)


class ClockTimer:
    """Calls functions at sim-clock deadlines, in deadline order, on one background thread."""

    def __init__(self, clock: SimClock, name: str = "sim-clock-timer") -> None:
        self.clock = clock
        self.name = name
        self._lock = threading.Lock()
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def call_after(self, seconds: float, fn: Callable[[], None]) -> None:
        with self._lock:
            self._seq += 1
            heapq.heappush(self._due, (self.clock.now() + max(0.0, seconds), self._seq, fn))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()

    def pending(self) -> int:
        with self._lock:
            return len(self._due)

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                head = self._due[0] if self._due else None
            now = self.clock.now()
            if head is None or head[0] > now:
                self.clock.wait_until(min(head[0] if head else now + 0.05, now + 0.05), self._stop)
                continue
            with self._lock:
                item = heapq.heappop(self._due)  # due too if pushed since (earlier)
            try:
                item[2]()
            except Exception:
                log.exception("sim clock task failed")
