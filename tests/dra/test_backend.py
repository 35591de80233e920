"""The DRA backend (quotas/dra.py) on the real control plane, with the fake DRA driver of the
fleet (gpuemu/dra.py) and the portal's own RBAC: the inventory reads the driver's devices
and the claims that hold them; an approved grant becomes a DeviceClass per class and a
ResourceQuota counting devices per DeviceClass; the API server then allocates, admits and
refuses claims in its own words (kubernetes ``pkg/quota/v1/evaluator/core/resource_claims.go``).
"""

from __future__ import annotations

import pytest

from devstack.kubeapi import KubeError, wait_for
from inventory.models import Cluster, GpuClass, GpuPod, Node, NodeResource
from inventory.sync import sync_cluster
from quotas import dra, services
from quotas.apply import run_operation
from quotas.models import Operation
from quotas.services import RequestData
from tests import kubesim
from tests.dra.test_driver import FLEET, claim, pod_with_claim, running
from tests.quotas.builders import make_namespace, make_team, make_user

pytestmark = pytest.mark.django_db
GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-1g.10gb"
H100, A100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"
WHY = "per-model quota on the DRA cluster"


@pytest.fixture
def dra_cluster(tmp_path):
    sim = kubesim.start(FLEET, tmp_path)
    wait_for(lambda: len(sim.api.list("resourceslices")) == 3, what="the driver's slices")
    cluster = Cluster.objects.create(
        slug="dra", name="DRA", auth_method=Cluster.AuthMethod.KUBECONFIG,
        kubeconfig_path=str(sim.kubeconfig_path), enforcement=Cluster.Enforcement.DRA,
    )  # fmt: skip
    assert sync_cluster(cluster).status == "succeeded", cluster.last_error
    alice, admin = make_user("alice"), make_user("root", staff=True)
    team = make_team("vision", members=[alice])
    yield {"sim": sim, "api": sim.api, "cluster": cluster, "alice": alice, "admin": admin,
           "team": team, "ns": make_namespace(team, cluster, "team")}  # fmt: skip
    sim.stop()


def cls_of(k, product: str) -> GpuClass:
    return GpuClass.objects.get(cluster=k["cluster"], selector={"nvidia.com/gpu.product": product})


def approve(k, amount, product, resource=GPU):
    data = RequestData(team=k["team"], namespace=k["ns"], resource=resource, amount=amount,
                       gpu_class=cls_of(k, product), justification=WHY)  # fmt: skip
    req = services.approve(services.submit(k["alice"], data), k["admin"])
    for op in Operation.objects.filter(status="pending").order_by("created_at"):
        assert run_operation(op.pk) == "succeeded", Operation.objects.get(pk=op.pk).last_error
    return req


def test_the_inventory_counts_the_drivers_devices(dra_cluster):
    k = dra_cluster
    rows = {
        (r.node.name, r.resource): (r.capacity, r.allocatable)
        for r in NodeResource.objects.filter(node__cluster=k["cluster"]).select_related("node")
    }
    assert rows == {("h100-0", GPU): (8, 8), ("a100-0", GPU): (8, 8), ("mig-0", MIG): (56, 56)}
    h100 = Node.objects.get(cluster=k["cluster"], name="h100-0")
    assert (h100.gpu_product, h100.gpu_product_name, h100.gpu_count) == (
        H100, "NVIDIA H100 80GB HBM3", 8,
    )  # fmt: skip
    assert h100.gpu_class == cls_of(k, H100)
    assert cls_of(k, A100).resources == [GPU, MIG]  # whole GPUs on a100-0, MIG on mig-0
    assert sorted(k["cluster"].__class__.objects.get(pk=k["cluster"].pk).dra_other_classes) == [
        "gpu.nvidia.com", "mig.nvidia.com",
    ]  # fmt: skip


