"""The Kueue backend through the simulated cluster's Kueue (official client over HTTP, the
portal's RBAC from deploy/): grants become a team's ClusterQueue nominal quota per class,
a researcher's pod is admitted on the right class and the next one queues, borrowing in a
cohort, a time-bound grant's end shrinks the quota, hand edits are reverted."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
import time_machine
from django.core.exceptions import ValidationError
from django.utils import timezone
from kubernetes import client, config

from inventory.models import Cluster, GpuClass
from inventory.sync import sync_cluster
from quotas import kueue, services
from quotas.apply import run_operation
from quotas.kueue_apply import set_queue_settings
from quotas.models import AuditEvent, Operation, TeamQueue
from quotas.services import RequestData
from quotas.tasks import process_grant_windows, reconcile_quotas
from tests.inventory.test_sync import node_body, pod_body
from tests.quotas.builders import make_grant, make_namespace, make_team, make_user

pytestmark = pytest.mark.django_db
GPU = "nvidia.com/gpu"
G, V = "kueue.x-k8s.io", "v1beta2"
H100, V100 = "NVIDIA-H100-80GB-HBM3", "Tesla-V100-SXM2-16GB"
WHY = "training run for the class-aware paper"


def wait_until(fn, timeout=15.0):
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


@pytest.fixture
def kq(sim, sim_api, sim_cluster):
    """A Kueue cluster with one H100 and one V100 node, teams vision and nlp."""
    sim_api.create_node(node_body("h100-0", product=H100))
    sim_api.create_node(node_body("v100-0", product=V100))
    for name in ("vision", "nlp"):
        sim_api.create_namespace({"metadata": {"name": name}})
    assert sync_cluster(sim_cluster).status == "succeeded"
    Cluster.objects.filter(pk=sim_cluster.pk).update(enforcement=Cluster.Enforcement.KUEUE)
    sim_cluster.refresh_from_db()
    alice, admin = make_user("alice"), make_user("root", staff=True)
    vision, nlp = make_team("vision", members=[alice]), make_team("nlp", members=[alice])
    api = config.new_client_from_config(config_file=str(sim.admin_kubeconfig_path))
    yield {
        "core": sim_api, "crd": client.CustomObjectsApi(api), "cluster": sim_cluster,
        "alice": alice, "admin": admin, "vision": vision, "nlp": nlp,
        "ns": make_namespace(vision, sim_cluster, "vision"),
        "nlp_ns": make_namespace(nlp, sim_cluster, "nlp"),
        "h100": GpuClass.objects.get(cluster=sim_cluster, selector__contains={
            "nvidia.com/gpu.product": H100}),
        "v100": GpuClass.objects.get(cluster=sim_cluster, selector__contains={
            "nvidia.com/gpu.product": V100}),
    }  # fmt: skip
    api.close()


def approve(k, amount, cls, ns="ns", team="vision", **kw):
    data = RequestData(team=k[team], namespace=k[ns], resource=GPU, amount=amount,
                       gpu_class=k[cls], justification=WHY, **kw)  # fmt: skip
    return services.approve(services.submit(k["alice"], data), k["admin"])


def run_pending():
    for op in Operation.objects.filter(status="pending").order_by("created_at"):
        assert run_operation(op.pk) == "succeeded", op.last_error


def cq(k, team="vision"):
    return k["crd"].get_cluster_custom_object(G, V, "clusterqueues", f"gpu-portal-{team}")


def nominal(k, cls, team="vision"):
    """{flavor: nominalQuota of nvidia.com/gpu} of the team's ClusterQueue."""
    group = cq(k, team)["spec"]["resourceGroups"][0]
    return {
        f["name"]: next(r["nominalQuota"] for r in f["resources"] if r["name"] == GPU)
        for f in group["flavors"]
    }[kueue.flavor_name(k[cls])]


