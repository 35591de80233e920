"""Runtime-switchable fault injection (in process and over ``/_sim/faults``).

Lets tests and benchmarks see how the portal copes with a flaky API server: errors,
latency, dropped connections, expired continue tokens, failures mid-pagination.
"""

from __future__ import annotations

import random
import re
import threading
from dataclasses import asdict, dataclass, fields
from typing import Any

from simcluster.errors import ApiError


@dataclass
class FaultConfig:
    """Current fault switches; all off by default."""

    error_rate: float = 0.0
    error_code: int = 500
    latency_ms: float = 0.0
    refuse_connections: bool = False
    expire_continue: bool = False
    # With expire_continue: expire only this many continue tokens, then serve normally
    # (None: all of them). Lets a test see a list restart once and then succeed.
    expire_continue_count: int | None = None
    fail_after: int | None = None
    path_regex: str | None = None
    mig_stuck: bool = False
    # The next MIG reconfiguration ends ``failed`` (one-shot: the switch turns itself off).
    mig_fail: bool = False
    # Every MIG reconfiguration passes through state ``rebooting`` for a step, then succeeds.
    mig_reboot: bool = False
    # The quota controller stops copying spec.hard to status.hard (and counting usage).
    quota_controller_paused: bool = False
    # Pods ignore SIGTERM: the kubelet emulation stops them only when the grace period ends.
    pods_ignore_sigterm: bool = False


@dataclass(frozen=True)
class Decision:
    """What to do with one request."""

    refuse: bool = False
    latency_s: float = 0.0
    error_code: int | None = None


class Faults:
    """Thread-safe holder of :class:`FaultConfig` plus per-request decisions."""

    def __init__(self, seed: int | None = None) -> None:
        self._lock = threading.Lock()
        self._cfg = FaultConfig()
        self._re: re.Pattern[str] | None = None
        self._matched = 0
        self._expired = 0
        self._rng = random.Random(seed)

    def update(self, **changes: Any) -> dict[str, Any]:
        """Change some switches (unknown names raise ``ValueError``); returns the new state."""
        names = {f.name for f in fields(FaultConfig)}
        unknown = set(changes) - names
        if unknown:
            raise ValueError(f"unknown fault switch(es): {', '.join(sorted(unknown))}")
        with self._lock:
            cfg = asdict(self._cfg)
            cfg.update(changes)
            new = FaultConfig(**cfg)
            if not 0.0 <= float(new.error_rate) <= 1.0:
                raise ValueError("error_rate must be between 0 and 1")
            if new.error_code < 400 or new.error_code > 599:
                raise ValueError("error_code must be a 4xx or 5xx status")
            self._re = re.compile(new.path_regex) if new.path_regex else None
            self._cfg = new
            if "fail_after" in changes or "path_regex" in changes:
                self._matched = 0
            if "expire_continue" in changes or "expire_continue_count" in changes:
                self._expired = 0
            return asdict(new)

    def reset(self) -> None:
        """Turn every fault off."""
        with self._lock:
            self._cfg = FaultConfig()
            self._re = None
            self._matched = 0

    def consume(self, name: str) -> bool:
        """Read a one-shot boolean switch and turn it off, atomically (e.g. ``mig_fail``)."""
        with self._lock:
            if not getattr(self._cfg, name):
                return False
            cfg = asdict(self._cfg)
            cfg[name] = False
            self._cfg = FaultConfig(**cfg)
            return True

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return asdict(self._cfg)

    @property
    def config(self) -> FaultConfig:
        return self._cfg

    def decide(self, path: str) -> Decision:
        """Decide the fault for one API request (control endpoints never get here)."""
        with self._lock:
            cfg = self._cfg
            if self._re is not None and not self._re.search(path):
                return Decision()
            self._matched += 1
            error = None
            failing = cfg.fail_after is not None and self._matched >= cfg.fail_after
            if failing or (cfg.error_rate > 0 and self._rng.random() < cfg.error_rate):
                error = cfg.error_code
            return Decision(cfg.refuse_connections, cfg.latency_ms / 1000.0, error)

    def continue_expired(self, path: str) -> bool:
        with self._lock:
            cfg = self._cfg
            if not cfg.expire_continue:
                return False
            if self._re is not None and not self._re.search(path):
                return False
            if cfg.expire_continue_count is not None:
                if self._expired >= cfg.expire_continue_count:
                    return False
                self._expired += 1
            return True

    @staticmethod
    def error_for(code: int) -> ApiError:
        """The Status error an injected fault produces."""
        return ApiError(code, f"simcluster: injected fault (HTTP {code})")