def test_a_grant_is_enforced_per_model_by_the_api_server(dra_cluster):
    k = dra_cluster
    api, h100, a100 = k["api"], cls_of(k, H100), cls_of(k, A100)
    approve(k, 4, H100)
    h100_dc = dra.device_class_name(h100, GPU)
    quota = api.get("resourcequotas", "gpu-portal-quota", "team")
    assert quota["spec"]["hard"] == {
        dra.quota_key(h100_dc): "4",
        dra.quota_key(dra.device_class_name(a100, GPU)): "0",
        dra.quota_key(dra.device_class_name(a100, MIG)): "0",
        "gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "0",
        "mig.nvidia.com.deviceclass.resource.k8s.io/devices": "0",
        "requests.nvidia.com/gpu": "0",
    }
    expression = api.get("deviceclasses", h100_dc)["spec"]["selectors"][0]["cel"]["expression"]
    assert "productName == 'NVIDIA H100 80GB HBM3'" in expression

    # within the grant: allocated on an H100 node, the pod runs, the inventory sees it
    api.create("resourceclaims", claim("two", h100_dc, 2), "team")
    api.create("pods", pod_with_claim("train", "two"), "team")
    running(api, "train")
    assert api.get("pods", "train", "team")["spec"]["nodeName"] == "h100-0"
    assert sync_cluster(k["cluster"]).status == "succeeded"
    pod = GpuPod.objects.get(cluster=k["cluster"], name="train")
    assert (pod.requests, pod.node.name) == ({GPU: 2}, "h100-0")
    held = NodeResource.objects.get(node__name="h100-0", node__cluster=k["cluster"], resource=GPU)
    assert (held.requested, held.idle) == (2, 6)

    # beyond the grant, through the generic class, on a class granted nothing: refused
    wait_for(
        lambda: (
            api.get("resourcequotas", "gpu-portal-quota", "team")["status"]["used"].get(
                dra.quota_key(h100_dc)
            )
            == "2"
        ),
        what="2 devices counted",
    )
    for name, device_class, count, limited in (
        ("three", h100_dc, 3, 4),
        ("any", "gpu.nvidia.com", 1, 0),
        ("a100", dra.device_class_name(a100, GPU), 1, 0),
    ):
        with pytest.raises(KubeError) as refused:
            api.create("resourceclaims", claim(name, device_class, count), "team")
        assert refused.value.status == 403
        assert f"limited: {dra.quota_key(device_class)}={limited}" in str(refused.value)
    # a pod asking for the extended resource would take any model: refused too
    body = pod_with_claim("plain", "x")
    body["spec"].pop("resourceClaims")
    body["spec"]["containers"][0]["resources"] = {"limits": {GPU: "1"}}
    with pytest.raises(KubeError) as plain:
        api.create("pods", body, "team")
    assert "limited: requests.nvidia.com/gpu=0" in str(plain.value)

    # the pod ends: the inventory records its run with the devices it held (showback)
    from inventory.models import PodRun

    api.delete("pods", "train", "team")
    wait_for(lambda: not [p for p in api.list("pods", "team") if p["metadata"]["name"] == "train"],
             what="train gone")  # fmt: skip
    assert sync_cluster(k["cluster"]).status == "succeeded"
    run = PodRun.objects.get(cluster=k["cluster"], name="train")
    assert (run.gpus, run.gpu_class, run.node_name) == (2, h100, "h100-0")


