"""The demo fleets on the real control plane, seeded as ``make demo`` seeds them."""

from __future__ import annotations

import pytest
from django.core.management import call_command


@pytest.fixture
def seeded(tmp_path, settings):
    """The demo fleet, or the Kueue fleet as ``research``, seeded as ``make demo`` does."""
    from tests import kubesim

    def start(fleet: str, kueue: bool = False):
        settings.DATA_DIR = tmp_path
        sim = kubesim.start(fleet, tmp_path)
        started.append(sim)
        if kueue:  # the first cluster left unreachable: one control plane serves the session
            refused = sim.write_kubeconfig(tmp_path / "refused", token="refused", user="nobody")
            call_command("seed_demo", kubeconfig=str(refused),
                         kueue_kubeconfig=str(sim.kubeconfig_path),
                         kueue_admin_kubeconfig=str(sim.admin_kubeconfig_path))  # fmt: skip
        else:
            call_command("seed_demo", kubeconfig=str(sim.kubeconfig_path))
        return sim

    started: list = []
    yield start
    for sim in started:
        sim.stop()
