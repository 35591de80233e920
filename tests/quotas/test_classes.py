"""GPU classes in requests, grants and capacity: one definition of free (quotas/capacity.py
``free``) shared by the approval, the queue and the fleet page; any-class grants reserve
against the pool only; pods beyond their grants take capacity; the ResourceQuota backend
sums classes per resource."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from inventory.classes import refresh
from inventory.models import Cluster, GpuClass, GpuPod
from quotas import services
from quotas.apply import desired_hard
from quotas.capacity import Capacity, free
from quotas.models import Grant, QuotaRequest, TeamNamespace
from tests.conftest import api_for
from tests.factories import make_cluster, make_node, make_pod
from tests.quotas.builders import make_grant, make_team, make_user

GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-1g.10gb"
H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"
L40S = "NVIDIA-L40S-SHARED"
WHY = "Fine-tuning run for the spring paper."


def build_fleet():
    """prod: 2 H100 nodes (16), 1 A100 with mixed MIG (8 GPUs + 14 1g.10gb), 1 L40S
    time-sliced x4 (8 GPUs advertised as 32). Team vision (rob) with namespace ml-vision."""
    cluster = make_cluster("prod")
    make_node(cluster, "h1", product=H100)
    make_node(cluster, "h2", product=H100)
    make_node(cluster, "a1", product=A100, resources={GPU: (8, 8, 0), MIG: (14, 14, 0)})
    make_node(cluster, "l1", product=L40S, gpu_replicas=4, sharing_strategy="time-slicing",
              resources={GPU: (32, 32, 0)})  # fmt: skip
    refresh(cluster)
    rob = make_user("rob")
    team = make_team("vision", members=[rob])
    ns = TeamNamespace.objects.create(team=team, cluster=cluster, name="ml-vision")
    other = TeamNamespace.objects.create(team=make_team("nlp"), cluster=cluster, name="nlp")
    classes = {c.selector["nvidia.com/gpu.product"]: c for c in GpuClass.objects.all()}
    return {"cluster": cluster, "rob": rob, "team": team, "ns": ns, "other": other,
            "h100": classes[H100], "a100": classes[A100], "l40s": classes[L40S]}  # fmt: skip


@pytest.fixture
def fleet(db):
    return build_fleet()


def request(f, amount, gpu_class=None, resource=GPU, **kw) -> QuotaRequest:
    data = services.RequestData(
        team=f["team"], namespace=f["ns"], resource=resource, amount=amount,
        justification=WHY, gpu_class=gpu_class, **kw,
    )  # fmt: skip
    return services.submit(f["rob"], data)


@pytest.mark.django_db
def test_class_grants_reserve_in_their_class_and_the_pool_any_class_in_the_pool(fleet):
    c, h100, now = fleet["cluster"], fleet["h100"], timezone.now()
    make_grant(fleet["ns"], 10, gpu_class=h100)
    room = free(c, h100, GPU, now, None)
    assert (room.allocatable, room.reserved, room.free) == (16, 10, 6)
    assert (room.pool.allocatable, room.pool.reserved, room.pool.free) == (56, 10, 46)
    assert free(c, fleet["a100"], GPU, now, None).free == 8  # other classes untouched
    make_grant(fleet["other"], 44)  # any class: the pool only
    room = free(c, h100, GPU, now, None)
    assert (room.own_free, room.pool.free, room.free, room.capped_by_pool) == (6, 2, 2, True)
    assert free(c, None, GPU, now, None).free == 2
    assert free(c, fleet["a100"], GPU, now, None).free == 2  # A100 8 free, pool 2


@pytest.mark.django_db
def test_pods_beyond_their_grants_hold_capacity_in_their_class(fleet):
    c, h100, now = fleet["cluster"], fleet["h100"], timezone.now()
    h1 = fleet["h100"].nodes.get(name="h1")
    make_pod(h1, "stray", namespace="no-grants", gpus=3)  # a namespace the portal does not manage
    make_grant(fleet["ns"], 4)  # any class: reserves the pool only, so its pods hold H100s
    make_pod(h1, "vision-0", namespace="ml-vision", gpus=4)
    make_grant(fleet["other"], 2, gpu_class=fleet["a100"])  # granted A100, runs on H100
    make_pod(h1, "nlp-0", namespace="nlp", gpus=2)
    GpuPod.objects.create(cluster=c, namespace="no-grants", name="pending", phase="Pending",
                          requests={GPU: 8})  # fmt: skip
    room = free(c, h100, GPU, now, None)
    assert (room.reserved, room.beyond, room.free) == (0, 3 + 4 + 2, 16 - 9)
    pool = room.pool  # 6 reserved; only the stray pod is beyond (nlp's 2 are within its 2)
    assert (pool.reserved, pool.beyond, pool.free) == (6, 3, 56 - 6 - 3)


@pytest.mark.django_db
def test_a_request_names_a_class_of_its_cluster_that_covers_the_resource(fleet):
    elsewhere = make_cluster("lab")
    make_node(elsewhere, "x1", product=H100)
    refresh(elsewhere)
    foreign = GpuClass.objects.get(cluster=elsewhere)
    for cls, resource, amount, message in [
        (foreign, GPU, 1, "is not on cluster prod"),
        (fleet["h100"], MIG, 1, "does not cover nvidia.com/mig-1g.10gb"),
        (fleet["h100"], GPU, 17, "More than the 16 nvidia.com/gpu allocatable on "),
    ]:
        with pytest.raises(ValidationError) as err:
            request(fleet, amount, cls, resource)
        assert message in str(err.value.message_dict), message
    assert not QuotaRequest.objects.exists()
    assert request(fleet, 14, fleet["a100"], MIG).gpu_class == fleet["a100"]


@pytest.mark.django_db
def test_approval_checks_the_class_and_the_grant_keeps_it(fleet):
    admin = make_user("root", staff=True)
    make_grant(fleet["other"], 12, gpu_class=fleet["h100"])
    with pytest.raises(services.CapacityError) as err:
        services.approve(request(fleet, 5, fleet["h100"]), admin)
    assert "Only 4 nvidia.com/gpu free in class " in err.value.message_dict["amount"][0]
    req = services.approve(request(fleet, 5, fleet["l40s"], ends_at=timezone.now()
                                   + timedelta(days=3)), admin)  # fmt: skip
    assert req.grant.gpu_class == fleet["l40s"]
    renewal = services.submit(fleet["rob"], services.RequestData(
        team=fleet["team"], namespace=fleet["ns"], resource="", amount=0, justification=WHY,
        kind=QuotaRequest.Kind.RENEWAL, target_grant=req.grant,
        ends_at=req.grant.ends_at + timedelta(days=2)))  # fmt: skip
    assert renewal.gpu_class == fleet["l40s"]
    # ResourceQuota cannot tell classes apart: the namespace's quota is the sum.
    make_grant(fleet["ns"], 2)
    assert desired_hard(fleet["ns"])["requests.nvidia.com/gpu"] == 5 + 2


@pytest.mark.django_db
def test_fleet_page_and_queue_show_the_same_free_h100_figure(client, fleet):
    admin = make_user("root", staff=True)
    h1 = fleet["h100"].nodes.get(name="h1")
    make_grant(fleet["other"], 5, gpu_class=fleet["h100"])
    make_grant(fleet["other"], 40)  # any class
    make_pod(h1, "stray", namespace="no-grants", gpus=2)
    request(fleet, 3, fleet["h100"])
    client.force_login(admin)
    (row,) = client.get(reverse("quotas:queue")).context["rows"]
    page = client.get(reverse("inventory:fleet"))
    (fig,) = [f for f in page.context["class_figures"]
              if f.gpu_class == fleet["h100"] and f.resource == GPU]  # fmt: skip
    # H100: 16 - 5 - 2 = 9; pool: 56 - 45 - 2 = 9 as well, so the smaller is 9.
    assert row["room"].free == fig.free_to_grant == 9
    assert f'data-class-free="prod/{fleet["h100"].slug}/{GPU}">9' in page.content.decode()
    body = client.get(reverse("quotas:queue")).content.decode()
    assert "class not enforced by Kubernetes on this cluster" in body
    api = client.get("/api/v1/gpu-classes/", {"cluster": "prod"}).json()
    (h100,) = [c for c in api["results"] if c["slug"] == fleet["h100"].slug]
    assert [x["free_to_grant"] for x in h100["capacity"] if x["resource"] == GPU] == [9]
    metrics = client.get("/metrics").content.decode()  # a staff session may scrape
    labels = f'cluster="prod",gpu_class="{fleet["h100"].slug}",resource="{GPU}"'
    assert f"portal_gpu_class_free_to_grant{{{labels}}} 9.0" in metrics
    assert f"portal_gpu_class_granted{{{labels}}} 5.0" in metrics
    assert f"portal_gpu_class_held_beyond_grants{{{labels}}} 2.0" in metrics
    assert Capacity([fleet["cluster"].pk]).free(
        fleet["cluster"].pk, fleet["h100"], GPU, timezone.now(), None
    ).free == 9  # fmt: skip


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_two_admins_approving_the_last_h100s_exactly_one_wins():
    """Two connections, as tests/quotas/test_worker.py: the pool lock serialises them."""
    f = build_fleet()
    make_grant(f["other"], 7, gpu_class=f["h100"])  # 9 H100 left
    first, second = request(f, 9, f["h100"]), request(f, 9, f["h100"])
    admins = [make_user("root", staff=True), make_user("root2", staff=True)]
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def decide(req, admin):
        try:
            barrier.wait()
            services.approve(req, admin)
            outcomes.append("approved")
        except services.CapacityError as err:
            outcomes.append("refused: " + err.message_dict["amount"][0])
        finally:
            connection.close()

    threads = [
        threading.Thread(target=decide, args=(r, a))
        for r, a in zip((first, second), admins, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(o.split(":")[0] for o in outcomes) == ["approved", "refused"]
    assert "Only 0 nvidia.com/gpu free in class" in next(o for o in outcomes if o != "approved")
    assert sum(Grant.objects.filter(gpu_class=f["h100"]).values_list("amount", flat=True)) == 16


@pytest.mark.django_db
def test_the_form_and_api_preview_held_used_and_free_for_the_chosen_class(client, fleet):
    h1 = fleet["h100"].nodes.get(name="h1")
    make_grant(fleet["ns"], 2, gpu_class=fleet["h100"])
    make_grant(fleet["ns"], 1)  # any class: usable on H100 too
    make_grant(fleet["ns"], 3, gpu_class=fleet["a100"])  # not H100
    make_pod(h1, "vision-0", namespace="ml-vision", gpus=2)
    make_grant(fleet["other"], 8, gpu_class=fleet["h100"], days=2,
               start_in=timedelta(days=1))  # reserves in the window only  # fmt: skip
    body = {"team": "vision", "namespace": "ml-vision", "resource": GPU, "amount": 30,
            "gpu_class": fleet["h100"].slug, "justification": WHY,
            "ends_at": (timezone.now() + timedelta(days=5)).isoformat()}  # fmt: skip
    api = api_for(fleet["rob"])
    r = api.post("/api/v1/quota-requests/preview/", body, format="json")
    assert r.status_code == 200, r.content
    got = r.json()
    assert (got["held"], got["used"], got["free_now"], got["free_window"]) == (3, 2, 14, 6)
    assert got["class_enforced"] is False
    assert "More than the 16" in got["problems"]["amount"][0]
    assert not QuotaRequest.objects.exists()  # nothing stored
    r = api.post("/api/v1/quota-requests/preview/", {**body, "gpu_class": "nope"}, format="json")
    assert r.status_code == 400 and "No GPU class 'nope' on cluster prod." in r.json()["gpu_class"]
    client.force_login(fleet["rob"])
    form = {"team": fleet["team"].pk, "namespace": fleet["ns"].pk, "resource": GPU,
            "gpu_class": fleet["h100"].pk, "amount": 2, "duration": "permanent",
            "preview": "1"}  # fmt: skip
    html = client.post(reverse("quotas:request-new"), form).content.decode()
    assert '<dd data-outlook="free-now">14</dd>' in html
    assert '<dd data-outlook="free-window">6</dd>' in html  # permanent: the later grant counts
    assert not QuotaRequest.objects.exists()
    form.pop("preview")
    r = client.post(reverse("quotas:request-new"), {**form, "justification": WHY})
    assert r.status_code == 302
    assert QuotaRequest.objects.get().gpu_class == fleet["h100"]
    grants = api.get("/api/v1/grants/").json()["results"]
    assert sorted(str(g["gpu_class"]) for g in grants) == sorted(
        ["None", fleet["h100"].slug, fleet["a100"].slug]
    )  # fmt: skip


@pytest.mark.django_db
def test_a_namespace_own_pods_beyond_its_grants_do_not_block_the_grant_covering_them(fleet):
    """Adopting running work: 6 of vision's pods run on H100 without a grant."""
    h1 = fleet["h100"].nodes.get(name="h1")
    make_pod(h1, "vision-0", namespace="ml-vision", gpus=6)
    make_pod(h1, "stray", namespace="no-grants", gpus=4)
    make_grant(fleet["other"], 4, gpu_class=fleet["h100"])
    now = timezone.now()
    generic = free(fleet["cluster"], fleet["h100"], GPU, now, None)
    mine = free(fleet["cluster"], fleet["h100"], GPU, now, None, namespace="ml-vision")
    assert (generic.beyond, generic.free, mine.beyond, mine.free) == (10, 2, 4, 8)
    admin = make_user("root", staff=True)
    assert services.approve(request(fleet, 8, fleet["h100"]), admin).grant.amount == 8
    with pytest.raises(services.CapacityError):  # now nothing is left for anyone
        services.approve(request(fleet, 1, fleet["h100"]), admin)


