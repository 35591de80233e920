"""Programs some tests drive, and the Debian packages that provide them.

``need("kubectl")`` returns the program's path, or skips the test with a message naming
the package to install; ``make test`` installs missing packages first when it runs as root
(``devstack/prereqs.py``), and the root conftest lists every skipped prerequisite at the
end of the run.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache

import pytest

from devstack.prereqs import TEST_PROGRAMS

SKIPPED: set[str] = set()
# kubectl older than this lacks what the tests use (auth whoami, OpenAPI v3 explain, ...);
# Debian bookworm's kubernetes-client is 1.20.
KUBECTL_MIN_MINOR = 28


def need(program: str) -> str:
    """The path of ``program``, or skip naming its Debian package."""
    path = shutil.which(program)
    if path is None:
        package = TEST_PROGRAMS.get(program, program)
        SKIPPED.add(f"{program} (Debian package {package})")
        pytest.skip(f"{program} not installed (Debian package {package})")
    return path


@cache
def _kubectl_minor(path: str) -> int:
    out = subprocess.run(
        [path, "version", "--client"], capture_output=True, text=True, timeout=30, check=False
    ).stdout
    match = re.search(r"v1\.(\d+)", out)
    return int(match.group(1)) if match else 0


def need_kubectl() -> str:
    """kubectl 1.28 or newer, or skip with the reason."""
    path = need("kubectl")
    minor = _kubectl_minor(path)
    if minor < KUBECTL_MIN_MINOR:
        SKIPPED.add(f"kubectl >= 1.{KUBECTL_MIN_MINOR} (found 1.{minor})")
        pytest.skip(f"kubectl 1.{minor} is older than 1.{KUBECTL_MIN_MINOR}")
    return path
