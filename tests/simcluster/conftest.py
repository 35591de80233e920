"""Fixtures: an in-process simulator on port 0, official-client API objects and kubectl for it.

A test module with a fleet or options of its own overrides ``sim``; ``api``, ``v1`` and
``kubectl`` then talk to that simulator.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from simcluster import SimCluster
from tests.prereqs import need_kubectl
from tests.simcluster.helpers import DEMO, Kubectl, make_api

__all__ = ["DEMO", "make_api"]  # still importable from here, as older modules did


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    with SimCluster.from_fleet(DEMO, mig_step_s=0.05, bookmark_interval_s=0.2) as s:
        yield s


@pytest.fixture
def api(sim: SimCluster) -> Iterator[client.ApiClient]:
    with make_api(sim) as a:
        yield a


@pytest.fixture
def v1(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def kubectl(sim: SimCluster, tmp_path: Path) -> Kubectl:
    """The real kubectl against ``sim`` as its admin; skips (naming the Debian package)
    when kubectl is missing or older than the tests need."""
    return Kubectl(need_kubectl(), sim, tmp_path)