@pytest.mark.django_db
def test_the_capacity_timeline_counts_pods_beyond_grants_in_its_free(client, fleet):
    make_pod(fleet["h100"].nodes.get(name="h1"), "stray", namespace="no-grants", gpus=3)
    make_grant(fleet["ns"], 10)
    client.force_login(make_user("root", staff=True))
    (section,) = client.get(reverse("quotas:capacity")).context["sections"]
    (gpu,) = [c for c in section["charts"] if (c["resource"], c["gpu_class"]) == (GPU, None)]
    assert (gpu["beyond"], gpu["days"][1]["free"]) == (3, 56 - 10 - 3)
    assert gpu["days"][1]["free"] == free(fleet["cluster"], None, GPU, timezone.now(), None).free


@pytest.mark.django_db
def test_pods_on_a_class_the_namespace_holds_no_grant_for_are_reported(fleet, client):
    from inventory.models import Node
    from quotas.offclass import off_class

    ns, h100 = fleet["ns"], fleet["h100"]
    make_grant(ns, 4, gpu_class=h100)
    make_pod(Node.objects.get(name="h1"), "on-class", namespace="ml-vision", gpus=2)
    stray = make_pod(Node.objects.get(name="a1"), "off-class", namespace="ml-vision", gpus=2)
    make_pod(Node.objects.get(name="a1"), "other-team", namespace="nlp", gpus=1)  # no grants
    (found,) = off_class([ns])[ns.pk]
    assert (found.pod.name, found.resource, found.amount) == (stray.name, GPU, 2)
    assert found.node_class == fleet["a100"].name and found.granted_classes == (h100.name,)

    client.force_login(fleet["rob"])
    body = client.get(reverse("quotas:teams")).content.decode()
    assert "data-off-class" in body and "off-class" in body and fleet["a100"].name in body

    make_grant(ns, 2)  # an any-class grant: the team does not mind which GPUs
    assert off_class([ns]) == {}
    Grant.objects.filter(namespace=ns, gpu_class__isnull=True).delete()
    Cluster.objects.filter(pk=fleet["cluster"].pk).update(enforcement="kueue")
    ns.cluster.refresh_from_db()
    assert off_class([ns]) == {}  # where Kueue enforces classes there is nothing to report


