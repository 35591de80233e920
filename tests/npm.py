"""npm packages some tests drive (axe-core, oidc-provider), installed once per lockfile.

A test folder holds a ``package.json`` and its ``package-lock.json`` (versions pinned);
``node_modules(folder)`` runs ``npm ci`` into ``.cache/npm/<hash of the lockfile>/`` at the
repository root the first time (the npm registry must be reachable then) and reuses it
afterwards. Without ``node``/``npm`` (Debian packages ``nodejs``/``npm``) the test skips with
a message naming the package, listed at the end of the run (tests/prereqs.py).
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.prereqs import SKIPPED, need

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "npm"


def node() -> str:
    """The path of ``node``, or skip naming its Debian package."""
    return need("node")


def node_modules(folder: Path) -> Path:
    """``folder``'s locked packages, installed into the cache once; their node_modules."""
    node()
    npm = need("npm")
    lock = folder / "package-lock.json"
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()[:16]
    target = CACHE / f"{folder.name}-{digest}"
    done = target / ".installed"
    if done.exists():
        return target / "node_modules"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{folder.name}.lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)  # two test processes install once
        if not done.exists():
            target.mkdir(parents=True, exist_ok=True)
            for name in ("package.json", "package-lock.json"):
                shutil.copy(folder / name, target / name)
            result = subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"],
                cwd=target, capture_output=True, text=True, timeout=300, check=False,
            )  # fmt: skip
            if result.returncode != 0:
                SKIPPED.add(f"npm packages of {folder.name} (npm ci failed: registry?)")
                pytest.skip(f"npm ci in {folder.name} failed: {result.stderr[-500:]}")
            done.write_text(digest)
    return target / "node_modules"
