"""The connection preflight against the simulated cluster, as the portal's ServiceAccount
with deploy/kubernetes/rbac.yaml (tests/kubesim.py).

A missing permission is made the way it happens on a real cluster: the admin edits the
portal's ClusterRole (kubernetes RBAC is re-evaluated on every request,
plugin/pkg/auth/authorizer/rbac/rbac.go), then the preflight, /readyz, the periodic
re-check and ``manage.py check_cluster`` must all name it.
"""

from __future__ import annotations

import io
import socket

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone
from kubernetes import client, config

from inventory.kube.permissions import PERMISSIONS
from inventory.models import Cluster
from inventory.preflight import run_preflight
from inventory.tasks import recheck_permissions
from quotas.models import AuditEvent, Team, TeamNamespace
from tests import kubesim

pytestmark = pytest.mark.django_db

FLEET = {
    "nodes": [
        {
            "name": "a100-{i:02d}",
            "count": 2,
            "gpu": {"product": "NVIDIA-A100-SXM4-80GB", "count": 8},
        },
        {"name": "cpu-00"},
    ],
    "namespaces": [{"name": "ml-vision"}, {"name": "genomics"}],
    "quotas": [
        {"name": "gpu-quota", "namespace": "ml-vision", "hard": {"requests.nvidia.com/gpu": 16}},
        {"name": "cpu-only", "namespace": "genomics", "hard": {"requests.cpu": 100}},
    ],
    "gpuOperator": {"migStrategy": "mixed", "migConfigName": "gpu-quota-portal-mig-config"},
}


@pytest.fixture
def fleet_sim(tmp_path):
    sim = kubesim.start(FLEET, tmp_path)
    yield sim
    sim.stop()


@pytest.fixture
def cluster(fleet_sim):
    """A cluster whose inventory is fresh, so /readyz degrades only for permissions."""
    now = timezone.now()
    return Cluster.objects.create(
        slug="sim",
        name="Simulated",
        auth_method=Cluster.AuthMethod.KUBECONFIG,
        kubeconfig_path=str(fleet_sim.kubeconfig_path),
        sync_status=Cluster.SyncStatus.OK,
        last_sync_at=now,
        last_success_at=now,
    )


def admin_api(sim) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(sim.admin_kubeconfig_path))


def drop_verb(sim, resource: str, verb: str) -> None:
    """As the cluster admin, remove one verb from the portal's ClusterRole (a rule left with
    no verb goes: the API server refuses one, pkg/apis/rbac/validation ValidatePolicyRule)."""
    with admin_api(sim) as api:
        rbac = client.RbacAuthorizationV1Api(api)
        role = rbac.read_cluster_role("gpu-quota-portal")
        for rule in role.rules:
            if resource in rule.resources and verb in rule.verbs:
                rule.verbs = [v for v in rule.verbs if v != verb]
        role.rules = [rule for rule in role.rules if rule.verbs]
        rbac.replace_cluster_role("gpu-quota-portal", role)


def finding(report, check):
    return next(f for f in report.findings if f.check == check)


def test_everything_the_portal_needs_is_there_with_deploy_rbac(cluster):
    report = run_preflight(cluster)
    levels = {f.check: f.level for f in report.findings}
    assert levels["version"] == "ok"
    assert report.server_version.startswith("v1.")
    assert kubesim.PORTAL_USER in finding(report, "identity").summary
    perms = finding(report, "permissions")
    assert perms.level == "ok", [i for i in perms.items if not i["granted"]]
    assert len(perms.items) == len(PERMISSIONS)
    assert levels["gpu-operator"] == "ok"
    assert levels["mig-strategy"] == "ok"
    assert finding(report, "gfd").summary == "2 GPU nodes, all with GFD labels."
    assert report.missing_permissions == []


def test_namespaced_permissions_are_asked_where_they_apply(cluster, settings):
    team = Team.objects.create(slug="vision", name="Vision")
    TeamNamespace.objects.create(team=team, cluster=cluster, name="ml-vision")
    items = {i["key"]: i for i in finding(run_preflight(cluster), "permissions").items}
    assert items["list resourcequotas in team namespace"]["namespace"] == "ml-vision"
    operator = [i for i in items.values() if i["resource"] == "configmaps"]
    assert {i["namespace"] for i in operator} == {settings.MIG_CONFIGMAP_NAMESPACE}
    assert items["list nodes"]["namespace"] == ""