def queued_pod(k, name, gpus, ns="vision"):
    body = pod_body(name, None, gpus)
    body["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1"
    return k["core"].create_namespaced_pod(ns, body)


def workload_of(k, pod, ns="vision"):
    items = k["crd"].list_namespaced_custom_object(G, V, ns, "workloads")["items"]
    return next((w for w in items if w["metadata"]["ownerReferences"][0]["name"] == pod), {})


def condition(wl, typ):
    return next((c for c in wl.get("status", {}).get("conditions", []) if c["type"] == typ), {})


def test_grant_admits_a_pod_on_its_class_and_queues_the_next(kq):
    req = approve(kq, 2, "h100")
    run_pending()
    req.refresh_from_db()
    assert req.status == "applied"
    assert req.events.last().note.startswith("Kueue ClusterQueue gpu-portal-vision applied")
    spec = cq(kq)["spec"]
    assert spec["namespaceSelector"] == {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["vision"]}
        ]
    }
    assert nominal(kq, "h100") == "2" and nominal(kq, "v100") == "0"
    assert spec["resourceGroups"][1]["coveredResources"] == ["cpu", "memory"]
    flavor = kq["crd"].get_cluster_custom_object(
        G, V, "resourceflavors", kueue.flavor_name(kq["h100"])
    )
    assert flavor["spec"]["nodeLabels"] == {"nvidia.com/gpu.product": H100}
    lq = kq["crd"].get_namespaced_custom_object(G, V, "vision", "localqueues", "default")
    assert lq["spec"] == {"clusterQueue": "gpu-portal-vision", "stopPolicy": "None"}

    # A pod without any queue label: LocalQueue "default" catches it; admitted on H100.
    queued_pod(kq, "train-0", 2)
    core = kq["core"]
    bound = wait_until(lambda: core.read_namespaced_pod("train-0", "vision").spec.node_name)
    assert bound == "h100-0"
    pod = core.read_namespaced_pod("train-0", "vision")
    assert pod.spec.node_selector == {"nvidia.com/gpu.product": H100}
    # The next one does not fit the team's 2 H100s (and V100 quota is 0): it waits.
    queued_pod(kq, "train-1", 1)
    wl = wait_until(lambda: condition(workload_of(kq, "train-1"), "QuotaReserved"))
    assert wl["status"] == "False"
    assert "insufficient unused quota for nvidia.com/gpu" in wl["message"]
    assert core.read_namespaced_pod("train-1", "vision").spec.node_name is None

    counts = reconcile_quotas()
    assert counts["reverted"] == counts["recreated"] == 0
    assert counts["created"] == 1  # nlp's namespace gets its queues, with no quota

    def h100_row():  # Kueue writes the ClusterQueue's status a moment after it admits
        reconcile_quotas()
        tq = TeamQueue.objects.get(team=kq["vision"], cluster=kq["cluster"])
        rows = {(r.gpu_class.slug, r.resource): r for r in kueue.class_rows(tq)}
        h = rows[(kq["h100"].slug, GPU)]
        return h if tq.status.get("pending") == 1 and h.used == 2 else None

    h = wait_until(h100_row)
    assert h is not None, kueue.class_rows(TeamQueue.objects.get(team=kq["vision"]))
    tq = TeamQueue.objects.get(team=kq["vision"], cluster=kq["cluster"])
    assert (h.nominal, h.used, h.borrowed) == (2, 2, 0)
    assert tq.status["pending"] == 1 and tq.status["admitted"] == 1
    assert tq.workloads["vision"]["pending"] == {GPU: 1}
    assert tq.workloads["vision"]["admitted"] == {GPU: 2}


def test_class_grant_on_the_other_class_admits_there(kq):
    approve(kq, 1, "h100")
    approve(kq, 4, "v100")
    run_pending()
    queued_pod(kq, "big", 3)  # only the V100 quota holds 3
    core = kq["core"]
    assert wait_until(lambda: core.read_namespaced_pod("big", "vision").spec.node_name) == "v100-0"


