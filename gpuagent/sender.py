"""Deliver reports to the portal, riding out outages with a bounded buffer and backoff.

Plain ``urllib.request`` (stdlib) rather than ``requests``: one JSON POST with a timeout is
all the agent needs, and the DaemonSet image then carries no HTTP stack besides Python's.

Rules (see docs/agent.md, "Failure behaviour"):

- Every report goes into a FIFO buffer of at most ``capacity`` reports (default 240, one
  hour at 15 s); when full, the oldest is dropped and counted.
- ``flush`` posts oldest first. 2xx (202 accepted, 200 duplicate) removes the report.
- A connection error, timeout, 429 or 5xx stops the flush and schedules the next attempt
  with exponential backoff and jitter (``Retry-After`` is honoured when longer).
- Any other 4xx drops that report without retry and logs why: 401/403 mean a bad or foreign
  token, 400/413 a report the portal refuses (the body has per-field reasons: e.g. NUL or
  a lone surrogate in a text field). Retrying those would stall the buffer behind a report
  that can never be accepted; a report that cannot even be written as JSON (NaN) likewise.
- Reports older than ``max_age_s`` (1 h, the oldest the portal accepts) are dropped.
"""

from __future__ import annotations

import json
import logging
import random
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

REPORTS_PATH = "/api/v1/agent/reports/"


def reports_url(portal: str) -> str:
    """``PORTAL_URL`` may be the portal's base URL or the full endpoint."""
    portal = portal.rstrip("/")
    if portal.endswith(REPORTS_PATH.rstrip("/")):
        return portal + "/"
    return portal + REPORTS_PATH


def token_from_file(path: str | Path) -> Callable[[], str]:
    """Read the token at each post, so a rotated Secret is picked up without a restart."""

    def read() -> str:
        return Path(path).read_text().strip()

    return read


@dataclass
class PostResult:
    """What one POST came to: an HTTP status (0 when no answer), body, Retry-After."""

    status: int
    body: str = ""
    retry_after: float | None = None


def urllib_post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> PostResult:
    """POST with urllib; HTTP errors become statuses, network errors status 0."""
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")  # noqa: S310
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - URL from config
            return PostResult(resp.status, resp.read(4096).decode(errors="replace"))
    except urllib.error.HTTPError as exc:
        retry_after = None
        raw = exc.headers.get("Retry-After") if exc.headers else None
        if raw and raw.strip().isdigit():
            retry_after = float(raw.strip())
        try:
            text = exc.read(4096).decode(errors="replace")
        except OSError:
            text = ""
        return PostResult(exc.code, text, retry_after)
    except (OSError, ValueError) as exc:  # URLError, refused, reset, timeout, bad URL
        return PostResult(0, str(getattr(exc, "reason", exc)))


def _epoch(report: dict[str, Any]) -> float:
    try:
        return datetime.fromisoformat(report["timestamp"].replace("Z", "+00:00")).timestamp()
    except (KeyError, ValueError, AttributeError):
        return time.time()