def test_a_lost_permission_is_named_with_the_rule_to_add(cluster, fleet_sim, client, admin_user):
    drop_verb(fleet_sim, "nodes", "patch")
    report = run_preflight(cluster)
    perms = finding(report, "permissions")
    assert perms.level == "error"
    assert report.status == "error"
    assert report.missing_permissions == ["patch nodes"]
    missing = next(i for i in perms.items if not i["granted"])
    assert missing["rule"] == (
        '# ClusterRole gpu-quota-portal\n- apiGroups: [""]\n  resources: ["nodes"]\n'
        '  verbs: ["patch"]'
    )
    assert "Node labels and cordon" in perms.summary

    # check_cluster prints the same, stores it and exits 1
    out = io.StringIO()
    with pytest.raises(SystemExit) as exit_info:
        call_command("check_cluster", "sim", stdout=out, stderr=io.StringIO())
    assert exit_info.value.code == 1
    text = out.getvalue()
    assert "Cluster sim (Simulated): error" in text
    assert "missing: patch nodes (Node labels and cordon)" in text
    assert 'verbs: ["patch"]' in text

    # /readyz degrades (200) and names it, to an admin
    client.force_login(admin_user)
    body = client.get("/readyz").json()
    assert body["status"] == "degraded"
    assert body["clusters"]["sim"]["missing_permissions"] == ["patch nodes"]

    # the cluster page shows it
    page = client.get(reverse("inventory:cluster", args=["sim"])).content.decode()
    assert "Missing permissions" in page
    assert "patch nodes" in page
    assert "verbs: [&quot;patch&quot;]" in page


def test_the_periodic_recheck_finds_a_lost_and_a_restored_permission(
    cluster, fleet_sim, client, admin_user
):
    client.force_login(admin_user)  # /readyz names the permissions to an admin
    assert recheck_permissions() == 0
    assert client.get("/readyz").json()["status"] == "ok"
    drop_verb(fleet_sim, "pods", "list")  # the ClusterRole grants it everywhere: both go
    assert recheck_permissions() == 1
    cluster.refresh_from_db()
    lost = ["list pods", "list pods in team namespace"]
    assert cluster.missing_permissions == lost
    assert cluster.permissions_checked_at is not None
    body = client.get("/readyz").json()
    assert body["status"] == "degraded"
    assert body["clusters"]["sim"]["missing_permissions"] == lost
    fleet_sim.apply_file(kubesim.DEPLOY / "rbac.yaml")  # the admin puts the rule back
    assert recheck_permissions() == 0
    assert client.get("/readyz").json()["status"] == "ok"


def test_check_cluster_all_passes_and_records_the_run(cluster):
    out = io.StringIO()
    call_command("check_cluster", "--all", stdout=out)  # warnings only: no SystemExit
    # the one warning: the ConfigMap the ClusterPolicy names is created on the first MIG run
    assert "Cluster sim (Simulated): warning" in out.getvalue()
    assert "[warning] mig-config" in out.getvalue()
    assert "[ok]      permissions   All" in out.getvalue()
    cluster.refresh_from_db()
    assert cluster.preflight_status == "warning"
    assert cluster.preflight["findings"][0]["check"] == "version"
    event = AuditEvent.objects.get(action="cluster.preflight")
    assert event.actor_name == "system"


def test_check_cluster_refuses_unknown_and_missing_names(db):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="Unknown cluster"):
        call_command("check_cluster", "nope")
    with pytest.raises(CommandError, match="--all"):
        call_command("check_cluster")


def test_gpu_nodes_without_gfd_labels_are_named(cluster, fleet_sim):
    # as on a node where GFD never ran: the device plugin advertises GPUs, no labels
    with admin_api(fleet_sim) as api:
        patch = {"metadata": {"labels": {"nvidia.com/gpu.product": None}}}
        client.CoreV1Api(api).patch_node("a100-01", patch)
    gfd = finding(run_preflight(cluster), "gfd")
    assert gfd.level == "warning"
    assert "1 of 2 GPU nodes" in gfd.summary
    assert "a100-01" in gfd.summary
    assert gfd.items == [{"node": "a100-01"}]


