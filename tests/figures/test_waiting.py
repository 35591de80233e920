"""Why is my job waiting? Each cause made on the real control plane the way a researcher
meets it (a Job refused by a quota, pods the scheduler cannot place, a pod a node holds
but does not start, a workload Kueue queues), then read through the API and the page.

The cluster's own words are asserted as the cluster gives them (the scheduler's condition,
the job controller's event, Kueue's condition), never copied from the portal's code.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest
from django.urls import reverse

from devstack.kubeapi import wait_for
from inventory.models import Cluster

pytestmark = pytest.mark.django_db
GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-3g.40gb"
PRODUCT = "nvidia.com/gpu.product"
H100, L40S, A100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-L40S", "NVIDIA-A100-SXM4-80GB"

FLEET = {
    "nodes": [
        {"name": "h-0", "gpu": {"product": H100, "count": 8}},
        {"name": "l-0", "gpu": {"product": L40S, "count": 4}},
        {"name": "a-0", "gpu": {"product": A100, "count": 8},
         "taints": [{"key": "dedicated", "value": "inference", "effect": "NoSchedule"}]},
        # no kubelet answers for it: a pod bound there stays Pending
        {"name": "v-down", "ready": False, "gpu": {"product": "Tesla-V100-SXM2-16GB", "count": 1}},
    ],
    "namespaces": [{"name": "lab"}, {"name": "capped"}, {"name": "outside"}],
    # the portal's own quota (as if granted 2) and one the portal does not manage
    "quotas": [{"name": "gpu-portal-quota", "namespace": "capped",
                "hard": {f"requests.{GPU}": 2}},
               {"name": "gpu-quota", "namespace": "outside", "hard": {f"requests.{GPU}": 2}}],
    "pods": [{"name": "hog", "namespace": "lab", "node": "h-0", "phase": "Running",
              "requests": {GPU: 8}}],
}  # fmt: skip


def pod(name: str, requests: dict, selector: dict | None = None, node: str = "") -> dict:
    spec: dict = {
        "containers": [{"name": "main", "image": "cuda",
                        "resources": {"requests": requests, "limits": requests}}],
    }  # fmt: skip
    if selector:
        spec["nodeSelector"] = selector
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def job(name: str, gpus: int) -> dict:
    template = pod(name, {GPU: str(gpus)})
    template["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {"spec": template["spec"]}},
    }


def class_name(cluster: str, product: str) -> str:
    from inventory.models import GpuClass

    return GpuClass.objects.get(cluster__slug=cluster, selector={PRODUCT: product}).name


def scheduled_false(api, namespace: str, name: str) -> str:
    """The scheduler's message once it has given up on the pod (PodScheduled False)."""
    for c in (api.get("pods", name, namespace).get("status") or {}).get("conditions") or []:
        if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("message"):
            return c["message"]
    return ""


def refusals(api, namespace: str) -> set[str]:
    """The job controller's FailedCreate messages for pods a quota refused (one per try)."""
    return {
        e["message"].removeprefix("Error creating: ")
        for e in api.list("events", namespace)
        if e["reason"] == "FailedCreate" and "exceeded quota" in e["message"]
    }


@pytest.fixture
def lab(tmp_path, client):
    from inventory.classes import refresh
    from inventory.sync import sync_cluster
    from tests import kubesim
    from tests.quotas.builders import make_namespace, make_team, make_user

    sim = kubesim.start(FLEET, tmp_path)
    cluster = Cluster.objects.create(
        slug="lab", name="Lab", auth_method=Cluster.AuthMethod.KUBECONFIG,
        kubeconfig_path=str(sim.kubeconfig_path),
    )  # fmt: skip
    wait_for(lambda: sim.api.get("pods", "hog", "lab")["status"].get("phase") == "Running")
    assert not sync_cluster(cluster, trigger="test").error
    refresh(cluster)
    alice = make_user("alice")
    team = make_team("vision", members=[alice])
    make_namespace(team, cluster, "lab")
    make_namespace(team, cluster, "capped")
    make_namespace(team, cluster, "outside")
    make_team("other", members=[make_user("bob")])
    client.force_login(alice)
    yield sim
    sim.stop()