def test_borrowing_within_a_cohort_and_its_limit(kq, client):
    approve(kq, 2, "h100")
    approve(kq, 4, "h100", ns="nlp_ns", team="nlp")
    run_pending()
    for team in ("vision", "nlp"):
        set_queue_settings(kq[team], kq["cluster"], kq["admin"], cohort="research")
    run_pending()
    assert cq(kq)["spec"]["cohortName"] == "research"
    queued_pod(kq, "wide", 5)  # 2 own + 3 borrowed from nlp's idle 4
    core = kq["core"]
    assert wait_until(lambda: core.read_namespaced_pod("wide", "vision").spec.node_name)

    def h100_row():  # Kueue writes the ClusterQueue's status a moment after it admits
        reconcile_quotas()
        tq = TeamQueue.objects.get(team=kq["vision"], cluster=kq["cluster"])
        row = next(r for r in kueue.class_rows(tq) if r.gpu_class == kq["h100"])
        return row if row.used == 5 else None

    row = wait_until(h100_row)
    assert row is not None
    assert (row.nominal, row.used, row.borrowed) == (2, 5, 3)
    audit = AuditEvent.objects.filter(action="kueue.queue_settings").first()
    assert audit.after == {"cohort": "research", "borrowing_limit": None, "lending_limit": None,
                           "fair_weight": None, "reclaim_within_cohort": "Never",
                           "borrow_within_cohort": "Never"}  # fmt: skip

    # The team sees that what it borrows may be taken back once nlp reclaims (#25 s. 3).
    client.force_login(kq["alice"])
    page = client.get("/teams/").content.decode()
    assert (
        "not reclaimed by preemption" in page and "Fair-sharing weight <strong>1</strong>" in page
    )
    set_queue_settings(kq["nlp"], kq["cluster"], kq["admin"], reclaim_within_cohort="Any")
    page = client.get("/teams/").content.decode()
    assert "3 borrowed GPUs may be taken back</strong>: 1 other queue of the cohort" in page
    # The approval queue shows the cohort's state for a request in it.
    services.submit(
        kq["alice"],
        RequestData(
            team=kq["vision"],
            namespace=kq["ns"],
            resource=GPU,
            amount=1,
            gpu_class=kq["h100"],
            justification=WHY,
        ),
    )
    client.force_login(kq["admin"])
    queue = client.get("/admin-queue/").content.decode()
    assert (
        "<code>research</code>: 2 queues; in this class quota 6, held 5 (3 borrowed); "
        "1 reclaims lent quota by preemption"
    ) in queue

    # A borrowing limit of 0 keeps the next one to the team's own (used up) quota.
    set_queue_settings(kq["vision"], kq["cluster"], kq["admin"], borrowing_limit=0)
    run_pending()
    queued_pod(kq, "more", 1)
    wl = wait_until(lambda: condition(workload_of(kq, "more"), "QuotaReserved"))
    assert wl["status"] == "False"


def test_limits_without_a_cohort_are_refused(kq):
    with pytest.raises(ValidationError) as err:
        set_queue_settings(kq["vision"], kq["cluster"], kq["admin"], borrowing_limit=2)
    assert "need a cohort" in err.value.message_dict["cohort"][0]
    with pytest.raises(ValidationError):
        set_queue_settings(kq["vision"], kq["cluster"], kq["admin"], cohort="Not_DNS")
    with pytest.raises(PermissionError):
        set_queue_settings(kq["vision"], kq["cluster"], kq["alice"], cohort="research")


def test_time_bound_grant_shrinks_the_nominal_quota_at_its_end(
    kq, django_capture_on_commit_callbacks
):
    from django.core import mail

    approve(kq, 3, "h100", ends_at=timezone.now() + timedelta(days=2))
    run_pending()
    assert nominal(kq, "h100") == "3"
    queued_pod(kq, "long-run", 3)  # admitted, and still running at the grant's end
    core = kq["core"]
    assert wait_until(lambda: core.read_namespaced_pod("long-run", "vision").spec.node_name)
    assert wait_until(lambda: reconcile_quotas() and kueue.class_rows(
        TeamQueue.objects.get(team=kq["vision"]))[0].used == 3)  # fmt: skip
    mail.outbox.clear()
    with time_machine.travel(timezone.now() + timedelta(days=2, minutes=1)):
        with django_capture_on_commit_callbacks(execute=True):
            counts = process_grant_windows()
        assert counts["expired"] == 1
        run_pending()
    assert nominal(kq, "h100") == "0"
    # Kueue keeps the admitted pod: nothing waits for an admin, and everyone is told so.
    assert core.read_namespaced_pod("long-run", "vision").status.phase == "Running"
    assert not Operation.objects.filter(status="confirm").exists()
    (expired,) = [m for m in mail.outbox if "has ended" in m.subject]
    assert "below what its admitted workloads hold" in expired.body
    assert "they keep running" in expired.body
    event = AuditEvent.objects.get(action="grant.expired")
    assert event.note.startswith("below what admitted workloads hold")