@pytest.mark.django_db
def test_pending_demand_is_the_same_on_the_team_page_the_queue_and_metrics(fleet, client):
    from inventory.models import Node

    cluster = fleet["cluster"]
    for i, gpus in enumerate((2, 3)):  # admitted by quota, no node has room yet
        GpuPod.objects.create(cluster=cluster, namespace="ml-vision", name=f"wait-{i}",
                              phase="Pending", requests={GPU: gpus})  # fmt: skip
    make_pod(Node.objects.get(name="h1"), "bound", namespace="ml-vision", gpus=1,
             phase="Pending")  # fmt: skip  # on a node: starting, not waiting
    request(fleet, 4)
    admin = make_user("ada", staff=True)
    client.force_login(admin)
    team_page = client.get(reverse("quotas:teams")).content.decode()
    assert "data-pending>5</strong>" in team_page and "in 2 pending pods no node" in team_page
    (row,) = client.get(reverse("quotas:queue")).context["rows"]
    assert (row["pending"].amount, row["pending"].pods) == (5, 2)
    metrics = client.get("/metrics").content.decode()
    assert ('portal_gpu_demand_pending{cluster="prod",namespace="ml-vision",'
            f'resource="{GPU}",team="vision"}} 5.0') in metrics  # fmt: skip


