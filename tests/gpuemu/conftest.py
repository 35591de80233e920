"""Fixtures: the real control plane, the GPU Operator loaded, one emulator for the package.

The control plane is the session's (tests/realcluster.py), reset before and after this
package. Its tests share one emulator, so each names its nodes and namespaces with
:func:`unique`.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import gpuemu
from devstack.controlplane import ControlPlane
from devstack.kubeapi import KubeAPI
from gpuemu.watch import Event, Informer

# The operator every test sees: MIG mixed strategy, configs generated from the hardware
# (no custom ConfigMap), short delays.
OPERATOR: dict[str, Any] = {
    "namespace": "gpu-operator",
    "migStrategy": "mixed",
    "configMountDelay": 0.5,
    "devicePluginRestart": 1.0,
    "clientPauseTimeout": 20,
}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="package")
def control_plane() -> Iterator[ControlPlane]:
    """The session's control plane (tests/realcluster.py), reset for this package, which
    keeps one emulator running across its tests, and reset again after it."""
    from tests import kubesim, realcluster

    if not realcluster.available():
        pytest.skip(f"the real control plane is not built: {kubesim.PREREQUISITE}")
    plane = realcluster.session().plane
    plane.reset()
    try:
        yield plane
    finally:
        plane.reset()


@pytest.fixture(scope="package")
def api(control_plane: ControlPlane) -> KubeAPI:
    return control_plane.api


@pytest.fixture(scope="package")
def emulator(api: KubeAPI) -> Iterator[gpuemu.Emulator]:
    """The GPU Operator loaded (ClusterPolicy, default ConfigMap, operand DaemonSets) and the
    emulator running with fast steps."""
    gpuemu.load(api, {"gpuOperator": OPERATOR})
    options = gpuemu.Options.from_fleet({"gpuOperator": OPERATOR}, mig_step_s=0.05, poll_s=0.1)
    emu = gpuemu.Emulator(api, options).start()
    try:
        yield emu
    finally:
        emu.stop()


class Recorder:
    """Every watch event of one resource (an :class:`Informer` with selectors), for asserting
    on what happened in between polls."""

    def __init__(self, api: KubeAPI, resource: str, **selectors: str) -> None:
        self.events: list[Event] = []
        self._lock = threading.Lock()
        self.informer = Informer(api, resource, self._add, watch_timeout_s=30, **selectors)

    def _add(self, ev: Event) -> None:
        with self._lock:
            self.events.append(ev)

    def snapshot(self) -> list[Event]:
        with self._lock:
            return list(self.events)

    def start(self) -> Recorder:
        self.informer.start()
        assert self.informer.wait_synced(10)
        return self


@pytest.fixture
def record(api: KubeAPI) -> Iterator[Callable[..., Recorder]]:
    """``record("nodes", field_selector="metadata.name=x")``: a started :class:`Recorder`."""
    started: list[Recorder] = []

    def make(resource: str, **selectors: str) -> Recorder:
        rec = Recorder(api, resource, **selectors).start()
        started.append(rec)
        return rec

    yield make
    for rec in started:
        rec.informer.stop()


@pytest.fixture(autouse=True)
def _counted(control_plane: ControlPlane) -> None:
    """Each test here runs against the real control plane (the run's summary line)."""
    from tests.kubesim import RAN_AGAINST, _current_test

    RAN_AGAINST["real"].add(_current_test())
