"""MIG request REST API: validation reasons, node proposals, decisions and scoping.

Personas: ``rob`` (member of vision), ``olga`` (member of nlp, the other team) and an
admin. Approval starts the coordinator on commit; with the ``db`` fixture commits never
happen, so nothing talks to a cluster here (tests/mig/test_coordinator.py does).
"""

from __future__ import annotations

import pytest

from mig.models import MigRequest
from tests.conftest import api_for
from tests.factories import make_cluster, make_node, make_pod
from tests.quotas.builders import make_namespace, make_team, make_user

pytestmark = pytest.mark.django_db

URL = "/api/v1/mig-requests/"
WHY = "Serving many small models on slices."


@pytest.fixture
def world():
    cluster = make_cluster("prod")
    mig = {"mig_capable": True, "mig_strategy": "mixed", "mig_config": "all-disabled",
           "mig_config_state": "success"}  # fmt: skip
    busy = make_node(cluster, "a100-busy", **mig)
    make_node(cluster, "a100-idle", **mig)
    make_node(cluster, "a100-nomig")  # not MIG-capable: never proposed
    make_node(cluster, "h100-00", product="NVIDIA-H100-80GB-HBM3", **mig)
    make_pod(busy, "train-0")
    rob, olga = make_user("rob"), make_user("olga")
    admin = make_user("ada", staff=True)
    vision = make_team("vision", members=[rob])
    nlp = make_team("nlp", members=[olga])
    make_namespace(vision, cluster, "ml-vision")
    make_namespace(nlp, cluster, "nlp-research")
    return type("World", (), {"cluster": cluster, "rob": api_for(rob), "olga": api_for(olga),
                              "admin": api_for(admin)})  # fmt: skip


def body(**kw) -> dict:
    data = {"team": "vision", "namespace": "ml-vision", "product": "A100-80GB",
            "layout": {"3g.40gb": 1, "1g.10gb": 2}, "gpus": 2, "justification": WHY}  # fmt: skip
    data.update(kw)
    return data


def test_member_files_a_request_and_sees_proposals(world):
    r = world.rob.post(URL, body(product="NVIDIA-A100-SXM4-80GB"), format="json")
    assert r.status_code == 201, r.json()
    data = r.json()
    assert (data["status"], data["product"], data["gpus"]) == ("pending", "A100-80GB", 2)
    assert [p["node"] for p in data["proposals"]] == ["a100-idle", "a100-busy"]
    busy = data["proposals"][1]
    assert busy["idle"] is False and busy["pods"][0]["name"] == "train-0"
    assert data["proposals"][0]["config_name"].startswith("portal-")
    assert data["steps"] == []


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"layout": {"4g.40gb": 1, "3g.40gb": 2}}, "layout", ""),
        ({"layout": {"5g.50gb": 1}}, "layout", "Unknown profile '5g.50gb'"),
        ({"layout": {"1g.10gb": 0}}, "layout", "positive integer"),
        ({"layout": []}, "layout", "object"),
        ({"product": "GTX-1080"}, "product", "GTX-1080"),
        ({"product": "A30-24GB"}, "product", "no MIG-capable A30-24GB node"),
        ({"gpus": 9}, "gpus", "at most 8"),
        ({"gpus": 0}, "gpus", "positive"),
        ({"justification": "x"}, "justification", "at least"),
        ({"node": "a100-idle"}, "node", "Only admins"),
        ({"namespace": "nlp-research"}, "namespace", "nlp-research"),
    ],
)
def test_bad_requests_are_400_with_a_reason(world, change, field, words):
    r = world.rob.post(URL, body(**change), format="json")
    assert r.status_code == 400, r.json()
    assert field in r.json(), r.json()
    assert words in str(r.json()[field])
    assert not MigRequest.objects.exists()


def test_every_problem_comes_in_one_round_as_a_list(world):
    # Too many GPUs used to hide the layout's own errors, and several layout errors came
    # joined into one string.
    r = world.rob.post(URL, body(gpus=20, layout={"5g.50gb": 1, "1g.10gb": 0}), format="json")
    assert r.status_code == 400
    errors = r.json()
    assert errors["gpus"] == ["Nodes of A100-80GB here have at most 8 GPUs."]
    assert isinstance(errors["layout"], list) and len(errors["layout"]) >= 2, errors


def test_no_mig_request_where_mig_is_disabled(world):
    # mig.strategy none (or no label): the device plugin advertises no MIG devices there,
    # so a layout would never be usable (seen on the demo's Kueue cluster's H100s).
    h100 = world.cluster.nodes.get(name="h100-00")
    h100.mig_strategy = "none"
    h100.save(update_fields=["mig_strategy"])
    r = world.rob.post(URL, body(product="H100-80GB", layout={"3g.40gb": 2}), format="json")
    assert r.status_code == 400
    assert "MIG is disabled on prod's H100-80GB nodes" in str(r.json()["product"])
    r = world.admin.post(URL, body(product="", node="h100-00", layout={"3g.40gb": 2}),
                         format="json")  # fmt: skip
    assert r.status_code == 400 and "MIG is disabled on node h100-00" in str(r.json()["node"])
    assert not MigRequest.objects.exists()


