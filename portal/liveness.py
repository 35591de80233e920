"""Heartbeat files for the processes that serve no HTTP: worker, beat and watcher.

Each process touches ``$PORTAL_HEARTBEAT_DIR/<kind>.alive`` when it makes progress, and
the kubelet's exec liveness probe runs::

    python -m portal.liveness worker --max-age 120

which exits 0 when the file was touched within ``--max-age`` seconds and 1 when it is older
or missing (2 for a usage error). What each touch means:

- ``worker``: Celery's ``worker_ready`` and ``heartbeat_sent`` signals. The heartbeat is a
  timer in the consumer's event loop (every 2 s by default, ``celery/worker/heartbeat.py``)
  that runs only while the consumer is connected: on a lost broker connection
  ``Consumer.start`` restarts the consumer's bootsteps, ``Heart`` included, and it starts
  again only once reconnected (``celery/worker/consumer/consumer.py``). A wedged loop or a
  broker gone for longer than ``--max-age`` makes it go stale.
- ``beat``: every tick of the scheduler loop (:class:`portal.celery.HeartbeatScheduler`,
  which also caps the sleep between ticks at 30 s).
- ``watcher``: ``manage.py watch_inventory`` touches it only while every cluster's watch
  thread has started a watch or received an event recently (inventory/watch.py).

Nothing is written unless ``PORTAL_HEARTBEAT_DIR`` is set (the manifests set it to an
emptyDir), so development processes leave no files behind. This module imports no Django.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ENV = "PORTAL_HEARTBEAT_DIR"
KINDS = ("worker", "beat", "watcher")


def heartbeat_path(kind: str, directory: str | None = None) -> Path | None:
    directory = directory if directory is not None else os.environ.get(ENV)
    if not directory:
        return None
    return Path(directory) / f"{kind}.alive"


def touch(kind: str) -> None:
    """Record progress of ``kind`` now (a no-op without ``PORTAL_HEARTBEAT_DIR``)."""
    path = heartbeat_path(kind)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        os.utime(path)
    except OSError as exc:  # a full or read-only volume must not stop the process
        print(f"heartbeat {path}: {exc}", file=sys.stderr)


def age(kind: str, directory: str | None = None) -> float | None:
    """Seconds since the last touch, or None when there is none."""
    path = heartbeat_path(kind, directory)
    if path is None:
        return None
    try:
        return time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m portal.liveness", description="Exit 0 when a heartbeat is fresh."
    )
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("--max-age", type=float, default=120, help="seconds (default 120)")
    parser.add_argument("--dir", default=None, help=f"heartbeat directory (default ${ENV})")
    args = parser.parse_args(argv)
    directory = args.dir or os.environ.get(ENV)
    if not directory:
        print(f"set {ENV} (or --dir) to the heartbeat directory", file=sys.stderr)
        return 2
    seconds = age(args.kind, directory)
    if seconds is None:
        print(f"{args.kind}: no heartbeat in {directory}", file=sys.stderr)
        return 1
    if seconds > args.max_age:
        print(f"{args.kind}: last heartbeat {seconds:.0f} s ago (> {args.max_age:.0f} s)",
              file=sys.stderr)  # fmt: skip
        return 1
    print(f"{args.kind}: alive ({seconds:.0f} s ago)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