@pytest.mark.django_db
def test_capacity_timeline_per_class_agrees_with_the_free_figure(client, fleet):
    """The capacity page draws the pool and each class; a class's free day is capped by the
    pool's, exactly as approval computes it (quotas/capacity.py)."""
    h100, l40s = fleet["h100"], fleet["l40s"]
    make_grant(fleet["ns"], 10, gpu_class=h100, days=2)
    make_grant(fleet["other"], 40, days=1)  # any class: 40 of the pool's 56
    client.force_login(make_user("ada", staff=True))
    response = client.get(reverse("quotas:capacity"))
    (section,) = response.context["sections"]
    charts = {(c["resource"], c["gpu_class"]): c for c in section["charts"]}
    assert set(charts) >= {(GPU, None), (GPU, h100), (GPU, l40s), (MIG, None)}
    pool, h = charts[(GPU, None)], charts[(GPU, h100)]
    assert [d["reserved"] for d in pool["days"][:3]] == [50, 10, 0]
    assert [d["reserved"] for d in h["days"][:3]] == [10, 10, 0]
    # Day 0: H100 has 16 - 10 = 6 of its own, the pool 56 - 50 = 6: both 6. Day 1: 6 own.
    assert [d["free"] for d in h["days"][:3]] == [6, 6, 16]
    now = timezone.now()
    room = free(fleet["cluster"], h100, GPU, now, now + timedelta(seconds=1))
    assert h["days"][0]["free"] == room.free
    # The L40S class (32 replicas) is capped by the pool on day 0: 6, not 32.
    assert charts[(GPU, l40s)]["days"][0]["free"] == 6
    html = response.content.decode()
    assert 'data-chart-class="pool"' in html and "32 replicas on 8 GPUs" in html