def test_mig_devices_per_profile_a_grant_that_ends_and_the_figures(dra_cluster):
    """A MIG grant covers claims of its profile's DeviceClass; a time-bound grant's end
    lowers the quota while the claims made stay; usable by the team is the quota's own
    arithmetic per class (limit - what its claims hold)."""
    from datetime import timedelta

    import time_machine
    from django.utils import timezone

    from quotas.figures import usable
    from quotas.preview import state
    from quotas.tasks import process_grant_windows
    from tests.quotas.builders import make_grant

    k = dra_cluster
    api, a100, h100 = k["api"], cls_of(k, A100), cls_of(k, H100)
    approve(k, 3, A100, MIG)
    mig_dc = dra.device_class_name(a100, MIG)
    assert api.get("deviceclasses", mig_dc)["metadata"]["annotations"] == {
        "gpu-portal.dev/gpu-class": a100.slug, "gpu-portal.dev/resource": MIG,
    }  # fmt: skip
    api.create("resourceclaims", claim("slices", mig_dc, 2), "team")
    api.create("pods", pod_with_claim("notebook", "slices"), "team")
    running(api, "notebook")
    assert api.get("pods", "notebook", "team")["spec"]["nodeName"] == "mig-0"
    with pytest.raises(KubeError) as beyond:
        api.create("resourceclaims", claim("more", mig_dc, 2), "team")
    assert f"limited: {dra.quota_key(mig_dc)}=3" in str(beyond.value)

    # H100: 2 for good and 3 for a day; a claim of 4 fits while both hold
    approve(k, 2, H100)
    ns = k["ns"]
    make_grant(ns, 3, GPU, gpu_class=h100, days=1)
    from quotas.apply import enqueue_apply

    enqueue_apply(ns, reason="start")
    for op in Operation.objects.filter(status="pending"):
        assert run_operation(op.pk) == "succeeded"
    h100_key = dra.quota_key(dra.device_class_name(h100, GPU))
    assert api.get("resourcequotas", "gpu-portal-quota", "team")["spec"]["hard"][h100_key] == "5"
    api.create("resourceclaims", claim("pair", dra.device_class_name(h100, GPU), 2), "team")
    with time_machine.travel(timezone.now() + timedelta(days=1, minutes=1)):
        assert process_grant_windows()["expired"] == 1
        for op in Operation.objects.filter(status="pending"):
            assert run_operation(op.pk) == "succeeded", Operation.objects.get(pk=op.pk).last_error
    quota = api.get("resourcequotas", "gpu-portal-quota", "team")
    assert quota["spec"]["hard"][h100_key] == "2"
    assert api.get("resourceclaims", "pair", "team")["metadata"]["name"] == "pair"  # stays

    # usable per class = the quota's limit - what the quota counts as used, as the API says
    def counted():
        used = api.get("resourcequotas", "gpu-portal-quota", "team")["status"].get("used", {})
        return used.get(h100_key) == "2" and used.get(dra.quota_key(mig_dc)) == "2" and used

    used = wait_for(counted, what="the quota controller's count")
    assert sync_cluster(k["cluster"]).status == "succeeded"
    from quotas.models import TeamNamespace

    figures = {
        (u.gpu_class.slug, u.resource): (u.limit, u.used, u.usable)
        for u in usable(state(TeamNamespace.objects.get(pk=ns.pk)))
    }
    assert figures[(h100.slug, GPU)] == (2, int(used[h100_key]), 0)
    assert figures[(a100.slug, MIG)] == (3, int(used[dra.quota_key(mig_dc)]), 1)
    assert figures[(a100.slug, GPU)] == (0, 0, 0)


def test_switching_to_dra_needs_per_class_grants(dra_cluster):
    from django.core.exceptions import ValidationError

    from tests.quotas.builders import make_grant

    k = dra_cluster
    cluster = k["cluster"]
    Cluster.objects.filter(pk=cluster.pk).update(enforcement=Cluster.Enforcement.RESOURCEQUOTA)
    cluster.refresh_from_db()
    make_grant(k["ns"], 2)  # any class
    cluster.enforcement = Cluster.Enforcement.DRA
    with pytest.raises(ValidationError) as refused:
        cluster.full_clean()
    assert "DRA enforces quota per GPU class, and 1 active or upcoming grant(s)" in str(
        refused.value
    )


