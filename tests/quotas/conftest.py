"""A synced simulated cluster with a team namespace, for the apply and worker tests."""

import pytest

from inventory.sync import sync_cluster
from tests.inventory.test_sync import node_body
from tests.quotas.builders import make_namespace, make_team, make_user


@pytest.fixture
def setup(sim_api, sim_cluster):
    """Two 8-GPU nodes, the namespace ``vision`` of team vision, a member and an admin."""
    sim_api.create_node(node_body("gpu-0"))
    sim_api.create_node(node_body("gpu-1"))
    sim_api.create_namespace({"metadata": {"name": "vision"}})
    assert sync_cluster(sim_cluster).status == "succeeded"
    alice, admin = make_user("alice"), make_user("root", staff=True)
    team = make_team("vision", members=[alice])
    ns = make_namespace(team, sim_cluster, "vision")
    return {"core": sim_api, "alice": alice, "admin": admin, "team": team, "ns": ns}
