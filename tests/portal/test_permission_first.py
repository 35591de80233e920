"""Permission before validation, and team slugs that hint nothing (issue #11, section 3).

A member posting a malformed body to an admin-only endpoint is refused (403) before any
field error could describe what the endpoint wants or which objects exist; another team's
slug and a made-up slug get the same answer everywhere a team slug is accepted.
"""

from __future__ import annotations

import uuid

import pytest

from inventory.models import Cluster
from mig.models import MigRequest
from quotas import services
from quotas.models_kueue import TeamQueue
from tests.conftest import api_for
from tests.factories import make_cluster, make_node
from tests.quotas.builders import make_namespace, make_team, make_user

pytestmark = pytest.mark.django_db

GPU = "nvidia.com/gpu"
BAD = {"amount": "lots", "reason": [1], "node": {"x": 1}, "quota": 7, "expected": "x",
       "cohort": ["?"], "name": "", "team": {}, "slug": "Not A Slug"}  # fmt: skip


@pytest.fixture
def world():
    cluster = make_cluster("c1")
    kueue = make_cluster("c2", enforcement=Cluster.Enforcement.KUEUE)
    make_node(cluster, "n1", gpus=8)
    member, outsider = make_user("mia"), make_user("otto")
    vision = make_team("vision", members=[member])
    nlp = make_team("nlp", members=[outsider])
    ns = make_namespace(vision, cluster, "ml-vision")
    make_namespace(nlp, cluster, "ml-nlp")
    req = services.submit(
        member,
        services.RequestData(
            team=vision,
            namespace=ns,
            resource=GPU,
            amount=1,
            justification="Training runs for the paper.",
        ),
    )
    mig = MigRequest.objects.create(
        team=vision, namespace=ns, cluster=cluster, product="A100-80GB",
        layout={"1g.10gb": 7}, gpus=1, justification="x", requested_by=member,
    )  # fmt: skip
    queue = TeamQueue.objects.create(team=vision, cluster=kueue)
    return {"member": member, "cluster": cluster, "ns": ns, "req": req, "mig": mig,
            "queue": queue}  # fmt: skip


def _admin_endpoints(w) -> list[tuple[str, str]]:
    """Every admin-only write of the API, on objects the member can otherwise see."""
    ns, req, mig, cl = w["ns"].pk, w["req"].pk, w["mig"].pk, w["cluster"].slug
    return [
        ("post", "/api/v1/teams/vision/baseline/"),
        ("post", f"/api/v1/quota-requests/{req}/approve/"),
        ("post", f"/api/v1/quota-requests/{req}/reject/"),
        ("patch", f"/api/v1/team-queues/{w['queue'].pk}/"),
        ("post", "/api/v1/namespaces/"),
        ("post", f"/api/v1/namespaces/{ns}/adopt/"),
        ("post", f"/api/v1/namespaces/{ns}/keep/"),
        ("post", f"/api/v1/namespaces/{ns}/remove-quota/"),
        ("post", f"/api/v1/namespaces/{ns}/confirm-lowering/"),
        ("post", f"/api/v1/mig-requests/{mig}/approve/"),
        ("post", f"/api/v1/mig-requests/{mig}/reject/"),
        ("post", f"/api/v1/mig-requests/{mig}/revert/"),
        ("post", "/api/v1/clusters/"),
        ("patch", f"/api/v1/clusters/{cl}/"),
        ("put", f"/api/v1/clusters/{cl}/"),
        ("post", f"/api/v1/clusters/{cl}/preflight/"),
        ("post", f"/api/v1/clusters/{cl}/sync/"),
        ("post", "/api/v1/gpu-classes/"),
        ("post", "/api/v1/label-sets/"),
        ("post", "/api/v1/agent/tokens/"),
    ]


def test_member_gets_403_before_any_field_error(world):
    api = api_for(world["member"])
    wrong = []
    for method, url in _admin_endpoints(world):
        response = getattr(api, method)(url, BAD, format="json")
        body = response.json()
        if response.status_code != 403 or set(body) != {"detail"}:
            wrong.append((method, url, response.status_code, body))
    assert not wrong, wrong


def test_admin_actions_on_unknown_ids_are_403_for_members_too(world):
    """The id is not looked up before the permission: no 404-or-403 oracle."""
    api = api_for(world["member"])
    made_up = uuid.uuid4()
    for url in (f"/api/v1/quota-requests/{made_up}/approve/",
                f"/api/v1/mig-requests/{made_up}/reject/",
                f"/api/v1/namespaces/{made_up}/adopt/"):  # fmt: skip
        assert api.post(url, {}, format="json").status_code == 403, url


def _same(a, b, other: str, made_up: str) -> None:
    assert a.status_code == b.status_code, (a.content, b.content)
    assert a.content.decode().replace(other, "X") == b.content.decode().replace(made_up, "X")


@pytest.mark.parametrize("url", ["/api/v1/quota-requests/", "/api/v1/mig-requests/"])
def test_team_in_body_other_and_made_up_look_alike(world, url):
    api = api_for(world["member"])
    body = {"namespace": "ml-nlp", "resource": GPU, "amount": 1, "justification": "x" * 30,
            "layout": {"1g.10gb": 7}, "gpus": 1, "product": "A100-80GB"}  # fmt: skip
    other = api.post(url, {**body, "team": "nlp"}, format="json")
    made_up = api.post(url, {**body, "team": "zzz-none"}, format="json")
    assert other.status_code == 400
    assert "nlp" not in str(other.json().get("namespace", ""))
    _same(other, made_up, "nlp", "zzz-none")


@pytest.mark.parametrize(
    "path",
    ["quota-requests", "grants", "operations", "audit-events", "mig-requests", "team-queues"],
)
def test_team_filter_other_and_made_up_look_alike(world, path):
    api = api_for(world["member"])
    other = api.get(f"/api/v1/{path}/?team=nlp")
    made_up = api.get(f"/api/v1/{path}/?team=zzz-none")
    _same(other, made_up, "nlp", "zzz-none")


@pytest.mark.parametrize("suffix", ["", "baseline/"])
def test_team_in_url_other_and_made_up_look_alike(world, suffix):
    api = api_for(world["member"])
    method = api.post if suffix else api.get
    other = method(f"/api/v1/teams/nlp/{suffix}", {}, format="json")
    made_up = method(f"/api/v1/teams/zzz-none/{suffix}", {}, format="json")
    assert other.status_code in (403, 404)
    _same(other, made_up, "nlp", "zzz-none")


def test_team_pages_other_and_made_up_look_alike(client, world):
    client.force_login(world["member"])
    for url in ("/telemetry/teams/{}/",):
        other = client.get(url.format("nlp"))
        made_up = client.get(url.format("zzz-none"))
        assert other.status_code == made_up.status_code == 404