def test_a_device_class_edited_or_deleted_outside_the_portal_is_put_back(dra_cluster):
    from quotas.models import AuditEvent
    from quotas.tasks import reconcile_quotas

    k = dra_cluster
    api, h100 = k["api"], cls_of(k, H100)
    approve(k, 2, H100)
    name = dra.device_class_name(h100, GPU)
    want = api.get("deviceclasses", name)["spec"]["selectors"]
    wide = [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]  # any model
    api.patch("deviceclasses", name, {"spec": {"selectors": wide}})
    api.delete("deviceclasses", dra.device_class_name(cls_of(k, A100), GPU))
    assert reconcile_quotas()["reverted"] == 1
    event = AuditEvent.objects.get(action="dra.device_classes_reverted")
    assert event.before == {
        name: "selector edited", dra.device_class_name(cls_of(k, A100), GPU): "missing",
    }  # fmt: skip
    for op in Operation.objects.filter(status="pending"):
        assert run_operation(op.pk) == "succeeded"
    assert api.get("deviceclasses", name)["spec"]["selectors"] == want
    assert api.get("deviceclasses", dra.device_class_name(cls_of(k, A100), GPU))
    assert reconcile_quotas()["reverted"] == 0


def test_why_a_claim_waits_in_the_clusters_words(dra_cluster, client):
    """A claim from a template that the quota refuses (the resourceclaim controller's
    event), and a claim within the quota that no node's free devices satisfy (the
    scheduler's condition): the waiting page names the class, the amount and what to do."""
    k = dra_cluster
    api, h100 = k["api"], cls_of(k, H100)
    approve(k, 4, H100)
    h100_dc = dra.device_class_name(h100, GPU)
    # outside the portal's namespaces (no quota) another user takes 6 of the 8 H100s
    api.create("namespaces", {"metadata": {"name": "other"}})
    api.create("resourceclaims", claim("six", h100_dc, 6), "other")
    api.create("pods", pod_with_claim("big", "six"), "other")
    running(api, "big", "other")
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "five"},
                "spec": {"spec": claim("x", h100_dc, 5)["spec"]}}  # fmt: skip
    api.create("resourceclaimtemplates", template, "team")
    body = pod_with_claim("over-quota", "x")
    body["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "five"}]
    api.create("pods", body, "team")
    api.create("resourceclaims", claim("three", h100_dc, 3), "team")  # quota 4, 2 free
    api.create("pods", pod_with_claim("no-room", "three"), "team")

    def scheduler_says():
        for c in api.get("pods", "no-room", "team")["status"].get("conditions") or []:
            if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("message"):
                return c["message"]
        return ""

    message = wait_for(scheduler_says, what="the scheduler's verdict on no-room")
    assert sync_cluster(k["cluster"]).status == "succeeded"  # idle now: 2
    client.force_login(k["alice"])

    def items():
        body = client.get("/api/v1/teams/vision/waiting/").json()
        out = {i["name"]: i for i in body["items"]}
        return out if {"over-quota", "no-room"} <= set(out) else None

    found = wait_for(items, what="both waiting items")
    refused = found["over-quota"]
    assert (refused["cause"], refused["resource"], refused["amount"]) == ("quota", GPU, 5)
    assert refused["gpu_class"] == h100.name
    assert (
        f"exceeded quota: gpu-portal-quota, requested: {dra.quota_key(h100_dc)}=5"
        in (refused["message"])
    )
    assert any(s["kind"] == "request" for s in refused["suggestions"])
    waits = found["no-room"]
    assert (waits["cause"], waits["amount"], waits["gpu_class"]) == ("unschedulable", 3, h100.name)
    # the pending claim is pending demand for its class (quotas/demand.py)
    from quotas.demand import pending_demand

    demand = pending_demand([k["ns"]])[(k["ns"].pk, GPU)]
    assert (demand.pods, demand.for_class(h100.pk)) == (1, 3)
    assert waits["message"] == message and "cannot allocate all claims" in message
    assert f"Idle now on {h100.name}: 2 {GPU}; it asks for 3." in waits["explanation"]
    assert any(
        s["kind"] == "class" and dra.device_class_name(cls_of(k, A100), GPU) in s["text"]
        for s in waits["suggestions"]
    )


def test_the_preflight_reads_the_drivers_slices(dra_cluster):
    from inventory.preflight import run_preflight

    report = run_preflight(dra_cluster["cluster"])
    [dra_finding] = [f for f in report.findings if f.check == "dra"]
    assert (dra_finding.level, dra_finding.summary) == (
        "ok", "3 GPU node(s) publish 72 devices through DRA.",
    )  # fmt: skip
    assert not [f for f in report.findings if f.check == "gfd"]


def test_the_snippet_shown_for_a_grant_runs_on_its_class(dra_cluster):
    """The team page's "how to use it" lines for a DRA grant: applied as they are, the
    pod gets a device of the granted model."""
    import yaml

    from quotas.snippets import grant_snippets

    k = dra_cluster
    approve(k, 2, H100)
    ns = k["ns"]
    [snippet] = grant_snippets(ns, list(ns.grants.all()))
    template, pod_part = list(yaml.safe_load_all(snippet.text))
    assert template["spec"]["spec"]["devices"]["requests"][0]["exactly"] == {
        "deviceClassName": dra.device_class_name(cls_of(k, H100), GPU), "count": 1,
    }  # fmt: skip
    api = k["api"]
    api.create("resourceclaimtemplates", template, "team")
    spec = pod_part["spec"]
    spec["containers"][0]["image"] = "cuda"
    api.create("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "snippet"},
                        "spec": spec}, "team")  # fmt: skip
    pod = running(api, "snippet")
    assert pod["spec"]["nodeName"].startswith("h100-")


