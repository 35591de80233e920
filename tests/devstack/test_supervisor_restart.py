"""The demo's supervisor restarts a dying worker, beat or watcher (bounded, logged), and
only a signal stops it: SIGINT/SIGTERM also when started in the background, SIGHUP not
under ``nohup`` (issue #11 section 4)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devstack import REPO_ROOT, supervisor
from tests.devstack.test_supervisor import SLEEPER, assert_all_gone, read_until

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups")

# children: {name: [code, restart]}; prints "READY <pid of each child>" once all started.
DRIVER = textwrap.dedent(
    """
    import json, sys
    from devstack.supervisor import Supervisor

    children = json.loads(sys.argv[1])
    sup = Supervisor(stop_timeout=5)
    sup.install_signal_handlers()
    for name, (code, restart) in children.items():
        sup.start(name, [sys.executable, "-c", code], restart=restart)
    sup.log("READY " + json.dumps({c.name: c.proc.pid for c in sup.children}))
    sup.run_forever()
    sys.exit(sup.stop())
    """
)
CRASHER = "import time; time.sleep(0.2); raise SystemExit(3)"

Start = Callable[..., "subprocess.Popen[str]"]


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    started: list[subprocess.Popen[str]] = []

    def run(children: dict, *, ignore: tuple[int, ...] = ()) -> subprocess.Popen[str]:
        script = tmp_path / "driver.py"
        script.write_text(DRIVER)
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"}

        def as_background_job() -> None:  # what `cmd &` (SIGINT) or `nohup` (SIGHUP) do
            for signum in ignore:
                signal.signal(signum, signal.SIG_IGN)

        driver = subprocess.Popen(
            [sys.executable, str(script), json.dumps(children)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
            start_new_session=True, preexec_fn=as_background_job,
        )  # fmt: skip
        started.append(driver)
        return driver

    yield run
    for driver in started:
        if driver.poll() is None:
            driver.terminate()
            try:
                driver.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(driver.pid, signal.SIGKILL)
                driver.communicate()


def ready(driver) -> dict[str, int]:
    return json.loads(read_until(driver, "READY ").rsplit("READY ", 1)[1])


def test_a_killed_worker_is_restarted_with_a_log_line(start: Start) -> None:
    driver = start({"worker": [SLEEPER, True], "web": [SLEEPER, False]})
    pids = ready(driver)
    os.kill(pids["worker"], signal.SIGKILL)
    seen = read_until(driver, "restarted it as pid")
    new_pid = int(re.search(r"restarted it as pid (\d+)", seen).group(1))
    assert "worker exited (code -9)" in seen
    time.sleep(0.3)
    assert driver.poll() is None  # still supervising
    os.kill(new_pid, 0)  # the new worker runs
    driver.send_signal(signal.SIGINT)
    out, _ = driver.communicate(timeout=15)
    assert driver.returncode == 0, out
    assert_all_gone([*pids.values(), new_pid])


def test_restarts_are_bounded(start: Start) -> None:
    driver = start({"beat": [CRASHER, True], "web": [SLEEPER, False]})
    pids = ready(driver)
    out, _ = driver.communicate(timeout=30)
    limit = supervisor.RESTART_LIMIT
    assert driver.returncode == 1, out
    assert out.count("beat exited (code 3); restarted") == limit
    assert f"{limit} times within 60s: not restarted" in out
    assert_all_gone(list(pids.values()))


def test_sigint_stops_a_run_started_in_the_background(start: Start) -> None:
    driver = start({"worker": [SLEEPER, True]}, ignore=(signal.SIGINT,))
    pids = ready(driver)
    driver.send_signal(signal.SIGINT)
    out, _ = driver.communicate(timeout=15)
    assert driver.returncode == 0 and "stopping: received SIGINT" in out, out
    assert_all_gone(list(pids.values()))


def test_under_nohup_sighup_does_not_stop_it_but_sigterm_does(start: Start) -> None:
    driver = start({"worker": [SLEEPER, True]}, ignore=(signal.SIGHUP,))
    pids = ready(driver)
    driver.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    assert driver.poll() is None
    os.kill(pids["worker"], 0)
    driver.send_signal(signal.SIGTERM)
    out, _ = driver.communicate(timeout=15)
    assert driver.returncode == 0 and "stopping: received SIGTERM" in out, out
    assert_all_gone(list(pids.values()))
