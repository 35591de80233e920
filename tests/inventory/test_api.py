"""Inventory REST API: filters, pagination, summary, errors, query counts."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.factories import make_cluster, make_node, make_pod

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet(db):
    c = make_cluster("prod")
    a100 = make_node(
        c, "a100-1", resources={"nvidia.com/gpu": (8, 8, 6)}, driver_version="550.107.02"
    )
    make_node(c, "a100-2", resources={"nvidia.com/gpu": (8, 6, 2)}, driver_version="550.107.02")
    make_node(c, "a100-3", resources={"nvidia.com/gpu": (8, 8, 0)}, driver_version="535.1.1")
    make_node(c, "h100-1", product="NVIDIA-H100-80GB-HBM3", unschedulable=True)
    make_node(
        c,
        "l40s-1",
        product="NVIDIA-L40S-SHARED",
        gpus=2,
        resources={"nvidia.com/gpu": (8, 8, 3)},
        sharing_strategy="time-slicing",
        gpu_replicas=4,
    )
    make_node(
        c,
        "mig-1",
        mig_capable=True,
        mig_strategy="mixed",
        mig_config="all-1g.10gb",
        resources={"nvidia.com/gpu": (0, 0, 0), "nvidia.com/mig-1g.10gb": (56, 56, 5)},
    )
    make_node(c, "cpu-1", product="")
    make_node(c, "old-1", gone_at="2026-01-01T00:00:00Z")
    make_pod(a100, "train-0", gpus=6)
    return c


def test_nodes_list_excludes_gone_and_paginates(researcher_api, fleet):
    r = researcher_api.get("/api/v1/nodes/", {"page_size": 3})
    data = r.json()
    assert r.status_code == 200 and data["count"] == 7
    assert len(data["results"]) == 3 and data["next"]
    names = {
        n["name"]
        for n in researcher_api.get(
            "/api/v1/nodes/", {"include_gone": "true", "page_size": 50}
        ).json()["results"]
    }
    assert "old-1" in names


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"product": "A100"}, {"a100-1", "a100-2", "a100-3", "mig-1"}),
        ({"product": "NVIDIA-H100-80GB-HBM3"}, {"h100-1"}),
        ({"schedulable": "false"}, {"h100-1"}),
        ({"mig_capable": "true"}, {"mig-1"}),
        ({"has_gpu": "false"}, {"cpu-1"}),
        ({"q": "l40"}, {"l40s-1"}),
        ({"cluster": "prod", "product": "L40S"}, {"l40s-1"}),
    ],
)
def test_node_filters(researcher_api, fleet, params, expected):
    r = researcher_api.get("/api/v1/nodes/", params)
    assert r.status_code == 200
    assert {n["name"] for n in r.json()["results"]} == expected


@pytest.mark.parametrize(
    ("params", "status", "field"),
    [
        ({"cluster": "nope"}, 200, None),  # a well-formed slug of no cluster: no nodes
        ({"mig_capable": "maybe"}, 400, "mig_capable"),
        ({"schedulable": "2"}, 400, "schedulable"),
        ({"page": "9999"}, 404, None),
        ({"ordering": "-nonexistent"}, 200, None),  # unknown orderings are ignored
    ],
)
def test_bad_filters_are_4xx_with_reason(researcher_api, fleet, params, status, field):
    r = researcher_api.get("/api/v1/nodes/", params)
    assert r.status_code == status
    if status >= 400:
        assert r.json()["detail"]
    if field:
        assert r.json()[field]


def test_node_detail_has_health_and_hides_pod_names_from_researchers(
    researcher_api, admin_api, fleet
):
    node_id = researcher_api.get("/api/v1/nodes/", {"q": "a100-2"}).json()["results"][0]["id"]
    detail = researcher_api.get(f"/api/v1/nodes/{node_id}/").json()
    assert {b["code"] for b in detail["health"]} == {"unhealthy-gpu"}
    a100 = researcher_api.get("/api/v1/nodes/", {"q": "a100-1"}).json()["results"][0]["id"]
    pods = researcher_api.get(f"/api/v1/nodes/{a100}/").json()["pods"]
    assert pods == [
        {
            "namespace": "ml-vision",
            "name": None,
            "phase": "Running",
            "requests": {"nvidia.com/gpu": 6},
        }
    ]
    assert admin_api.get(f"/api/v1/nodes/{a100}/").json()["pods"][0]["name"] == "train-0"
    skew = researcher_api.get("/api/v1/nodes/", {"q": "a100-3"}).json()["results"][0]
    assert [b["code"] for b in skew["health"]] == ["driver-skew"]


def test_unknown_node_is_404_json(researcher_api, fleet):
    r = researcher_api.get("/api/v1/nodes/00000000-0000-0000-0000-000000000000/")
    assert r.status_code == 404 and r.json()["detail"]
    assert researcher_api.get("/api/v1/nodes/not-a-uuid/").status_code == 404


def test_summary_per_product(researcher_api, fleet):
    data = researcher_api.get("/api/v1/inventory/summary/").json()
    products = {p["product"]: p for p in data["products"]}
    a100 = products["NVIDIA-A100-SXM4-80GB"]
    gpu = next(r for r in a100["resources"] if r["resource"] == "nvidia.com/gpu")
    assert a100["nodes"] == 4 and a100["gpus"] == 32 and a100["mig_enabled_nodes"] == 1
    assert (gpu["capacity"], gpu["allocatable"], gpu["requested"], gpu["idle"]) == (24, 22, 8, 14)
    mig = next(r for r in a100["resources"] if r["resource"] == "nvidia.com/mig-1g.10gb")
    assert (mig["allocatable"], mig["requested"]) == (56, 5)
    assert products["NVIDIA-L40S"]["time_sliced_nodes"] == 1
    # its 8 are replicas of 2 GPUs: a row of their own, never added to physical GPUs
    assert [
        (r["resource"], r["replicas"], r["allocatable"], r["idle"])
        for r in products["NVIDIA-L40S"]["resources"]
    ] == [("nvidia.com/gpu", True, 8, 5)]
    totals = {(r["resource"], r["replicas"]): r["allocatable"] for r in data["totals"]["resources"]}
    assert totals[("nvidia.com/gpu", True)] == 8
    assert totals[("nvidia.com/gpu", False)] == 22 + 8  # A100 and H100, no L40S replicas
    assert products["NVIDIA-H100-80GB-HBM3"]["unschedulable_nodes"] == 1
    assert data["totals"]["nodes"] == 6
    r = researcher_api.get("/api/v1/inventory/summary/", {"cluster": "missing"})
    assert r.status_code == 404 and "cluster" in r.json()


def test_node_list_query_count_is_constant(researcher_api, fleet):
    def count():
        with CaptureQueriesContext(connection) as ctx:
            assert researcher_api.get("/api/v1/nodes/", {"page_size": 100}).status_code == 200
        return len(ctx.captured_queries)

    count()  # the first call records the token's last use
    before = count()
    for i in range(20):
        n = make_node(fleet, f"extra-{i}", driver_version="550.107.02")
        make_pod(n, f"p-{i}")
    assert count() == before


def test_clusters_never_expose_credentials_and_sync_is_admin_only(researcher_api, admin_api, fleet):
    fleet.bearer_token = "secret-token-value"
    fleet.save()
    data = researcher_api.get("/api/v1/clusters/prod/").json()
    assert "secret-token-value" not in str(data) and data["node_count"] == 7
    assert researcher_api.post("/api/v1/clusters/prod/sync/").status_code == 403
    runs = researcher_api.get("/api/v1/clusters/prod/sync-runs/").json()
    assert (runs["count"], runs["results"]) == (0, [])  # paginated like every list


def test_members_do_not_see_how_the_portal_reaches_a_cluster(researcher_api, admin_api, fleet):
    fleet.auth_method, fleet.api_url = "token", "https://10.0.0.7:6443"
    fleet.bearer_token_file, fleet.kubeconfig_path = "/var/run/portal/prod.token", "/etc/kc"
    fleet.missing_permissions = ["list nodes"]
    fleet.save()
    member = researcher_api.get("/api/v1/clusters/prod/").json()
    for name in ("kubeconfig_path", "kubeconfig_context", "api_url", "bearer_token_file"):
        assert member[name] == "", name
    assert member["missing_permissions"] == [] and "/var/run/portal" not in str(member)
    listed = researcher_api.get("/api/v1/clusters/").json()["results"]
    assert "/etc/kc" not in str(listed) and "10.0.0.7" not in str(listed)
    admin = admin_api.get("/api/v1/clusters/prod/").json()
    assert admin["bearer_token_file"] == "/var/run/portal/prod.token"
    assert admin["api_url"] == "https://10.0.0.7:6443" and admin["missing_permissions"]


def test_openapi_schema_and_docs(researcher_api, client, researcher):
    r = researcher_api.get("/api/schema/", {"format": "json"})
    assert r.status_code == 200
    paths = r.json()["paths"]
    for p in [
        "/api/v1/nodes/",
        "/api/v1/clusters/",
        "/api/v1/inventory/summary/",
        "/api/v1/auth/token/",
    ]:
        assert p in paths
    client.force_login(researcher)
    assert client.get("/api/docs/").status_code == 200
