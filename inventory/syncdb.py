"""The database side of an inventory sync (inventory/sync.py): a writer thread with its own
connection, commits that do not wait for the WAL flush, the per-cluster advisory lock, and
the garbage collector paused while millions of JSON values are parsed."""

from __future__ import annotations

import gc
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.db import connection, transaction

from .models import Cluster


class SyncBusy(Exception):
    """Another sync of the same cluster holds the lock."""


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for the duration of a bulk read.

    Parsing 150,000 pods creates millions of short-lived dicts; each allocation burst
    triggers a collection that walks every live container object, including the
    sync's own state (tens of thousands of rows), which doubled the time to read a large
    cluster. JSON values hold no reference cycles, so reference counting frees them.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Writer:
    """Runs write batches in order, on a thread with its own database connection.

    PostgreSQL then works on one batch while the sync parses the next page (the
    process is otherwise single-threaded and waits on every write). Inside an outer
    transaction (a test case) another connection could not see its rows, so there the
    batches run inline, in that transaction. The first error stops the writer and is
    raised to the sync at the next submit, ``drain`` or ``close``.
    """

    def __init__(self, *, inline: bool = False) -> None:
        self.threaded = not inline and not connection.in_atomic_block
        self.error: BaseException | None = None
        if self.threaded:
            self.queue: queue.Queue[Callable[[], None] | None] = queue.Queue(maxsize=4)
            self.thread = threading.Thread(target=self._loop, name="sync-writer", daemon=True)
            self.thread.start()

    def submit(self, batch: Callable[[], None]) -> None:
        if not self.threaded:
            with transaction.atomic():
                batch()
            return
        self._raise()
        self.queue.put(batch)

    def drain(self) -> None:
        """Wait until every submitted batch is committed."""
        if self.threaded:
            self.queue.join()
            self._raise()

    def close(self) -> None:
        if self.threaded and self.thread.is_alive():
            self.queue.put(None)
            self.thread.join()

    def _raise(self) -> None:
        if self.error is not None:
            raise self.error

    def _loop(self) -> None:
        try:
            with connection.cursor() as cur:
                cur.execute("SET synchronous_commit TO OFF")
            while (batch := self.queue.get()) is not None:
                try:
                    if self.error is None:
                        with transaction.atomic():
                            batch()
                except BaseException as err:
                    self.error = err
                finally:
                    self.queue.task_done()
            self.queue.task_done()
        finally:
            connection.close()


@contextmanager
def async_commit() -> Iterator[None]:
    """Commit without waiting for the WAL flush while the sync writes.

    The inventory is a mirror the next sync rebuilds: a database crash can lose the last
    few hundred milliseconds of it, never the portal's own records. Each of a first
    sync's commits otherwise waits for an fsync.
    """
    with connection.cursor() as cur:
        cur.execute("SET synchronous_commit TO OFF")
    try:
        yield
    finally:
        with connection.cursor() as cur:
            cur.execute("RESET synchronous_commit")


def lock_key(cluster: Cluster) -> int:
    """The cluster's advisory lock key (syncs hold it, watch events hold it shared)."""
    return int(cluster.pk.int % (2**63 - 1))


class cluster_lock:
    """A Postgres session advisory lock per cluster: two syncs never interleave, and no
    watch event is applied while a sync runs (inventory/watch.py holds it shared for the
    few milliseconds of each event: the sync waits up to ``wait_s`` for those)."""

    def __init__(self, cluster: Cluster, wait_s: float = 2.0) -> None:
        self.key = lock_key(cluster)
        self.wait_s = wait_s

    def __enter__(self) -> None:
        deadline = time.monotonic() + self.wait_s
        with connection.cursor() as cur:
            while True:
                cur.execute("SELECT pg_try_advisory_lock(%s)", [self.key])
                if cur.fetchone()[0]:
                    return
                if time.monotonic() >= deadline:
                    raise SyncBusy("another sync of this cluster is running")
                time.sleep(0.05)

    def __exit__(self, *exc: object) -> None:
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock(%s)", [self.key])
