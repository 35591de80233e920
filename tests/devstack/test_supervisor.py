"""The supervisor behind `make demo`: prefixed output, clean Ctrl-C, no orphans, fail-fast.

Each test runs a real supervisor in a subprocess (signals and exit codes are process-wide) with
stand-in children written as ``python -c`` one-liners.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from devstack import REPO_ROOT
from devstack.supervisor import Supervisor

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups")

# The supervisor under test: starts the children given as JSON, supervises, exits with stop()'s
# code. It prints "READY <pids>" once everything started, pids of the children's whole trees.
DRIVER = textwrap.dedent(
    """
    import json, sys, time
    import psutil
    from devstack.supervisor import Supervisor

    children = json.loads(sys.argv[1])
    sup = Supervisor(stop_timeout=float(sys.argv[2]))
    sup.install_signal_handlers()
    for name, code in children.items():
        sup.start(name, [sys.executable, "-c", code])
    def tree_started():
        procs = [psutil.Process(c.proc.pid) for c in sup.children]
        return len(procs) + sum(len(p.children(recursive=True)) for p in procs) >= int(sys.argv[3])
    if sup.wait_until(tree_started, timeout=10):
        pids = [p.pid for c in sup.children for p in
                [psutil.Process(c.proc.pid), *psutil.Process(c.proc.pid).children(recursive=True)]]
        sup.log("READY " + json.dumps(pids))
        sup.run_forever()
    sys.exit(sup.stop())
    """
)

StartDriver = Callable[..., "subprocess.Popen[str]"]

SLEEPER = "import time\nwhile True: time.sleep(0.1)"
# A child that starts a grandchild (like Celery's pool), both in the child's process group.
PARENT_OF_SLEEPER = (
    "import subprocess, sys, time\n"
    f"subprocess.Popen([sys.executable, '-c', {SLEEPER!r}])\n"
    "print('spawned', flush=True)\n"
    "while True: time.sleep(0.1)"
)
# A child that ignores SIGTERM, so only the SIGKILL escalation can stop it.
STUBBORN = (
    "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('armed')\n" + SLEEPER
)


@pytest.fixture
def start_driver(tmp_path: Path) -> Iterator[StartDriver]:
    """Start supervisors under test; whatever a failed test leaves running is killed after it."""
    started: list[subprocess.Popen[str]] = []

    def start(
        children: dict[str, str], *, expect: int, stop_timeout: float = 5.0
    ) -> subprocess.Popen[str]:
        script = tmp_path / "driver.py"
        script.write_text(DRIVER)
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"}
        env.pop("NO_COLOR", None)
        driver = subprocess.Popen(
            [sys.executable, str(script), json.dumps(children), str(stop_timeout), str(expect)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,  # so a stray signal of ours never reaches pytest
        )
        started.append(driver)
        return driver

    yield start
    for driver in started:
        if driver.poll() is None:
            # SIGTERM: the supervisor under test stops its own children, then exits.
            driver.terminate()
            try:
                driver.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(driver.pid, signal.SIGKILL)
                driver.communicate()


def read_until(driver: subprocess.Popen[str], text: str, timeout: float = 15.0) -> str:
    """Collect output up to and including the first line containing ``text``."""
    assert driver.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = driver.stdout.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return "".join(seen)
    driver.kill()
    pytest.fail(f"never saw {text!r} from the supervisor:\n" + "".join(seen))


def read_until_ready(driver: subprocess.Popen[str]) -> tuple[list[int], str]:
    """Output until the READY line; returns the pids it names and the output so far."""
    seen = read_until(driver, "READY ")
    return json.loads(seen.rsplit("READY ", 1)[1]), seen


def assert_all_gone(pids: list[int]) -> None:
    deadline = time.monotonic() + 5
    alive: list[int] = pids
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if _alive(pid)]
        if not alive:
            return
        time.sleep(0.05)
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    pytest.fail(f"processes left behind: {alive}")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_output_is_prefixed_with_padded_names(start_driver: StartDriver) -> None:
    driver = start_driver(
        {
            "web": "import sys; print('hello from web'); print('oops', file=sys.stderr)\n"
            + SLEEPER,
            "worker": "print('hello from worker')\n" + SLEEPER,
        },
        expect=2,
    )
    pids, before = read_until_ready(driver)
    time.sleep(0.3)  # let both hellos through
    driver.send_signal(signal.SIGINT)
    after, _ = driver.communicate(timeout=15)
    out = before + after
    assert driver.returncode == 0, out
    assert "web     | hello from web\n" in out
    assert "web     | oops\n" in out  # stderr goes through the prefixer too
    assert "worker  | hello from worker\n" in out
    assert "\033[" not in out  # no colour when stdout is not a terminal
    assert_all_gone(pids)


def test_sigint_stops_children_and_grandchildren(start_driver: StartDriver) -> None:
    driver = start_driver({"worker": PARENT_OF_SLEEPER, "beat": SLEEPER}, expect=3)
    pids, _ = read_until_ready(driver)
    assert len(pids) == 3
    driver.send_signal(signal.SIGINT)
    out, _ = driver.communicate(timeout=15)
    assert driver.returncode == 0, out
    assert "stopping: received SIGINT" in out
    assert_all_gone(pids)


def test_a_dying_child_stops_the_others_and_fails(start_driver: StartDriver) -> None:
    driver = start_driver(
        {"web": SLEEPER, "worker": PARENT_OF_SLEEPER, "sim": "import time; time.sleep(1); exit(3)"},
        expect=4,
    )
    pids, _ = read_until_ready(driver)
    out, _ = driver.communicate(timeout=15)
    assert driver.returncode == 1, out
    assert "sim exited unexpectedly (code 3)" in out
    assert_all_gone(pids)


def test_sigkill_after_timeout_for_a_child_ignoring_sigterm(start_driver: StartDriver) -> None:
    driver = start_driver({"web": SLEEPER, "beat": STUBBORN}, expect=2, stop_timeout=1)
    pids, seen = read_until_ready(driver)
    if "beat    | armed" not in seen:
        read_until(driver, "beat    | armed")
    driver.send_signal(signal.SIGTERM)
    out, _ = driver.communicate(timeout=15)
    assert driver.returncode == 0, out
    assert "SIGKILL: beat" in out
    assert_all_gone(pids)


def test_run_once_returns_code_and_output(tmp_path: Path) -> None:
    out = (tmp_path / "out.txt").open("w+")
    sup = Supervisor(out, colour=False)
    rc, output = sup.run_once("seed", [sys.executable, "-c", "print('admin / s3cret'); exit(4)"])
    assert (rc, output) == (4, "admin / s3cret")
    assert sup.stop() == 0
    out.seek(0)
    assert "seed    | admin / s3cret" in out.read()


def test_prefix_is_coloured_on_a_terminal() -> None:
    sup = Supervisor(colour=True)
    assert sup.prefix("web") == "\033[36mweb     |\033[0m"
    assert Supervisor(colour=False).prefix("beat") == "beat    |"