def test_foreign_gpu_quotas_and_limit_ranges_are_reported(cluster, fleet_sim, settings):
    with admin_api(fleet_sim) as api:
        core = client.CoreV1Api(api)
        core.create_namespaced_limit_range(
            "genomics",
            {
                "metadata": {"name": "gpu-max"},
                "spec": {"limits": [{"type": "Container", "max": {"nvidia.com/gpu": "2"}}]},
            },
        )
        # the portal's own quota is not an outside limit
        core.create_namespaced_resource_quota(
            "ml-vision",
            {
                "metadata": {"name": settings.QUOTA_NAME},
                "spec": {"hard": {"requests.nvidia.com/gpu": "4"}},
            },
        )
    report = run_preflight(cluster, ["ml-vision", "genomics"])
    limits = finding(report, "limits")
    assert limits.level == "warning"
    assert {(i["namespace"], i["kind"], i["name"]) for i in limits.items} == {
        ("ml-vision", "ResourceQuota", "gpu-quota"),
        ("genomics", "LimitRange", "gpu-max"),
    }
    assert "docs/quotas.md" in limits.fix
    assert report.namespaces == ["genomics", "ml-vision"]


@pytest.mark.parametrize(
    ("operator", "check", "level", "says"),
    [
        # the simulator serves the CRD always; `false` installs no ClusterPolicy
        (False, "gpu-operator", "warning", "no ClusterPolicy"),
        ({"migStrategy": "none"}, "mig-strategy", "warning", "MIG strategy none"),
        ({"migStrategy": "mixed"}, "mig-config", "warning", "spec.migManager.config.name"),
        (
            {"migConfigName": "other-config"},
            "mig-config",
            "warning",
            "MIG_CONFIGMAP_NAME=other-config",
        ),
    ],
)
def test_gpu_operator_findings(tmp_path, operator, check, level, says):
    sim = kubesim.start({**FLEET, "gpuOperator": operator}, tmp_path)
    try:
        cluster = Cluster(
            slug="op",
            name="Op",
            auth_method=Cluster.AuthMethod.KUBECONFIG,
            kubeconfig_path=str(sim.kubeconfig_path),
        )
        report = run_preflight(cluster)
    finally:
        sim.stop()
    found = finding(report, check)
    assert found.level == level
    assert says in found.summary + found.fix
    assert report.status == "warning"  # no GPU Operator: MIG fails, the rest works


def test_the_portal_configmap_named_and_present_is_ok(cluster, fleet_sim, settings):
    report = run_preflight(cluster)
    assert finding(report, "mig-config").level == "warning"  # named, not created yet
    with admin_api(fleet_sim) as api:
        client.CoreV1Api(api).create_namespaced_config_map(
            settings.MIG_CONFIGMAP_NAMESPACE,
            {
                "metadata": {"name": settings.MIG_CONFIGMAP_NAME},
                "data": {"config.yaml": "version: v1\n"},
            },
        )
    mig = finding(run_preflight(cluster), "mig-config")
    assert mig.level == "ok"
    assert mig.summary == f"mig-manager reads ConfigMap gpu-operator/{settings.MIG_CONFIGMAP_NAME}."


def test_an_unreachable_cluster_is_one_clear_error(db, tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cluster = Cluster(
        slug="gone",
        name="Gone",
        auth_method=Cluster.AuthMethod.TOKEN,
        api_url=f"https://127.0.0.1:{port}",
        bearer_token="x",
    )
    report = run_preflight(cluster)
    assert [f.check for f in report.findings] == ["version"]
    assert report.status == "error"
    assert report.findings[0].summary.startswith("Cannot connect: Cannot reach the API server")


def test_a_wrong_token_is_a_clear_error(db, fleet_sim):
    cluster = Cluster(
        slug="bad",
        name="Bad",
        auth_method=Cluster.AuthMethod.TOKEN,
        api_url=fleet_sim.url.replace("http://", "https://", 1),
        bearer_token="not-a-token",
        ca_cert=fleet_sim.ca_pem,
    )
    report = run_preflight(cluster)
    assert report.status == "error"
    assert report.findings[0].summary.startswith("Cannot connect: HTTP 401 Unauthorized")
