"""The agent's loop: initialise NVML (patiently), read, report, repeat until SIGTERM.

Every dependency is passed in (NVML module, sender, clock, wait) so tests and the demo
fleet drive the same code as the DaemonSet, with a fake NVML and no real sleeping.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from gpuagent.nvml import NvmlReader, NvmlUnavailable
from gpuagent.podresources import NullPodResolver, PodResolver
from gpuagent.report import build_report
from gpuagent.sender import Sender

log = logging.getLogger(__name__)


class Agent:
    """One node's agent. ``run`` blocks; ``stop`` (or SIGTERM) ends it after the current post."""

    def __init__(
        self,
        nvml: Any,
        node: str,
        sender: Sender | None,
        *,
        interval_s: float = 15,
        pods: PodResolver | None = None,
        clock: Callable[[], float] = time.time,
        wait: Callable[[float], bool] | None = None,
        init_retry_s: float = 60,
        init_retry_max_s: float = 600,
        exporter: Any = None,
    ) -> None:
        self.reader = NvmlReader(nvml)
        self.node = node
        self.sender = sender
        self.interval_s = interval_s
        self.pods = pods or NullPodResolver()
        self.clock = clock
        self.stop_event = threading.Event()
        # wait(seconds) -> True when asked to stop; the default wakes early on stop().
        self.wait = wait or self.stop_event.wait
        self.init_retry_s = init_retry_s
        self.init_retry_max_s = init_retry_max_s
        self._init_delay = init_retry_s
        self.next_collect = 0.0
        # gpuagent.exporter.Exporter (or None): gets every snapshot for /metrics.
        self.exporter = exporter

    # -------------------------------------------------------------- control

    def stop(self, *_: Any) -> None:
        """Ask the loop to end; an in-flight POST completes first (it is synchronous)."""
        if not self.stop_event.is_set():
            log.info("stopping after the current step")
        self.stop_event.set()

    def install_signal_handlers(self) -> None:
        """SIGTERM (kubelet) and SIGINT (Ctrl-C) stop cleanly. Main thread only."""
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)

    @property
    def stopping(self) -> bool:
        return self.stop_event.is_set()

    # -------------------------------------------------------------- steps

    def ensure_nvml(self) -> float | None:
        """Initialise NVML if needed; on failure, return how long to wait before retrying."""
        if self.reader.initialized:
            return None
        try:
            self.reader.open()
        except NvmlUnavailable as exc:
            delay = self._init_delay
            log.error("%s; retrying in %.0f s", exc, delay)
            self._init_delay = min(self._init_delay * 2, self.init_retry_max_s)
            return delay
        if self._init_delay != self.init_retry_s:
            log.info("NVML is available now")
        self._init_delay = self.init_retry_s
        return None

    def collect(self) -> dict[str, Any] | None:
        """One report, or None when the node as a whole cannot be read (NVML re-inits)."""
        m = self.reader.nvml
        now = self.clock()
        try:
            snapshot = self.reader.read()
        except m.NVMLError as exc:
            log.error("reading NVML failed (%s); re-initialising on the next cycle", exc)
            self.reader.close()
            return None
        report = build_report(
            self.node, snapshot, timestamp=now, interval_s=int(self.interval_s), pods=self.pods
        )
        if self.exporter is not None:
            self._export(snapshot, now)
        return report

    def _export(self, snapshot: dict[str, Any], now: float) -> None:
        """Hand the snapshot to the exporter; its failures never cost the report."""
        from gpuagent.exporter import gpu_instance_ids

        try:
            try:
                pods = self.pods.pods_by_device()
            except Exception:
                pods = {}
            ids = gpu_instance_ids(self.reader.nvml, snapshot)
            self.exporter.update(self.node, snapshot, timestamp=now, pods=pods, instance_ids=ids)
        except Exception:
            log.exception("updating the /metrics snapshot failed")

    def step(self) -> float:
        """Do what is due now; return seconds until something is due again."""
        retry = self.ensure_nvml()
        if retry is not None:
            return retry
        now = self.clock()
        if now >= self.next_collect:
            report = self.collect()
            if report is not None and self.sender is not None:
                self.sender.enqueue(report)
            # Keep the cadence; after a long stall, restart it from now instead of bursting.
            self.next_collect = max(self.next_collect + self.interval_s, now)
            if self.next_collect <= now:
                self.next_collect = now + self.interval_s
        if self.sender is not None and self.sender.due():
            self.sender.flush()
        wake = self.next_collect
        if self.sender is not None and self.sender.buffer:
            wake = min(wake, max(self.sender.next_attempt, self.clock()))
        return max(0.0, wake - self.clock())

    def run(self, max_steps: int | None = None) -> None:
        """Loop until stopped (or ``max_steps``, for tests); always shuts NVML down."""
        steps = 0
        try:
            while not self.stopping:
                delay = self.step()
                steps += 1
                if max_steps is not None and steps >= max_steps:
                    break
                if self.stopping or self.wait(delay):
                    break
        finally:
            # Release NVML before exiting: mig-manager pauses GPU clients (SIGTERM through the
            # DaemonSet's nodeSelector) so that no process holds NVML during a MIG change.
            released = self.reader.initialized
            self.reader.close()
            if released:
                log.info("NVML released (nvmlShutdown)")
            if self.sender is not None and self.sender.buffer:
                log.info("exiting with %d undelivered report(s)", len(self.sender.buffer))
