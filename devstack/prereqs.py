"""Test prerequisites that are Debian packages: installed by ``make test`` when it can.

Some tests drive real programs (``kubectl`` against the simulated cluster). When such a
program is missing, ``make test`` installs its Debian package if it runs as root; otherwise
those tests skip with a message naming the package, and pytest lists them at the end of
the run (see ``tests/prereqs.py``). Nothing else on the machine is changed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable

# program -> the Debian package that provides it
TEST_PROGRAMS: dict[str, str] = {
    "kubectl": "kubernetes-client",
    "chromium": "chromium",
    # npm packages the browser and sign-in tests drive (axe-core, oidc-provider): tests/npm.py
    "node": "nodejs",
    "npm": "npm",
    # A real Prometheus and its rules checker (tests/prom.py, tests/monitoring/)
    "prometheus": "prometheus",
    "promtool": "prometheus",
}


def missing_programs(programs: dict[str, str] = TEST_PROGRAMS) -> dict[str, str]:
    """The programs not on PATH, with their packages."""
    return {prog: pkg for prog, pkg in programs.items() if shutil.which(prog) is None}


def install_missing(
    log: Callable[[str], None], programs: dict[str, str] = TEST_PROGRAMS
) -> list[str]:
    """Install the packages of missing programs when root with apt-get; returns what is
    still missing afterwards (those tests skip)."""
    missing = missing_programs(programs)
    if not missing:
        return []
    packages = sorted(set(missing.values()))
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        log(f"not installing {', '.join(packages)} (needs root and apt-get): the tests that "
            "need them will skip")  # fmt: skip
        return sorted(missing)
    log(f"installing test prerequisites: {', '.join(packages)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages]
    if subprocess.run(install, env=env, check=False).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], env=env, check=False)
        subprocess.run(install, env=env, check=False)
    still = missing_programs(missing)
    if still:
        log(f"could not install {', '.join(sorted(set(still.values())))}: those tests will skip")
    return sorted(still)