def test_hand_edited_cluster_queue_is_reverted(kq):
    approve(kq, 2, "h100")
    run_pending()
    body = cq(kq)
    for f in body["spec"]["resourceGroups"][0]["flavors"]:
        for r in f["resources"]:
            r["nominalQuota"] = "8"
    kq["crd"].patch_cluster_custom_object(  # kubectl edit, as a merge patch
        G, V, "clusterqueues", "gpu-portal-vision", {"spec": body["spec"]}
    )
    counts = reconcile_quotas()
    assert counts["reverted"] == 1
    event = AuditEvent.objects.get(action="kueue.drift_reverted")
    assert "edited outside the portal" in event.note
    run_pending()
    assert nominal(kq, "h100") == "2" and nominal(kq, "v100") == "0"
    # Deleted LocalQueue: recreated.
    kq["crd"].delete_namespaced_custom_object(G, V, "vision", "localqueues", "default")
    assert reconcile_quotas()["recreated"] == 1
    run_pending()
    assert kq["crd"].get_namespaced_custom_object(G, V, "vision", "localqueues", "default")
    assert reconcile_quotas()["reverted"] == 0


def test_requests_must_name_a_class_and_switching_needs_classed_grants(kq):
    data = RequestData(team=kq["vision"], namespace=kq["ns"], resource=GPU, amount=1,
                       justification=WHY)  # fmt: skip
    with pytest.raises(ValidationError) as err:
        services.submit(kq["alice"], data)
    assert "enforces GPU classes through Kueue" in err.value.message_dict["gpu_class"][0]
    with pytest.raises(ValidationError):
        services.set_baseline(kq["ns"], GPU, 2, kq["admin"])
    cluster = kq["cluster"]
    cluster.full_clean()  # Kueue with only per-class grants: fine
    cluster.enforcement = Cluster.Enforcement.RESOURCEQUOTA
    cluster.save()
    make_grant(kq["ns"], 2)  # any class
    cluster.enforcement = Cluster.Enforcement.KUEUE
    with pytest.raises(ValidationError) as err:
        cluster.full_clean()
    assert "1 active or upcoming grant(s) on this cluster name no class" in str(err.value)


def test_switching_from_resource_quota_retires_the_portal_quota(kq):
    cluster = kq["cluster"]
    Cluster.objects.filter(pk=cluster.pk).update(enforcement="resourcequota")
    approve(kq, 2, "h100")
    run_pending()
    core = kq["core"]
    assert core.read_namespaced_resource_quota("gpu-portal-quota", "vision")
    Cluster.objects.filter(pk=cluster.pk).update(enforcement="kueue")
    assert reconcile_quotas()["created"] == 2  # no ClusterQueue yet (vision and nlp)
    run_pending()
    assert nominal(kq, "h100") == "2"
    names = [q.metadata.name for q in core.list_namespaced_resource_quota("vision").items]
    assert "gpu-portal-quota" not in names
    assert AuditEvent.objects.filter(action="quota.retired_for_kueue").count() == 1