def test_idle_free_and_usable_equal_the_clusters_devices_and_claims(dra_cluster, client):
    """One truth on a DRA cluster: per class and resource, devices in the driver's slices
    (allocatable), devices allocated to claims (requested), idle, free to grant and usable
    by the team, counted here from the API server alone and compared with the API, the
    fleet page and /metrics."""
    import re
    from collections import Counter

    from django.urls import reverse

    from inventory.sync import sync_cluster

    k = dra_cluster
    api = k["api"]
    approve(k, 4, H100)
    approve(k, 5, A100, MIG)
    h100_dc = dra.device_class_name(cls_of(k, H100), GPU)
    mig_dc = dra.device_class_name(cls_of(k, A100), MIG)
    for name, dc, n in (("h", h100_dc, 3), ("m", mig_dc, 4)):
        api.create("resourceclaims", claim(name, dc, n), "team")
        api.create("pods", pod_with_claim(f"p-{name}", name), "team")
    wait_for(
        lambda: all(p["status"].get("phase") == "Running" for p in api.list("pods", "team")),
        what="both pods Running",
    )
    assert sync_cluster(k["cluster"]).status == "succeeded"

    # the truth: devices per (product, resource) from the slices; allocated ones from claims
    kind = {}
    devices = Counter()
    for s in api.list("resourceslices"):
        for d in s["spec"]["devices"]:
            attrs = {a: next(iter(v.values())) for a, v in d["attributes"].items()}
            res = GPU if attrs["type"] == "gpu" else f"nvidia.com/mig-{attrs['profile']}"
            product = "-".join(attrs["productName"].split())
            kind[(s["spec"]["pool"]["name"], d["name"])] = (product, res)
            devices[(product, res)] += 1
    held = Counter(
        kind[(r["pool"], r["device"])]
        for c in api.list("resourceclaims")
        for r in (c.get("status", {}).get("allocation") or {}).get("devices", {}).get("results", [])
    )
    quota = api.get("resourcequotas", "gpu-portal-quota", "team")["status"]
    granted = {(H100, GPU): 4, (A100, MIG): 5}
    client.force_login(k["admin"])
    classes = client.get("/api/v1/gpu-classes/", {"cluster": "dra"}).json()["results"]
    fleet = client.get(reverse("inventory:fleet")).content.decode()
    metrics = client.get("/metrics").content.decode()
    seen = 0
    for cls in classes:
        product = cls["selector"]["nvidia.com/gpu.product"]
        for row in cls["capacity"]:
            key, r = (product, row["resource"]), row["resource"]
            alloc, req = devices[key], held[key]
            assert (row["allocatable"], row["requested"], row["idle"]) == (alloc, req, alloc - req)
            assert row["free_to_grant"] == alloc - granted.get(key, 0)
            attr = f"dra/{cls['slug']}/{r}"
            idle_html = re.search(rf'data-class-idle="{re.escape(attr)}"[^>]*>\s*(\d+)', fleet)
            assert int(idle_html.group(1)) == alloc - req
            labels = f'cluster="dra",gpu_class="{cls["slug"]}",resource="{r}"'
            assert f"portal_gpu_class_idle{{{labels}}} {float(alloc - req)}" in metrics
            seen += 1
    assert seen == 3  # H100 GPUs, A100 GPUs (a100-0), A100 MIG 1g.10gb (mig-0)
    # usable by the team: the quota's hard - used per DeviceClass, as the API server says
    body = client.get(f"/api/v1/namespaces/{k['ns'].pk}/").json()
    rows = {(u["gpu_class"], u["resource"]): u for u in body["usable"]}
    for dc, product, r in ((h100_dc, H100, GPU), (mig_dc, A100, MIG)):
        key = dra.quota_key(dc)
        truth = int(quota["hard"][key]) - int(quota["used"][key])
        assert rows[(cls_of(k, product).slug, r)]["usable"] == truth


