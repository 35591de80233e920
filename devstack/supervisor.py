"""A small process supervisor, in the spirit of foreman/honcho.

Every child runs in its own session (so its own process group): a Ctrl-C in the terminal reaches
only the supervisor, which then stops the children in order, and a group signal also reaches the
grandchildren (Celery's pool processes). Output is prefixed with the child's name.

A child started with ``restart=True`` (the demo's worker, beat, watcher and agents) that
dies is started again, with a log line, at most ``RESTART_LIMIT`` times in
``RESTART_WINDOW`` seconds; past that it counts as dead and everything stops. The same
holds for a watched service given a ``restart`` (the demo's PostgreSQL and Redis). Only a
signal stops the run: SIGINT and SIGTERM always (also when started in the background,
where the shell sets SIGINT to ignored), SIGHUP unless it was ignored at start (``nohup``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import psutil

NAME_WIDTH = 8
# cyan, yellow, magenta, green, blue, bright cyan, bright yellow, bright magenta
COLOURS = ("36", "33", "35", "32", "34", "96", "93", "95")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# A restartable child may die this often in this many seconds before the run gives up.
RESTART_LIMIT = 5
RESTART_WINDOW = 60.0


@dataclass
class Child:
    """One started command; ``pgid`` equals its pid since it leads its own session."""

    name: str
    proc: subprocess.Popen[bytes]
    oneshot: bool
    captured: list[str] | None
    reader: threading.Thread | None = None
    pgid: int = 0
    restart: bool = False
    # How to start it again: (argv, env, cwd).
    spec: tuple | None = None
    restarts: deque | None = None


class Supervisor:
    """Starts named children, relays their output, and stops all of them together."""

    def __init__(
        self,
        out: TextIO | None = None,
        *,
        colour: bool | None = None,
        stop_timeout: float = 10.0,
        poll_interval: float = 0.1,
        state_file: Path | None = None,
    ) -> None:
        self.out = out if out is not None else sys.stdout
        self.state_file = state_file
        if colour is None:
            colour = _isatty(self.out) and not os.environ.get("NO_COLOR")
        self.colour = colour
        self.stop_timeout = stop_timeout
        self.poll_interval = poll_interval
        self.children: list[Child] = []
        self.watches: dict[str, Callable[[], bool]] = {}
        self.watch_restarts: dict[str, tuple[Callable[[], None], deque]] = {}
        self.stop_reason: str | None = None
        self.failures: list[str] = []
        self._write_lock = threading.Lock()
        self._colour_of: dict[str, str] = {}
        self._seen: dict[tuple[int, float], psutil.Process] = {}
        self._groups: set[int] = set()
        self._stopped = False

    # ------------------------------------------------------------------ output

    def prefix(self, name: str) -> str:
        """``name`` padded to the common width, coloured on a terminal."""
        label = f"{name:<{NAME_WIDTH}}|"
        if not self.colour:
            return label
        code = self._colour_of.setdefault(name, COLOURS[len(self._colour_of) % len(COLOURS)])
        return f"\033[{code}m{label}\033[0m"

    def emit(self, name: str, line: str) -> None:
        """Write one prefixed line; whole lines only, so children never interleave mid-line."""
        with self._write_lock:
            self.out.write(f"{self.prefix(name)} {line}\n")
            self.out.flush()

    def log(self, message: str) -> None:
        """A line from the supervisor itself."""
        for line in message.splitlines() or [""]:
            self.emit("devstack", line)

    def block(self, lines: Sequence[str]) -> None:
        """Write several unprefixed lines at once (the demo banner)."""
        with self._write_lock:
            self.out.write("".join(f"{line}\n" for line in lines))
            self.out.flush()

    def _pump(self, child: Child) -> None:
        assert child.proc.stdout is not None
        for raw in iter(child.proc.stdout.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            if child.captured is not None:
                child.captured.append(line)
            self.emit(child.name, line)
        child.proc.stdout.close()

    # ------------------------------------------------------------------ signals

    def install_signal_handlers(self) -> None:
        """Turn SIGINT/SIGTERM/SIGHUP into an orderly stop; a second Ctrl-C skips the wait.

        SIGINT is handled even where it was ignored at start (a shell starts background
        jobs so: ``make demo &`` still stops on ``kill -INT``); a SIGHUP ignored at start
        (``nohup make demo``) stays ignored, so closing the terminal does not stop it.
        """
        for signum in STOP_SIGNALS:
            if signum == signal.SIGHUP and signal.getsignal(signum) == signal.SIG_IGN:
                continue
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self.stop_reason is None:
            self.stop_reason = f"received {signal.Signals(signum).name}"
        else:
            self.stop_timeout = 0.0  # impatient user: go straight to SIGKILL

    def request_stop(self, reason: str, *, failed: bool = False) -> None:
        """Ask the run loop to stop; ``failed`` makes the run exit non-zero."""
        if failed:
            self.failures.append(reason)
        if self.stop_reason is None:
            self.stop_reason = reason

    @property
    def stopping(self) -> bool:
        """True once a stop was requested (signal, dead child, failed step)."""
        return self.stop_reason is not None

    # ------------------------------------------------------------------ children

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        cwd: Path | str | None = None,
        oneshot: bool = False,
        capture: bool = False,
        restart: bool = False,
    ) -> Child:
        """Start ``argv`` as child ``name``; stdout and stderr both go through the prefixer.

        ``restart``: start it again when it dies (bounded, see the module doc)."""
        child = self._spawn(name, argv, env, cwd, oneshot, capture)
        if restart:
            child.restart, child.spec, child.restarts = True, (argv, env, cwd), deque()
        self.children.append(child)
        self._snapshot()
        self._record()
        return child

    def _spawn(self, name, argv, env, cwd, oneshot: bool, capture: bool) -> Child:
        child_env = dict(os.environ if env is None else env)
        child_env.setdefault("PYTHONUNBUFFERED", "1")
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        child = Child(name, proc, oneshot, [] if capture else None, pgid=proc.pid)
        self._groups.add(proc.pid)
        child.reader = threading.Thread(target=self._pump, args=(child,), daemon=True)
        child.reader.start()
        return child

    def _restart(self, child: Child, code: int) -> bool:
        """Start a dead restartable child again; False when it died too often."""
        now = time.monotonic()
        assert child.restarts is not None and child.spec is not None
        while child.restarts and now - child.restarts[0] > RESTART_WINDOW:
            child.restarts.popleft()
        if len(child.restarts) >= RESTART_LIMIT:
            return False
        child.restarts.append(now)
        # Whatever the dead one left in its group (a pool process) goes with it.
        self._signal_group(child.pgid, signal.SIGKILL)
        self._groups.discard(child.pgid)
        argv, env, cwd = child.spec
        new = self._spawn(child.name, argv, env, cwd, False, False)
        child.proc, child.pgid, child.reader = new.proc, new.pgid, new.reader
        self.log(
            f"{child.name} exited (code {code}); restarted it as pid {child.pgid} "
            f"({len(child.restarts)} of {RESTART_LIMIT} restarts allowed in "
            f"{RESTART_WINDOW:.0f}s)"
        )
        self._snapshot()
        self._record()
        return True

    def _record(self) -> None:
        """Write our process groups to ``state_file`` so a run after a SIGKILL can clean up."""
        if self.state_file is None:
            return
        groups = []
        for child in self.children:
            with contextlib.suppress(psutil.Error):
                created = psutil.Process(child.pgid).create_time()
                groups.append({"name": child.name, "pgid": child.pgid, "created": created})
        self.state_file.write_text(json.dumps(groups))

    def watch(
        self, name: str, alive: Callable[[], bool], restart: Callable[[], None] | None = None
    ) -> None:
        """Treat ``alive() == False`` like a dead child (used for Postgres and Redis):
        ``restart()`` starts it again, bounded like a restartable child, else the run stops.
        ``restart`` raising counts as a failed restart (the run stops, saying why)."""
        self.watches[name] = alive
        if restart is not None:
            self.watch_restarts[name] = (restart, deque())

    def run_once(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        cwd: Path | str | None = None,
    ) -> tuple[int, str]:
        """Run a set-up step to completion (interruptible); returns exit code and output."""
        child = self.start(name, argv, env=env, cwd=cwd, oneshot=True, capture=True)
        while child.proc.poll() is None:
            self._tick()
            if self.stopping:
                self._signal_group(child.pgid, signal.SIGTERM)
                try:
                    child.proc.wait(self.stop_timeout)
                except subprocess.TimeoutExpired:
                    self._signal_group(child.pgid, signal.SIGKILL)
                    child.proc.wait()
                break
            time.sleep(self.poll_interval)
        self._finish_reader(child)
        # A step must not leave anything behind; once its group is empty, forget the pgid so a
        # reused pid can never be signalled later.
        self._signal_group(child.pgid, signal.SIGKILL)
        self._groups.discard(child.pgid)
        self.children.remove(child)
        return child.proc.returncode, "\n".join(child.captured or [])

    def wait_until(self, ready: Callable[[], bool], timeout: float) -> bool:
        """Supervise until ``ready()``; False on timeout or when a stop was requested."""
        deadline = time.monotonic() + timeout
        while not self.stopping:
            self._tick()
            if self.stopping:
                break
            if ready():
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(self.poll_interval)
        return False

    def run_forever(self) -> None:
        """Supervise until a signal arrives or something dies."""
        while not self.stopping:
            self._tick()
            time.sleep(self.poll_interval)

    def _tick(self) -> None:
        self._snapshot()
        if self.stopping:
            return
        for child in self.children:
            code = child.proc.poll()
            if code is not None and not child.oneshot:
                self._finish_reader(child)
                if child.restart and self._restart(child, code):
                    continue
                why = f"{child.name} exited unexpectedly (code {code})"
                if child.restart:
                    why += f", {RESTART_LIMIT} times within {RESTART_WINDOW:.0f}s: not restarted"
                self.request_stop(why, failed=True)
                return
        for name, alive in self.watches.items():
            if not alive() and not self._restart_watched(name):
                return

    def _restart_watched(self, name: str) -> bool:
        """Start a watched service again; False (and the run stops) when it cannot be."""
        why = f"{name} is no longer running"
        if name not in self.watch_restarts:
            self.request_stop(why, failed=True)
            return False
        restart, times = self.watch_restarts[name]
        now = time.monotonic()
        while times and now - times[0] > RESTART_WINDOW:
            times.popleft()
        if len(times) >= RESTART_LIMIT:
            self.request_stop(f"{why}, {RESTART_LIMIT} times within {RESTART_WINDOW:.0f}s: "
                              "not restarted", failed=True)  # fmt: skip
            return False
        times.append(now)
        self.log(f"{why}; restarting it ({len(times)} of {RESTART_LIMIT} restarts allowed "
                 f"in {RESTART_WINDOW:.0f}s)")  # fmt: skip
        try:
            restart()
        except Exception as exc:
            self.request_stop(f"{why} and did not restart: {exc}", failed=True)
            return False
        self.log(f"{name} restarted")
        return True

    def _snapshot(self) -> None:
        """Remember every process in our trees, to prove at the end that none is left."""
        for child in self.children:
            if child.proc.poll() is not None:
                continue
            try:
                root = psutil.Process(child.proc.pid)
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                continue
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    self._seen[(proc.pid, proc.create_time())] = proc

    # ------------------------------------------------------------------ stopping

    def stop(self) -> int:
        """SIGTERM every group, SIGKILL what is left after ``stop_timeout``; the exit code.

        Non-zero when a child died unexpectedly or a step failed; zero for a requested stop.
        """
        if self._stopped:
            return 1 if self.failures else 0
        self._stopped = True
        self._snapshot()
        if self.stop_reason:
            self.log(f"stopping: {self.stop_reason}")
        running = [c for c in self.children if c.proc.poll() is None]
        if running:
            self.log("sending SIGTERM to " + ", ".join(c.name for c in running))
        for pgid in self._groups:
            self._signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout
        while time.monotonic() < deadline and self._leftovers():
            time.sleep(0.05)
            for child in self.children:
                child.proc.poll()  # reap, so the leader does not linger as a zombie
        leftovers = self._leftovers()
        if leftovers:
            names = sorted({self._owner(p) for p in leftovers})
            self.log(f"still running after {self.stop_timeout:.0f}s, SIGKILL: {', '.join(names)}")
            for pgid in self._groups:
                self._signal_group(pgid, signal.SIGKILL)
            for proc in leftovers:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
        for child in self.children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.proc.wait(5)
            self._finish_reader(child)
        self._verify_nothing_left()
        if self.state_file is not None:
            self.state_file.unlink(missing_ok=True)
        for reason in self.failures:
            self.log(f"failed: {reason}")
        return 1 if self.failures else 0

    def _leftovers(self) -> list[psutil.Process]:
        """Processes we started (or saw in our groups) that are still alive."""
        found = {key: p for key, p in self._seen.items() if _alive(p)}
        if self._groups:
            for proc in psutil.process_iter():
                try:
                    if os.getpgid(proc.pid) in self._groups and _alive(proc):
                        found[(proc.pid, proc.create_time())] = proc
                except (OSError, psutil.Error):
                    continue
        return list(found.values())

    def _verify_nothing_left(self) -> None:
        """psutil check: no process from this run survives (the no-orphans promise)."""
        time.sleep(0.05)
        leftovers = self._leftovers()
        for proc in leftovers:
            with contextlib.suppress(psutil.Error):
                self.log(f"WARNING: killing orphan pid {proc.pid} {' '.join(proc.cmdline())}")
                proc.kill()
        if leftovers:
            psutil.wait_procs(leftovers, timeout=5)

    def _owner(self, proc: psutil.Process) -> str:
        try:
            pgid = os.getpgid(proc.pid)
        except OSError:
            return str(proc.pid)
        for child in self.children:
            if child.pgid == pgid:
                return child.name
        return str(proc.pid)

    @staticmethod
    def _signal_group(pgid: int, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signum)

    @staticmethod
    def _finish_reader(child: Child) -> None:
        # A grandchild that keeps the pipe open would block the reader; do not wait forever.
        if child.reader is not None:
            child.reader.join(timeout=2)


def reap_leftovers(state_file: Path, log: Callable[[str], None]) -> list[str]:
    """Kill the process groups a killed run recorded in ``state_file``; their names.

    Only call this while holding the run's data lock: then no live run owns those groups. A
    process counts only if it is in a recorded group and not older than the recorded leader,
    so a recycled pid is never touched.
    """
    try:
        groups = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return []
    by_pgid = {g["pgid"]: g for g in groups}
    victims: dict[str, list[psutil.Process]] = {}
    for proc in psutil.process_iter():
        try:
            group = by_pgid.get(os.getpgid(proc.pid))
            if group and proc.create_time() >= group["created"] - 0.01 and _alive(proc):
                victims.setdefault(group["name"], []).append(proc)
        except (OSError, psutil.Error):
            continue
    for name, procs in victims.items():
        log(f"stopping {name} left over from an earlier run (pids {[p.pid for p in procs]})")
    doomed = [p for procs in victims.values() for p in procs]
    for proc in doomed:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(doomed, timeout=5)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=5)
    state_file.unlink(missing_ok=True)
    return sorted(victims)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