@pytest.mark.django_db
def test_pending_demand_per_class_from_node_selectors(fleet, client):
    """Pods that name a class (nodeSelector on its label) wait for that class: the team
    page splits the figure, the queue shows the request's class share, /metrics per class."""
    cluster = fleet["cluster"]
    h100 = {"nvidia.com/gpu.product": H100}
    GpuPod.objects.create(cluster=cluster, namespace="ml-vision", name="wants-h100",
                          phase="Pending", requests={GPU: 4}, gpu_selector=h100)  # fmt: skip
    GpuPod.objects.create(cluster=cluster, namespace="ml-vision", name="anywhere",
                          phase="Pending", requests={GPU: 1})  # fmt: skip
    request(fleet, 4, gpu_class=fleet["h100"])
    client.force_login(make_user("ada", staff=True))
    team_page = client.get(reverse("quotas:teams")).content.decode()
    assert f"in 2 pending pods (4 {fleet['h100'].name}, 1 no class named)" in team_page
    queue = client.get(reverse("quotas:queue"))
    (row,) = queue.context["rows"]
    assert row["pending"].amount == 5 and row["pending_class"] == 4
    assert f"4 of them for {fleet['h100'].name}" in queue.content.decode()
    metrics = client.get("/metrics").content.decode()
    line = ('portal_gpu_demand_pending_class{{cluster="prod",gpu_class="{c}",'
            f'namespace="ml-vision",resource="{GPU}",team="vision"}}}} {{n}}')  # fmt: skip
    assert line.format(c=fleet["h100"].slug, n="4.0") in metrics
    assert line.format(c="", n="1.0") in metrics


def test_pod_gpu_selector_reads_node_selector_and_one_required_affinity_term():
    from inventory.parsing import pod_gpu_selector

    product = "nvidia.com/gpu.product"
    assert pod_gpu_selector({"nodeSelector": {product: H100, "zone": "a"}}) == {product: H100}
    term = {"matchExpressions": [{"key": product, "operator": "In", "values": [A100]},
                                 {"key": "nvidia.com/gpu.count", "operator": "Gt",
                                  "values": ["4"]}]}  # fmt: skip
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [term]}}}  # fmt: skip
    assert pod_gpu_selector({"affinity": affinity}) == {product: A100}
    two = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [term, term]}}}  # fmt: skip
    assert pod_gpu_selector({"affinity": two}) == {}  # ORed terms name no single class
    either = dict(term, matchExpressions=[{"key": product, "operator": "In",
                                           "values": [A100, H100]}])  # fmt: skip
    affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"] = [either]  # fmt: skip
    assert pod_gpu_selector({"affinity": affinity}) == {}
