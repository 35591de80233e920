"""The MIG approval form starts on the node the proposal list ranks first, and each
proposal shows its node's health (inventory/health.py: unhealthy GPU, driver skew, ...).

Before: the form preselected the alphabetically first node (which runs jobs) while the
list ranked an idle node first, and no health was shown next to the proposals.
"""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from mig import services
from mig.models import MigRequest
from tests.factories import make_cluster, make_node, make_pod
from tests.quotas.builders import make_namespace, make_team

pytestmark = pytest.mark.django_db

A100 = "NVIDIA-A100-SXM4-80GB"
DRIVER = "550.54.15"


def _mig_node(cluster, name, **kw):
    fields = {"product": A100, "gpus": 2, "mig_capable": True, "mig_strategy": "mixed",
              "mig_config": "all-disabled", "mig_config_state": "success",
              "driver_version": DRIVER}  # fmt: skip
    fields.update(kw)
    return make_node(cluster, name, **fields)


@pytest.fixture
def world(researcher):
    cluster = make_cluster("lab")
    team = make_team("vision", members=[researcher])
    ns = make_namespace(team, cluster, "ml-vision")
    # Alphabetically first, but two jobs run on it.
    busy = _mig_node(cluster, "a100-00")
    make_pod(busy, "trainer-0", namespace="ml-vision")
    make_pod(busy, "trainer-1", namespace="ml-vision")
    idle = _mig_node(cluster, "a100-01")
    return {"cluster": cluster, "ns": ns, "busy": busy, "idle": idle}


def _submit(user, ns):
    return services.submit(
        user,
        services.MigRequestData(
            team=ns.team, namespace=ns, product="A100-80GB", layout={"3g.40gb": 2}, gpus=1,
            justification="Inference servers need isolation.",
        ),
    )  # fmt: skip


def _detail(client, admin_user, req):
    client.force_login(admin_user)
    response = client.get(reverse("mig:request", args=[req.pk]))
    assert response.status_code == 200
    return response


def _options(html: str) -> list[tuple[str, bool, str]]:
    """(value, selected, label) of the approval form's node choices, in order."""
    select = re.search(r'<select name="node"[^>]*>(.*?)</select>', html, re.S)[1]
    return [
        (m[1], bool(m[2]), m[3].strip())
        for m in re.finditer(r'<option value="([^"]*)"( selected)?>([^<]*)</option>', select)
    ]


def test_form_preselects_the_top_ranked_proposal(client, admin_user, researcher, world):
    req = _submit(researcher, world["ns"])
    response = _detail(client, admin_user, req)
    proposals = response.context["proposals"]
    assert [p.node.name for p in proposals] == ["a100-01", "a100-00"]  # idle first
    assert response.context["approve_form"]["node"].value() == world["idle"].pk
    options = [o for o in _options(response.content.decode()) if o[0]]
    # The choices follow the ranking, say why, and the idle node is the selected one.
    assert [(sel, label) for _, sel, label in options] == [
        (True, "a100-01: idle"),
        (False, "a100-00: 2 GPU pods"),
    ]
    assert options[0][0] == str(world["idle"].pk)


def test_submitting_the_preselected_node_approves_on_it(
    client, admin_user, researcher, world, on_commit
):
    req = _submit(researcher, world["ns"])
    form = _detail(client, admin_user, req).context["approve_form"]
    with on_commit(execute=False):
        response = client.post(
            reverse("mig:request-approve", args=[req.pk]),
            {"node": form["node"].value(), "drain_policy": "wait"},
        )
    assert response.status_code == 302
    req.refresh_from_db()
    assert req.status == MigRequest.Status.APPROVED and req.node == world["idle"]


def test_proposals_show_node_health(client, admin_user, researcher, world):
    # A third node with an older driver than the others: driver skew.
    _mig_node(world["cluster"], "a100-02", driver_version="535.104.05")
    req = _submit(researcher, world["ns"])
    html = _detail(client, admin_user, req).content.decode()
    rows = dict(re.findall(r'<tr data-proposal="([^"]+)".*?<td data-health>(.*?)</td>', html, re.S))
    assert set(rows) == {"a100-00", "a100-01", "a100-02"}
    assert "Driver skew" in rows["a100-02"] and "535.104.05" in rows["a100-02"]
    assert "Healthy" in rows["a100-01"] and "Driver skew" not in rows["a100-01"]
    # The warning is in the node's choice too, so it is seen where the node is picked.
    labels = {label.split(":")[0]: label for _, _, label in _options(html)}
    assert "Driver skew" in labels["a100-02"]


def test_an_unhealthy_top_node_is_not_preselected(client, admin_user, researcher, world):
    # The idle node's device plugin marked one GPU unhealthy (allocatable < capacity).
    world["idle"].resources.filter(resource="nvidia.com/gpu").update(allocatable=1)
    req = _submit(researcher, world["ns"])
    response = _detail(client, admin_user, req)
    html = response.content.decode()
    # Still ranked first (the ranking is the API's too), shown unhealthy, not preselected.
    assert [p.node.name for p in response.context["proposals"]] == ["a100-01", "a100-00"]
    rows = dict(re.findall(r'<tr data-proposal="([^"]+)".*?<td data-health>(.*?)</td>', html, re.S))
    assert "Unhealthy GPU" in rows["a100-01"]
    assert response.context["approve_form"]["node"].value() == world["busy"].pk
    assert re.search(r"data-preferred-node>a100-00<", html)
    selected = [label for _, sel, label in _options(html) if sel]
    assert selected == ["a100-00: 2 GPU pods"]
    assert any(label.startswith("a100-01: idle; Unhealthy GPU") for _, _, label in _options(html))


def test_all_unhealthy_falls_back_to_the_top_ranked(client, admin_user, researcher, world):
    for node in (world["idle"], world["busy"]):
        node.resources.filter(resource="nvidia.com/gpu").update(allocatable=1)
    req = _submit(researcher, world["ns"])
    response = _detail(client, admin_user, req)
    assert response.context["approve_form"]["node"].value() == world["idle"].pk