def items_by_name(client, slug: str = "vision") -> dict:
    resp = client.get(f"/api/v1/teams/{slug}/waiting/")
    assert resp.status_code == 200, resp.content
    body = resp.json()
    assert body["unreadable"] == []
    return {(i["name"], i["resource"]): i for i in body["items"]}


def test_each_cause_on_a_resourcequota_cluster_in_the_clusters_words(lab, client):
    api = lab.api
    api.create("jobs", job("train-big", 4), "capped")  # the quotas allow 2
    api.create("jobs", job("eval-big", 4), "outside")
    api.create("pods", pod("want-h100", {GPU: "4"}, {PRODUCT: H100}), "lab")
    api.create("pods", pod("want-b200", {GPU: "1"}, {PRODUCT: "NVIDIA-B200"}), "lab")
    api.create("pods", pod("want-a100", {GPU: "2"}, {PRODUCT: A100}), "lab")
    api.create("pods", pod("want-mig", {MIG: "1"}), "lab")
    api.create("pods", pod("stuck", {GPU: "1"}, node="v-down"), "lab")
    # what the kubelet of v-down would report (there is none: it is emulated here)
    api.create(
        "events",
        {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "stuck.admission"},
         "involvedObject": {"kind": "Pod", "namespace": "lab", "name": "stuck"},
         "type": "Warning", "reason": "UnexpectedAdmissionError",
         "message": "Allocate failed due to requested number of devices unavailable for "
                    "nvidia.com/gpu. Requested: 1, Available: 0, which is unexpected",
         "source": {"component": "kubelet", "host": "v-down"}},
        "lab",
    )  # fmt: skip
    said = {
        name: wait_for(lambda n=name: scheduled_false(api, "lab", n), what=f"{name} unschedulable")
        for name in ("want-h100", "want-b200", "want-a100", "want-mig")
    }
    for ns in ("capped", "outside"):
        wait_for(lambda ns=ns: refusals(api, ns), what=f"the job controller's refusal in {ns}")
    items = items_by_name(client)
    said_refused = {ns: refusals(api, ns) for ns in ("capped", "outside")}  # each retry's event

    quota = items[("train-big", GPU)]
    assert (quota["kind"], quota["cause"], quota["owner"], quota["amount"]) == (
        "workload", "quota", "Job/train-big", 4,
    )  # fmt: skip
    assert quota["message"] in said_refused["capped"]
    assert "gpu-portal-quota" in quota["explanation"] and "0 of the 2" in quota["explanation"]
    assert [s["kind"] for s in quota["suggestions"]] == ["request", "wait"]
    outside = items[("eval-big", GPU)]
    assert outside["message"] in said_refused["outside"]
    # gpu-quota is not the portal's: a grant would not raise it; an admin can adopt it
    assert [s["kind"] for s in outside["suggestions"]] == ["admin", "wait"]

    capacity = items[("want-h100", GPU)]
    h100 = class_name("lab", H100)
    assert (capacity["cause"], capacity["gpu_class"]) == ("unschedulable", h100)
    assert capacity["message"] == said["want-h100"]
    assert f"Insufficient {GPU}" in capacity["message"]
    assert f"Idle now on {h100}: 0" in capacity["explanation"]
    assert any(s["kind"] == "class" and f"{class_name('lab', L40S)} has 4" in s["text"]
               for s in capacity["suggestions"])  # fmt: skip

    selector = items[("want-b200", GPU)]
    assert selector["message"] == said["want-b200"]
    assert "didn't match Pod's node affinity/selector" in selector["message"]
    assert "node selector" in selector["explanation"]

    taint = items[("want-a100", GPU)]
    assert taint["message"] == said["want-a100"] and "untolerated taint" in taint["message"]
    assert any(s["kind"] == "fix" and "toleration" in s["text"] for s in taint["suggestions"])

    mig = items[("want-mig", MIG)]
    assert mig["message"] == said["want-mig"] and f"Insufficient {MIG}" in mig["message"]
    assert mig["explanation"].startswith(f"No node of Lab offers {MIG}")

    starting = items[("stuck", GPU)]
    assert starting["cause"] == "starting"
    assert starting["message"].startswith("UnexpectedAdmissionError: Allocate failed")

    assert {i["cause"] for i in items.values()} == {"quota", "unschedulable", "starting"}
    assert ("hog", GPU) not in items  # running: it waits for nothing

    # The page says the same, and its prefilled request opens the form with the amount.
    page = client.get(reverse("quotas:team-waiting", args=["vision"])).content.decode()
    for name, _ in items:
        assert f'data-name="{name}"' in page
    assert said["want-h100"].split(".")[0] in page.replace("&#x27;", "'")
    # 4 asked, 0 used, 2 allowed: 2 more make it fit
    request_url = next(s["url"] for s in quota["suggestions"] if s["kind"] == "request")
    query = parse_qs(urlparse(request_url).query)
    assert query["amount"] == ["2"] and query["resource"] == [GPU]
    form = client.get(request_url).content.decode()
    assert 'name="amount" value="2"' in form


