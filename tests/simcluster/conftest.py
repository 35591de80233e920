"""Fixtures: an in-process simulator on port 0 and official-client API objects for it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from simcluster import SimCluster

DEMO = Path(__file__).resolve().parents[2] / "simcluster" / "fleets" / "demo.yaml"


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    s = SimCluster.from_fleet(DEMO, mig_step_s=0.05, bookmark_interval_s=0.2)
    s.start()
    yield s
    s.stop()


def make_api(sim: SimCluster, retries: int | None = 0) -> client.ApiClient:
    cfg = client.Configuration()
    cfg.host = sim.url
    cfg.retries = retries
    if sim.token:
        cfg.api_key = {"authorization": f"Bearer {sim.token}"}
    return client.ApiClient(cfg)


@pytest.fixture
def api(sim: SimCluster) -> Iterator[client.ApiClient]:
    a = make_api(sim)
    yield a
    a.close()


@pytest.fixture
def v1(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)