def test_team_page_shows_the_queue_per_class_and_what_waits(kq, client):
    from django.urls import reverse

    approve(kq, 2, "h100")
    run_pending()
    queued_pod(kq, "train-0", 2)
    core = kq["core"]
    assert wait_until(lambda: core.read_namespaced_pod("train-0", "vision").spec.node_name)
    queued_pod(kq, "train-1", 2)
    assert wait_until(lambda: condition(workload_of(kq, "train-1"), "QuotaReserved"))
    sync_cluster(kq["cluster"])  # the inventory sees the gated pod: pending demand

    def counted():  # Kueue writes the ClusterQueue's status a moment after it admits
        reconcile_quotas()
        status = TeamQueue.objects.get(team=kq["vision"]).status
        return status.get("admitted") == 1 and status.get("pending") == 1

    assert wait_until(counted)
    client.force_login(kq["alice"])
    page = client.get(reverse("quotas:teams")).content.decode()
    assert "Kueue queue <code>gpu-portal-vision</code>" in page
    row = page[page.index(f'data-class="{kq["h100"].slug}"') :].split("</tr>")[0]
    assert '<td class="num">2</td><td class="num" data-held>2</td>' in row
    assert "1 workload admitted, 1 waiting" in page
    assert "<strong data-pending>2</strong>" in page and "in 1 pending pod (queued" in page
    assert "NVIDIA H100 80GB HBM3</small>" in page  # the grant's class in the grants table
    assert "effective limit" not in page.split("Kueue queue")[1]  # no ResourceQuota here

    # Releasing below what admitted workloads hold: the page says what Kueue does.
    client.force_login(kq["admin"])
    grant = kq["ns"].grants.get()
    page = client.get(reverse("quotas:grant-release", args=[grant.pk])).content.decode()
    assert 'data-lowering="kueue"' in page
    assert (
        f"{kueue.flavor_name(kq['h100'])}/{GPU}</code> would be 0 while admitted workloads" in page
    )
    assert "Kueue keeps the admitted workloads running" in page
    assert grant.gpu_class == kq["h100"]
    url = reverse("quotas:grant-release", args=[grant.pk])
    assert client.post(url, {"justification": "The paper is out."}).status_code == 302
    event = AuditEvent.objects.get(action="grant.released")
    assert event.note.startswith("below what admitted workloads hold: they keep running")
    assert f"{kueue.flavor_name(kq['h100'])}/{GPU}" in event.note


