"""Liveness of the processes without HTTP: each real process touches its heartbeat, and
the exec probe of the manifests (``python -m portal.liveness <kind> --max-age N``) passes
while it is fresh and fails when it is stale or missing (portal/liveness.py).

A stopped process (SIGSTOP, as a wedged one looks from outside) stops its heartbeat; the
watcher's also stops while one cluster's watch makes no progress (a node list held up by
the simulator's latency fault), though the process itself is running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import _database_url_for_current_db
from tests.parallel import spare_redis_db

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]


def probe(kind: str, directory: Path, max_age: float) -> subprocess.CompletedProcess:
    """The manifests' exec probe, as the kubelet runs it."""
    return subprocess.run(
        [sys.executable, "-m", "portal.liveness", kind, "--max-age", str(max_age),
         "--dir", str(directory)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def wait_for_probe(kind, directory, max_age, want: int, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while True:
        result = probe(kind, directory, max_age)
        if result.returncode == want:
            return result.stdout + result.stderr
        if time.monotonic() > deadline:
            raise AssertionError(f"{kind}: probe exit {result.returncode}, wanted {want}: "
                                 f"{result.stdout}{result.stderr}")  # fmt: skip
        time.sleep(0.5)


@pytest.fixture
def spawn(tmp_path, settings):
    procs = []

    def start(args: list[str], heartbeat_dir: Path, **extra) -> subprocess.Popen:
        env = dict(os.environ, DATABASE_URL=_database_url_for_current_db(),
                   REDIS_URL=spare_redis_db(settings.REDIS_URL), DB_CONN_MAX_AGE="0",
                   PORTAL_HEARTBEAT_DIR=str(heartbeat_dir), **extra)  # fmt: skip
        log = open(tmp_path / f"proc-{len(procs)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        proc.log = log
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGCONT)
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        proc.log.close()


def test_probe_fails_without_a_heartbeat_and_without_its_directory(tmp_path):
    result = probe("worker", tmp_path, 120)
    assert result.returncode == 1 and "no heartbeat" in result.stderr
    env = {k: v for k, v in os.environ.items() if k != "PORTAL_HEARTBEAT_DIR"}
    result = subprocess.run([sys.executable, "-m", "portal.liveness", "beat"], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 2 and "PORTAL_HEARTBEAT_DIR" in result.stderr


def test_worker_heartbeat_follows_the_event_loop(spawn, tmp_path):
    beats = tmp_path / "hb"
    # The manifests' worker command (deploy/kubernetes/worker.yaml): event heartbeats on.
    worker = spawn(["-m", "celery", "-A", "portal", "worker", "-l", "INFO", "--concurrency",
                    "1", "-n", "live@%h"], beats)  # fmt: skip
    wait_for_probe("worker", beats, 5, want=0)
    os.killpg(worker.pid, signal.SIGSTOP)
    out = wait_for_probe("worker", beats, 5, want=1, timeout=30)
    assert "last heartbeat" in out
    os.killpg(worker.pid, signal.SIGCONT)
    wait_for_probe("worker", beats, 5, want=0, timeout=30)


def test_beat_heartbeat_is_touched_on_each_tick(spawn, tmp_path):
    beats = tmp_path / "hb"
    beat = spawn(["-m", "celery", "-A", "portal", "beat", "-l", "INFO", "-s",
                  str(tmp_path / "celerybeat-schedule")], beats)  # fmt: skip
    wait_for_probe("beat", beats, 3, want=0)
    os.killpg(beat.pid, signal.SIGSTOP)
    wait_for_probe("beat", beats, 3, want=1, timeout=30)


def test_watcher_heartbeat_stops_while_a_watch_makes_no_progress(spawn, tmp_path, sim,
                                                                 sim_cluster):  # fmt: skip
    beats = tmp_path / "hb"
    watcher = spawn(["manage.py", "watch_inventory", "--timeout", "2", "--heartbeat", "0.5",
                     "--stale-after", "3"], beats)  # fmt: skip
    wait_for_probe("watcher", beats, 3, want=0)
    # Every node request now takes 12 s (under KUBE_REQUEST_TIMEOUT): the thread's next
    # relist hangs, and the heartbeat stops although the process runs.
    sim.faults.update(latency_ms=12_000, path_regex=r"/api/v1/nodes")
    wait_for_probe("watcher", beats, 3, want=1, timeout=30)
    assert watcher.poll() is None
    sim.faults.reset()
    wait_for_probe("watcher", beats, 3, want=0, timeout=40)
    os.killpg(watcher.pid, signal.SIGSTOP)
    wait_for_probe("watcher", beats, 3, want=1, timeout=30)