class Sender:
    """Buffers reports and posts them; ``flush`` never blocks beyond one POST's timeout each."""

    def __init__(
        self,
        url: str,
        token: Callable[[], str],
        *,
        capacity: int = 240,
        max_age_s: float = 3600,
        timeout_s: float = 10,
        backoff_base_s: float = 2,
        backoff_max_s: float = 300,
        clock: Callable[[], float] = time.time,
        rand: Callable[[], float] = random.random,
        post: Callable[[str, bytes, dict[str, str], float], PostResult] = urllib_post,
    ) -> None:
        if capacity < 1:
            raise ValueError("buffer capacity must be at least 1")
        self.url = url
        self.token = token
        self.capacity = capacity
        self.max_age_s = max_age_s
        self.timeout_s = timeout_s
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.clock = clock
        self.rand = rand
        self.post = post
        self.buffer: deque[tuple[float, dict[str, Any]]] = deque()
        self.failures = 0  # consecutive retryable failures
        self.next_attempt = 0.0  # epoch seconds; flush waits until then after a failure
        self.sent = 0
        self.rejected = 0
        self.dropped_full = 0
        self.dropped_expired = 0
        self._outage_drops = 0

    # -------------------------------------------------------------- buffer

    def enqueue(self, report: dict[str, Any]) -> None:
        """Add a report; drop (and count) the oldest one when the buffer is full."""
        if len(self.buffer) >= self.capacity:
            self.buffer.popleft()
            self.dropped_full += 1
            self._outage_drops += 1
            if self._outage_drops == 1:
                log.warning(
                    "report buffer full (%d); dropping the oldest reports until the portal "
                    "answers again",
                    self.capacity,
                )
        self.buffer.append((_epoch(report), report))

    def _expire(self, now: float) -> None:
        while self.buffer and self.buffer[0][0] < now - self.max_age_s:
            self.buffer.popleft()
            self.dropped_expired += 1
            self._outage_drops += 1

    def due(self) -> bool:
        return bool(self.buffer) and self.clock() >= self.next_attempt

    # -------------------------------------------------------------- posting

    def backoff_delay(self) -> float:
        """Exponential in consecutive failures, capped, with "equal jitter" (50-100 %)."""
        raw = min(self.backoff_max_s, self.backoff_base_s * 2 ** max(0, self.failures - 1))
        return raw * (0.5 + self.rand() / 2)

    def flush(self) -> int:
        """Post buffered reports oldest first until one fails; return how many went through."""
        now = self.clock()
        self._expire(now)
        if not self.buffer or now < self.next_attempt:
            return 0
        delivered = 0
        failed = False
        while self.buffer:
            _, report = self.buffer[0]
            try:
                token = self.token()
            except OSError as exc:
                log.error("cannot read the node token (%s); will retry", exc)
                self._retry_later(PostResult(0, str(exc)))
                failed = True
                break
            try:
                body = json.dumps(report, separators=(",", ":"), allow_nan=False).encode()
            except (TypeError, ValueError) as exc:  # NaN, or a value JSON cannot carry
                self.buffer.popleft()
                self.rejected += 1
                log.error("report %s is not valid JSON (%s); dropped", report.get("timestamp"), exc)
                continue
            headers = {
                "Content-Type": "application/json",
                "Authorization": f"Bearer {token}",
                "User-Agent": f"gpuagent/{report.get('agent_version', '?')}",
            }
            res = self.post(self.url, body, headers, self.timeout_s)
            if 200 <= res.status < 300:
                self.buffer.popleft()
                self.sent += 1
                delivered += 1
                continue
            if res.status == 0 or res.status == 429 or res.status >= 500:
                self._retry_later(res)
                failed = True
                break
            self.buffer.popleft()
            self.rejected += 1
            self._log_rejection(report, res)
        if failed:
            return delivered
        if delivered and (self.failures or self._outage_drops):
            log.info(
                "portal reachable again: delivered %d report(s); %d dropped while it was not",
                delivered,
                self._outage_drops,
            )
        self.failures = 0
        self._outage_drops = 0
        self.next_attempt = 0.0
        return delivered

    def _retry_later(self, res: PostResult) -> None:
        self.failures += 1
        delay = self.backoff_delay()
        if res.retry_after is not None:
            delay = max(delay, min(res.retry_after, self.backoff_max_s))
        self.next_attempt = self.clock() + delay
        what = f"HTTP {res.status}" if res.status else f"unreachable ({res.body})"
        log.warning(
            "portal %s; %d report(s) buffered, next attempt in %.0f s",
            what,
            len(self.buffer),
            delay,
        )

    def _log_rejection(self, report: dict[str, Any], res: PostResult) -> None:
        stamp = report.get("timestamp")
        if res.status in (401, 403):
            log.error(
                "portal refused the token for node %s (HTTP %d): the token is wrong, revoked "
                "or issued for another node; report %s dropped",
                report.get("node"),
                res.status,
                stamp,
            )
        else:
            log.error(
                "portal rejected report %s (HTTP %d), not retrying: %s",
                stamp,
                res.status,
                res.body[:500],
            )