def test_team_queue_api_is_team_scoped_and_admins_set_the_cohort(kq):
    from tests.conftest import api_for

    approve(kq, 2, "h100")
    run_pending()

    def active():  # Kueue's controller writes the queue's status a moment after the apply
        reconcile_quotas()
        return TeamQueue.objects.get(team=kq["vision"]).status.get("active")

    assert wait_until(active)
    alice, admin = api_for(kq["alice"]), api_for(kq["admin"])
    outsider = api_for(make_user("eve"))
    body = alice.get("/api/v1/team-queues/").json()
    assert {q["team"] for q in body["results"]} == {"vision", "nlp"}  # alice is in both
    assert outsider.get("/api/v1/team-queues/").json()["results"] == []
    vision = next(q for q in body["results"] if q["team"] == "vision")
    assert vision["cluster_queue"] == "gpu-portal-vision" and vision["active"] is True
    (row,) = vision["classes"]
    assert row == {"gpu_class": kq["h100"].slug, "gpu_class_name": kq["h100"].name,
                   "resource": GPU, "nominal": 2, "used": 0, "borrowed": 0}  # fmt: skip
    url = f"/api/v1/team-queues/{vision['id']}/"
    assert outsider.get(url).status_code == 404
    assert alice.patch(url, {"cohort": "research"}, format="json").status_code == 403
    bad = admin.patch(url, {"borrowing_limit": 2}, format="json")
    assert bad.status_code == 400 and "need a cohort" in str(bad.json())
    assert admin.patch(url, {"cohort": "Not_DNS"}, format="json").status_code == 400
    ok = admin.patch(url, {"cohort": "research", "lending_limit": 1}, format="json")
    assert ok.status_code == 200 and ok.json()["cohort"] == "research"
    run_pending()
    entry = cq(kq)["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    assert cq(kq)["spec"]["cohortName"] == "research"
    assert (entry["nominalQuota"], entry["lendingLimit"]) == ("2", "1")


def test_fair_sharing_weight_and_preemption_reach_the_cluster_queue(kq):
    """Admins set the weight and preemption policies (#25 section 3); the real Kueue
    (its CRD's CEL rule and webhook) takes what the portal takes and refuses what it
    refuses; a hand edit is drift and is reverted."""
    from decimal import Decimal

    from kubernetes.client.exceptions import ApiException

    approve(kq, 2, "h100")
    run_pending()
    set_queue_settings(kq["vision"], kq["cluster"], kq["admin"], cohort="research",
                       fair_weight=Decimal("2.500"), reclaim_within_cohort="Any",
                       borrow_within_cohort="LowerPriority")  # fmt: skip
    run_pending()
    spec = cq(kq)["spec"]
    assert spec["fairSharing"] == {"weight": "2.5"}
    assert spec["preemption"]["reclaimWithinCohort"] == "Any"
    assert spec["preemption"]["borrowWithinCohort"]["policy"] == "LowerPriority"
    audit = AuditEvent.objects.filter(action="kueue.queue_settings").first()
    assert audit.after["fair_weight"] == "2.5" and audit.after["reclaim_within_cohort"] == "Any"

    # Kueue's rule, refused by the portal before anything is sent ...
    with pytest.raises(ValidationError) as err:
        set_queue_settings(kq["vision"], kq["cluster"], kq["admin"],
                           reclaim_within_cohort="Never")  # fmt: skip
    assert "reclaimWithinCohort=Never" in err.value.message_dict["borrow_within_cohort"][0]
    # ... and by the cluster itself (the referee) when sent by hand.
    body = cq(kq)
    body["spec"]["preemption"] = {"reclaimWithinCohort": "Never",
                                  "borrowWithinCohort": {"policy": "LowerPriority"}}  # fmt: skip
    with pytest.raises(ApiException) as refused:
        kq["crd"].replace_cluster_custom_object(G, V, "clusterqueues", "gpu-portal-vision", body)
    assert refused.value.status in (400, 422)
    assert "reclaimWithinCohort=Never" in refused.value.body

    # A weight back to Kueue's default: the field is dropped; a hand edit is reverted.
    set_queue_settings(kq["vision"], kq["cluster"], kq["admin"], fair_weight=None)
    run_pending()
    assert "fairSharing" not in cq(kq)["spec"]
    body = cq(kq)
    body["spec"]["preemption"]["reclaimWithinCohort"] = "LowerPriority"
    kq["crd"].replace_cluster_custom_object(G, V, "clusterqueues", "gpu-portal-vision", body)
    reconcile_quotas()
    run_pending()
    assert cq(kq)["spec"]["preemption"]["reclaimWithinCohort"] == "Any"


def test_admins_set_fair_sharing_through_the_api(kq):
    from tests.conftest import api_for

    approve(kq, 1, "h100")
    run_pending()
    tq = TeamQueue.objects.get(team=kq["vision"], cluster=kq["cluster"])
    url = f"/api/v1/team-queues/{tq.pk}/"
    admin, alice = api_for(kq["admin"]), api_for(kq["alice"])
    assert alice.patch(url, {"fair_weight": "3"}, format="json").status_code == 403
    bad = admin.patch(url, {"borrow_within_cohort": "LowerPriority"}, format="json")
    assert bad.status_code == 400 and "borrow_within_cohort" in bad.json()
    assert admin.patch(url, {"fair_weight": "-1"}, format="json").status_code == 400
    ok = admin.patch(url, {"fair_weight": "0.5", "reclaim_within_cohort": "LowerPriority"},
                     format="json")  # fmt: skip
    assert ok.status_code == 200, ok.json()
    body = ok.json()
    assert (body["fair_weight"], body["reclaim_within_cohort"]) == ("0.500", "LowerPriority")
    assert body["weighted_share"] is None  # fair sharing is off in this Kueue's configuration
    seen = alice.get(url).json()  # the team sees its weight and policies
    assert seen["fair_weight"] == "0.500" and seen["borrow_within_cohort"] == "Never"
    run_pending()
    assert cq(kq)["spec"]["fairSharing"] == {"weight": "0.5"}