@pytest.mark.django_db(transaction=True)
def test_the_watch_brings_a_pods_claimed_devices_and_its_end(dra_cluster):
    """On a DRA cluster the pod watch reads the claims a pod names when its event comes
    (inventory/podwatch.py DraView): the devices the scheduler allocated are in the portal
    within 2 s of the pod running, with no sync, and leave with the pod."""
    import threading
    import time

    from inventory.models import NamespaceUsage, SyncRun
    from inventory.watch import watch_pods

    k = dra_cluster
    api, cluster = k["api"], k["cluster"]
    stop = threading.Event()
    thread = threading.Thread(target=watch_pods, args=(cluster, stop),
                              kwargs={"timeout_s": 5, "backoff_s": 0.2})  # fmt: skip
    thread.start()
    try:
        wait_for(lambda: SyncRun.objects.filter(cluster=cluster, trigger="watch").exists(),
                 what="the watch's list")  # fmt: skip
        syncs = SyncRun.objects.filter(cluster=cluster).count()
        api.create("resourceclaims", claim("two", "gpu.nvidia.com", 2), "team")
        api.create("pods", pod_with_claim("train", "two"), "team")
        node = running(api, "train")["spec"]["nodeName"]
        began = time.monotonic()
        row = wait_for(
            lambda: GpuPod.objects.filter(name="train", node_name=node).first(),
            timeout=2, interval=0.02, what="the pod in the portal",
        )  # fmt: skip
        assert time.monotonic() - began < 2
        assert row.requests == {GPU: 2} and row.phase == "Running"
        # the node's figure can come with a later event of the pod (a claim read before its
        # allocation reached the API's cache): polled, within the same 2 s
        wait_for(
            lambda: NodeResource.objects.get(node__name=node, resource=GPU).requested == 2,
            timeout=2, interval=0.02, what="the node's requested devices",
        )  # fmt: skip
        usage = NamespaceUsage.objects.get(cluster=cluster, namespace="team", resource=GPU)
        assert (usage.requested, usage.pods) == (2, 1)

        api.delete("pods", "train", "team")
        wait_for(lambda: not GpuPod.objects.filter(name="train").exists(), timeout=5,
                 interval=0.02, what="the pod gone")  # fmt: skip
        assert NodeResource.objects.get(node__name=node, resource=GPU).requested == 0
        assert SyncRun.objects.filter(cluster=cluster).count() == syncs  # no sync did it
    finally:
        stop.set()
        thread.join(20)
    assert not thread.is_alive()
