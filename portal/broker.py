"""Sending a task to the broker (Redis) without making anyone wait for a broker that is down.

Every state change is committed to PostgreSQL first (an outbox row: quota and label
operations, MIG runs, webhook deliveries) and then sent; beat re-sends any row still due, so
a message that could not be sent is late, never lost (``portal/outbox.py``). Waiting for the
broker therefore only delays the answer of a decision already taken: an admin's approval
waited over 90 s for a stopped Redis (#24, finding 2). So a send is one attempt (no
publish retries), bounded by the transport's timeouts (``CELERY_BROKER_TRANSPORT_OPTIONS``),
and after a failure this process skips sending for ``BROKER_DOWN_SECONDS``: the next
decisions answer at once and beat sends their messages once the broker is back.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from django.conf import settings

log = logging.getLogger(__name__)

_lock = threading.Lock()
_down_until = 0.0


def is_down() -> bool:
    """True while this process saw the broker fail within ``BROKER_DOWN_SECONDS``."""
    return time.monotonic() < _down_until


def mark_down() -> None:
    global _down_until
    with _lock:
        _down_until = time.monotonic() + settings.BROKER_DOWN_SECONDS


def send(task: Any, args: tuple = (), *, what: str, countdown: float | None = None) -> bool:
    """Enqueue ``task(*args)``; False (logged) when the broker is down: the caller's outbox
    row, or beat, sends it later."""
    if is_down():
        log.info("broker down: not sending %s now; beat re-sends it", what)
        return False
    try:
        task.apply_async(args, countdown=countdown or None, retry=False)
    except Exception as err:  # kombu.OperationalError, redis errors, socket timeouts
        mark_down()
        log.warning("could not enqueue %s (%s: %s); beat re-sends it", what,
                    type(err).__name__, err)  # fmt: skip
        return False
    return True