def test_admin_names_a_node_and_the_product_follows(world):
    r = world.admin.post(URL, body(product="", node="h100-00", layout={"3g.40gb": 2}),
                         format="json")  # fmt: skip
    assert r.status_code == 201, r.json()
    assert r.json()["product"] == "H100-80GB" and r.json()["requested_node"] == "h100-00"
    assert [p["node"] for p in r.json()["proposals"]] == ["h100-00"]


def test_scoping_other_team_sees_nothing(world):
    rid = world.rob.post(URL, body(), format="json").json()["id"]
    assert world.olga.get(URL).json()["count"] == 0
    assert world.olga.get(f"{URL}{rid}/").status_code == 404
    assert world.olga.post(f"{URL}{rid}/cancel/", {}, format="json").status_code == 404
    r = world.olga.post(URL, body(), format="json")  # another team: as if unknown
    assert r.status_code == 404 and "among your teams" in str(r.json()["team"])
    assert "namespace" not in r.json()
    r = world.olga.post(URL, body(namespace="nlp-research"), format="json")  # not her team
    assert r.status_code == 404 and "among your teams" in str(r.json()["team"])
    assert world.rob.get(URL).json()["count"] == 1
    assert world.admin.get(URL, {"team": "vision"}).json()["count"] == 1
    assert world.admin.get(URL, {"status": "approved"}).json()["count"] == 0


def test_approve_needs_an_admin_and_a_free_node(world):
    rid = world.rob.post(URL, body(), format="json").json()["id"]
    other = world.rob.post(URL, body(), format="json").json()["id"]
    decision = {"node": "a100-busy", "drain_policy": "evict"}
    assert world.rob.post(f"{URL}{rid}/approve/", decision, format="json").status_code == 403
    r = world.admin.post(f"{URL}{rid}/approve/", {"node": "a100-busy"}, format="json")
    assert r.status_code == 400 and "drain_policy" in r.json()
    r = world.admin.post(f"{URL}{rid}/approve/", {**decision, "node": "nope"}, format="json")
    assert r.status_code == 400 and "node" in r.json()
    r = world.admin.post(f"{URL}{rid}/approve/", {**decision, "node": "h100-00"}, format="json")
    assert r.status_code == 400 and "not A100-80GB" in str(r.json()["node"])
    r = world.admin.post(f"{URL}{rid}/approve/", decision, format="json")
    assert r.status_code == 200, r.json()
    data = r.json()
    assert (data["status"], data["node"], data["drain_policy"]) == (
        "approved",
        "a100-busy",
        "evict",
    )
    assert [s["name"] for s in data["steps"]] == [
        "write_config", "cordon", "drain", "wait_mount", "set_label", "wait_state",
        "wait_devices", "uncordon", "resync", "grant",
    ]  # fmt: skip
    assert {s["status"] for s in data["steps"]} == {"pending"}
    assert data["previous_config"] == "all-disabled" and data["proposals"] == []
    # A second run on the same node is refused while the first is active.
    r = world.admin.post(f"{URL}{other}/approve/", decision, format="json")
    assert r.status_code == 400 and "Another MIG run is active" in str(r.json()["node"])
    # The approved one cannot be approved, cancelled or rejected again.
    assert world.admin.post(f"{URL}{rid}/approve/", decision, format="json").status_code == 409
    assert world.rob.post(f"{URL}{rid}/cancel/", {}, format="json").status_code == 409


def test_reject_cancel_and_revert(world):
    rid = world.rob.post(URL, body(), format="json").json()["id"]
    assert world.rob.post(f"{URL}{rid}/reject/", {"reason": "no"}, format="json").status_code == 403
    r = world.admin.post(f"{URL}{rid}/reject/", {}, format="json")
    assert r.status_code == 400 and "reason" in r.json()
    r = world.admin.post(f"{URL}{rid}/reject/", {"reason": "Use the shared pool."}, format="json")
    assert r.status_code == 200 and r.json()["status"] == "rejected"
    assert world.admin.post(f"{URL}{rid}/revert/").status_code == 409
    other = world.rob.post(URL, body(), format="json").json()["id"]
    r = world.rob.post(f"{URL}{other}/cancel/", {"note": "changed plans"}, format="json")
    assert r.status_code == 200 and r.json()["status"] == "cancelled"


def test_list_query_count_does_not_grow(world, django_assert_max_num_queries):
    for _ in range(3):
        world.rob.post(URL, body(), format="json")
    with django_assert_max_num_queries(8):
        r = world.rob.get(URL)
    assert r.json()["count"] == 3


def test_schema_has_the_mig_request_paths(world):
    r = world.rob.get("/api/schema/", {"format": "json"})
    assert r.status_code == 200
    paths = r.json()["paths"]
    for path in ["/api/v1/mig-requests/", "/api/v1/mig-requests/{id}/"] + [
        f"/api/v1/mig-requests/{{id}}/{a}/" for a in ("approve", "reject", "cancel", "revert")
    ]:
        assert path in paths, path
    assert "400" in paths["/api/v1/mig-requests/"]["post"]["responses"]