def test_a_sweep_of_waiting_pods_costs_the_page_no_more_queries(lab, client):
    """Each waiting pod's estimate reads the same running pods and idle nodes of its class:
    read once per page (a sweep of hundreds of pods took 17 s in make bench-pages), whatever
    amounts the pods ask for (one query per amount made bench-pages' count grow with the
    fleet)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    api = lab.api

    def waiting(names: list[str]) -> tuple[int, dict]:
        for i, n in enumerate(names):  # 4 GPUs do not fit on any node: nor do more
            api.create("pods", pod(n, {GPU: str(4 + i % 3)}, {PRODUCT: H100}), "lab")
        for n in names:
            wait_for(lambda n=n: scheduled_false(api, "lab", n), what=f"{n} unschedulable")
        with CaptureQueriesContext(connection) as ctx:
            items = items_by_name(client)
        return len(ctx.captured_queries), items

    few, items = waiting(["sweep-0", "sweep-1"])
    assert items[("sweep-0", GPU)]["cause"] == "unschedulable"
    many, items = waiting([f"sweep-{i}" for i in range(2, 8)])
    assert len([name for name, _ in items if name.startswith("sweep-")]) == 8
    assert many == few


def test_another_team_sees_none_of_it_and_a_cluster_outage_is_said(lab, client):
    from django.contrib.auth import get_user_model

    lab.api.create("pods", pod("want-b200", {GPU: "1"}, {PRODUCT: "NVIDIA-B200"}), "lab")
    client.force_login(get_user_model().objects.get(username="bob"))
    assert client.get("/api/v1/teams/vision/waiting/").status_code == 404
    assert client.get(reverse("quotas:team-waiting", args=["vision"])).status_code == 404
    assert client.get("/api/v1/teams/other/waiting/").json()["items"] == []

    client.force_login(get_user_model().objects.get(username="alice"))
    wait_for(lambda: ("want-b200", GPU) in items_by_name(client))
    lab.faults.update(refuse_connections=True)
    body = client.get("/api/v1/teams/vision/waiting/").json()
    assert body["items"] == [] and [u["cluster"] for u in body["unreadable"]] == ["lab"]
    page = client.get(reverse("quotas:team-waiting", args=["vision"])).content.decode()
    assert "Lab could not be read now" in page and "data-empty" not in page


def test_a_workload_kueue_queues_in_kueues_words(seeded, client):
    """The Kueue demo: ml-vision's sam-finetune waits (its queue lent out what it could
    borrow). Its Workload's QuotaReserved condition is the message; the prefilled request
    asks for what Kueue says is missing."""
    import re

    from django.contrib.auth import get_user_model

    sim = seeded("simcluster/fleets/demo-kueue.yaml", kueue=True)
    client.force_login(get_user_model().objects.get(username="alice"))

    def kueue_says() -> tuple[dict, str] | None:
        for wl in sim.api.list("workloads", "ml-vision"):
            owners = [o["name"] for o in wl["metadata"].get("ownerReferences") or []]
            for c in wl.get("status", {}).get("conditions") or []:
                if (
                    "sam-finetune" in owners
                    and c["type"] == "QuotaReserved"
                    and c["status"] == "False"
                ):
                    return wl, c["message"]
        return None

    wl, message = wait_for(kueue_says, what="Kueue's reason for sam-finetune")
    body = client.get("/api/v1/teams/vision/waiting/").json()
    # the demo's first cluster answers no token of this test: said, not hidden
    assert [u["cluster"] for u in body["unreadable"]] == ["demo"]
    item = next(i for i in body["items"] if i["owner"] == "Pod/sam-finetune")
    assert (item["kind"], item["cause"], item["cluster"], item["name"]) == (
        "workload", "queued", "research", wl["metadata"]["name"],
    )  # fmt: skip
    h100 = class_name("research", "NVIDIA-H100-80GB-HBM3")
    assert (item["amount"], item["gpu_class"], item["message"]) == (8, h100, message)
    needed = re.search(r"(\d+) more needed", message)
    request = next(s for s in item["suggestions"] if s["kind"] == "request")
    amount = parse_qs(urlparse(request["url"]).query)["amount"]
    assert amount == [needed.group(1) if needed else "8"]
    # the gated pod is the same thing waiting: not listed twice
    assert [i["name"] for i in body["items"]].count(wl["metadata"]["name"]) == 1
    assert not any(i["name"] == "sam-finetune" for i in body["items"])


def test_a_queued_workloads_position_is_kueues_own(seeded, client):
    """Kueue's visibility API orders a LocalQueue's pending workloads (priority, then age);
    the page and the API show that order, read as Kueue's users read it. A pod created
    after sam-finetune but of higher priority goes ahead of it."""
    from django.contrib.auth import get_user_model

    from devstack import kueuevisibility
    from quotas.waiting_service import NOT_SERVED

    sim = seeded("simcluster/fleets/demo-kueue.yaml", kueue=True)
    client.force_login(get_user_model().objects.get(username="alice"))

    def queued() -> dict[str, dict]:
        body = client.get("/api/v1/teams/vision/waiting/").json()
        return {i["owner"]: i for i in body["items"] if i["cause"] == "queued"}

    sam = wait_for(lambda: queued().get("Pod/sam-finetune"), what="sam-finetune queued")
    if kueuevisibility.host_address() is None:  # loopback only: Kueue runs without the API
        assert (sam["queue_position"], sam["queue_note"]) == (None, NOT_SERVED)
        assert NOT_SERVED in sam["explanation"]
        return
    lq = "default"  # the namespace's default LocalQueue catches the demo's pods
    sim.api.create("priorityclasses", {"metadata": {"name": "urgent"}, "value": 1000})
    urgent = pod("urgent-eval", {GPU: "8"}, {PRODUCT: H100})
    urgent["spec"]["priorityClassName"] = "urgent"
    sim.api.create("pods", urgent, "ml-vision")
    path = (
        f"/apis/{kueuevisibility.GROUP}/{kueuevisibility.VERSION}/namespaces/ml-vision/"
        f"localqueues/{lq}/pendingworkloads"
    )

    def kueue_lists() -> dict[str, dict] | None:
        items = sim.api.request("GET", path)["items"]
        return {p["metadata"]["name"]: p for p in items} if len(items) == 2 else None

    listed = wait_for(kueue_lists, what="two pending workloads in Kueue's list")
    first = min(listed.values(), key=lambda p: p["positionInLocalQueue"])
    assert first["priority"] == 1000  # Kueue's order: the urgent pod's workload leads
    items = wait_for(
        lambda: (q := queued()) and "Pod/urgent-eval" in q and q, what="urgent-eval queued"
    )
    for owner in ("Pod/sam-finetune", "Pod/urgent-eval"):
        item = items[owner]
        kueue = listed[item["name"]]
        assert item["queue_position"] == {
            "local_queue": lq,
            "in_local_queue": kueue["positionInLocalQueue"] + 1,
            "in_cluster_queue": kueue["positionInClusterQueue"] + 1,
        }
        assert item["queue_note"] == ""
    assert items["Pod/urgent-eval"]["queue_position"]["in_local_queue"] == 1
    assert items["Pod/sam-finetune"]["queue_position"]["in_local_queue"] == 2
    assert (
        "Kueue's queue position: 2 in LocalQueue default"
        in items["Pod/sam-finetune"]["explanation"]
    )
    page = client.get(reverse("quotas:team-waiting", args=["vision"])).content.decode()
    assert 'data-queue-position="2"' in page and 'data-queue-position="1"' in page


def test_an_estimated_wait_from_grants_and_how_long_pods_ran(lab, client):
    """The wait suggestion stands on what the portal knows: a grant of the team that starts
    later, and how long the class's pods ran (inventory/podruns.py); without enough of
    either it says there is no estimate, and why."""
    from datetime import timedelta

    from django.utils import timezone

    from inventory.models import GpuClass, GpuPod, PodRun
    from quotas.models import TeamNamespace
    from tests.quotas.builders import make_grant

    api = lab.api
    api.create("jobs", job("train-big", 4), "capped")  # the quota allows 2
    api.create("pods", pod("want-h100", {GPU: "4"}, {PRODUCT: H100}), "lab")
    wait_for(lambda: scheduled_false(api, "lab", "want-h100"), what="want-h100 unschedulable")
    wait_for(lambda: refusals(api, "capped"), what="the job controller's refusal")

    def wait_text(name: str) -> str:
        [s] = [s for s in items_by_name(client)[(name, GPU)]["suggestions"] if s["kind"] == "wait"]
        return s["text"]

    h100 = GpuClass.objects.get(cluster__slug="lab", selector={PRODUCT: H100})
    assert wait_text("want-h100").startswith(f"No estimated wait: 0 pods of {h100.name} ended")
    assert wait_text("train-big").startswith("No estimated wait")

    # Six H100 pods ran 3 hours each this month; "hog" holds the node's 8 GPUs.
    now = timezone.now()
    for i in range(6):
        end = now - timedelta(days=i + 1)
        PodRun.objects.create(cluster=h100.cluster, namespace="lab", name=f"done-{i}",
                              node_name="h-0", gpu_class=h100, gpus=8,
                              started_at=end - timedelta(hours=3), ended_at=end)  # fmt: skip
    hog = GpuPod.objects.get(name="hog")
    text = wait_text("want-h100")
    expected = hog.started_at + timedelta(hours=3)  # the median residual of a 3-hour run
    assert f"Estimated start: around {expected:%Y-%m-%d %H:%M} UTC" in text, text
    assert f"6 GPU pods of {h100.name} ended in the last 30 days, after a median of 3 h" in text

    # A grant of 2 that starts tomorrow makes the team's quota fit the 4-GPU job.
    capped = TeamNamespace.objects.get(name="capped")
    grant = make_grant(capped, 2, days=5, start_in=timedelta(days=1))
    text = wait_text("train-big")
    assert text.startswith(f"Estimated start: {grant.starts_at:%Y-%m-%d %H:%M} UTC"), text
    assert "when a grant of the team begins" in text
