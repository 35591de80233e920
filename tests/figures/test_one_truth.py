"""One truth: idle now, free to grant and usable by the team, computed here from the cluster
(as kubectl reads it) and compared with every page, endpoint and metric that shows them.

The demo fleets on the real control plane, seeded as ``make demo`` seeds them (seed_demo):
the ResourceQuota cluster ``demo`` and the Kueue cluster ``research``. The truth is
computed by this module alone from the API server (node allocatable and labels, pod phases
and requests, ResourceQuotas, Kueue's ClusterQueues) and, for free to grant, the grants in
the database; none of the portal's figure code is called to compute it.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict

import pytest
from django.contrib.auth import get_user_model
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from devstack.kubeapi import wait_for
from inventory.models import Cluster, Node
from quotas.models import Grant, OvercommitPolicy, TeamNamespace

pytestmark = pytest.mark.django_db
GPU = "nvidia.com/gpu"
PRODUCT = "nvidia.com/gpu.product"
REPLICAS = "nvidia.com/gpu.replicas"
TERMINAL = ("Succeeded", "Failed")


# -- the truth, from the cluster ------------------------------------------------------------


def qty(value) -> int:
    return int(str(value or 0))


def pod_request(pod: dict, resource: str) -> int:
    """The pod's effective request, as the scheduler and quota count it: the larger of its
    containers' sum and its largest init container (requests default to limits)."""

    def one(c: dict) -> int:
        res = c.get("resources") or {}
        return qty(
            (res.get("requests") or {}).get(resource, (res.get("limits") or {}).get(resource))
        )

    spec = pod["spec"]
    return max(
        sum(one(c) for c in spec.get("containers") or []),
        max((one(c) for c in spec.get("initContainers") or []), default=0),
    )


def gpu_resources(nodes: list[dict]) -> set[str]:
    return {
        r
        for n in nodes
        for r in (n["status"].get("allocatable") or {})
        if r == GPU or r.startswith("nvidia.com/mig-")
    }


def idle_per_node(nodes: list[dict], pods: list[dict]) -> dict[tuple[str, str], tuple]:
    """{(node, resource): (allocatable, requested, idle)} as kubectl describe node shows."""
    requested: dict = defaultdict(int)
    for pod in pods:
        node = pod["spec"].get("nodeName")
        if node and (pod.get("status") or {}).get("phase") not in TERMINAL:
            for r in gpu_resources(nodes):
                requested[(node, r)] += pod_request(pod, r)
    out = {}
    for n in nodes:
        name = n["metadata"]["name"]
        for r, value in (n["status"].get("allocatable") or {}).items():
            if r in gpu_resources(nodes):
                alloc, req = qty(value), requested[(name, r)]
                out[(name, r)] = (alloc, req, max(alloc - req, 0))
    return out


def matches(labels: dict, selector: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def sums(per_node: dict, names) -> tuple[int, int, int]:
    rows = [v for (n, _), v in per_node.items() if n in names]
    return tuple(sum(r[i] for r in rows) for i in range(3))


def peak(windows, start) -> int:
    """The most that (starts_at, ends_at, amount) windows reserve at any instant from start."""
    points = {start} | {s for s, _, _ in windows if s > start}
    return max(
        (sum(a for s, e, a in windows if s <= t and (e is None or e > t)) for t in points),
        default=0,
    )


def free_to_grant_truth(cluster: Cluster, nodes, pods, classes: list[dict]) -> dict:
    """{(class slug, resource): free to grant} for a permanent grant from now (DESIGN.md)."""
    now = timezone.now()
    grants = list(
        Grant.objects.filter(namespace__cluster=cluster, ended_at__isnull=True)
        .filter(Q(ends_at__isnull=True) | Q(ends_at__gt=now))
        .select_related("gpu_class", "namespace")
    )
    by_node = {n["metadata"]["name"]: n for n in nodes}
    per_node = idle_per_node(nodes, pods)
    out = {}
    for cls in classes:
        names = {n for n, node in by_node.items()
                 if matches(node["metadata"].get("labels") or {}, cls["selector"])}  # fmt: skip
        for row in cls["capacity"]:
            r = row["resource"]
            ratio = OvercommitPolicy.objects.filter(cluster=cluster, resource=r).first()
            ratio = ratio.ratio if ratio else 1

            def figure(node_names, class_slug, r=r, ratio=ratio):
                mine = [g for g in grants if g.resource == r and in_class(g, class_slug)]
                windows = [(max(g.starts_at, now), g.ends_at, g.amount) for g in mine]
                reserved = peak(windows, now)
                active = defaultdict(int)
                for g in mine:
                    if g.starts_at <= now:
                        active[g.namespace.name] += g.amount
                used = defaultdict(int)
                for pod in pods:
                    node = pod["spec"].get("nodeName")
                    if node in node_names and pod["status"].get("phase") not in TERMINAL:
                        used[pod["metadata"]["namespace"]] += pod_request(pod, r)
                beyond = sum(max(n - active[ns], 0) for ns, n in used.items())
                alloc = sum(
                    v[0] for (n, res), v in per_node.items() if n in node_names and res == r
                )
                return math.floor(alloc * ratio) - reserved - beyond

            own = figure(names, cls["slug"])
            pool = figure(set(by_node), None)
            out[(cls["slug"], r)] = min(own, pool)
    return out


def in_class(grant: Grant, class_slug: str | None) -> bool:
    """Whether a grant counts in the class (None: the pool counts every grant)."""
    return class_slug is None or bool(grant.gpu_class and grant.gpu_class.slug == class_slug)


def unscoped(quota: dict) -> bool:
    return not quota["spec"].get("scopes") and not quota["spec"].get("scopeSelector")


def number(html: str, attr: str) -> int:
    found = re.search(rf"{re.escape(attr)}[^>]*>\s*(-?\d+)", html)
    assert found, f"{attr} not on the page"
    return int(found.group(1))


# -- fixtures ---------------------------------------------------------------------------


def admin_client(client):
    client.force_login(get_user_model().objects.get(username="admin"))
    return client


def check_idle_and_free(client, sim, slug: str) -> None:
    """Sync the inventory (as the beat does) until the cluster holds still, then check."""
    from inventory.sync import sync_cluster

    def agrees():  # an AssertionError (pods still admitted, bound, started) polls again
        assert not sync_cluster(Cluster.objects.get(slug=slug), trigger="test").error
        compare_idle_and_free(client, sim, slug)
        return True

    wait_for(agrees, timeout=30, interval=0.5, what="every figure equal to the cluster's")


def compare_idle_and_free(client, sim, slug: str) -> None:
    """Idle now and free to grant per class, on every page, endpoint and metric."""
    from inventory.models import base_product

    cluster = Cluster.objects.get(slug=slug)
    nodes, pods = sim.api.list("nodes"), sim.api.list("pods")
    per_node = idle_per_node(nodes, pods)
    classes = client.get("/api/v1/gpu-classes/", {"cluster": slug, "page_size": 100}).json()
    classes = classes["results"]
    assert classes, "the cluster has GPU classes"
    fleet = client.get(reverse("inventory:fleet")).content.decode()
    metrics = client.get("/metrics").content.decode()
    free_truth = free_to_grant_truth(cluster, nodes, pods, classes)
    for cls in classes:
        names = {n["metadata"]["name"] for n in nodes
                 if matches(n["metadata"].get("labels") or {}, cls["selector"])}  # fmt: skip
        for row in cls["capacity"]:
            r = row["resource"]
            alloc, req, idle = sums({k: v for k, v in per_node.items() if k[1] == r}, names)
            key = f"{slug}/{cls['slug']}/{r}"
            assert (row["allocatable"], row["requested"], row["idle"]) == (alloc, req, idle), key
            assert number(fleet, f'data-class-idle="{key}"') == idle, key
            labels = f'cluster="{slug}",gpu_class="{cls["slug"]}",resource="{r}"'
            assert f"portal_gpu_class_idle{{{labels}}} {float(idle)}" in metrics, key
            truth = free_truth[(cls["slug"], r)]
            assert row["free_to_grant"] == truth, key
            assert number(fleet, f'data-class-free="{key}"') == truth, key
            assert f"portal_gpu_class_free_to_grant{{{labels}}} {float(truth)}" in metrics, key
    # Per product (the summary API and the cluster page) and per node (node pages).
    summary = client.get("/api/v1/inventory/summary/", {"cluster": slug}).json()
    page = client.get(reverse("inventory:cluster", args=[slug])).content.decode()
    for product in summary["products"]:
        names = {n["metadata"]["name"] for n in nodes
                 if base_product((n["metadata"].get("labels") or {}).get(PRODUCT, ""))
                 == product["product"]}  # fmt: skip
        # a time-sliced node's resources count replicas: a row of their own, never added
        sliced = {n["metadata"]["name"] for n in nodes
                  if int((n["metadata"].get("labels") or {}).get(REPLICAS, "1")) > 1}  # fmt: skip
        for row in product["resources"]:
            r = row["resource"]
            on = names & sliced if row["replicas"] else names - sliced
            truth = sums({k: v for k, v in per_node.items() if k[1] == r}, on)
            assert (row["allocatable"], row["requested"], row["idle"]) == truth, product
            if r == GPU:
                attr = "data-idle-replicas" if row["replicas"] else "data-idle"
                assert number(page, f'{attr}="{product["product"]}"') == truth[2]
    for node in Node.objects.filter(cluster=cluster, gpu_count__gt=0):
        html = client.get(reverse("inventory:node", args=[node.pk])).content.decode()
        for (name, r), (_, _, idle) in per_node.items():
            if name == node.name and f'data-idle="{r}"' in html:
                assert number(html, f'data-idle="{r}"') == idle, (name, r)


# -- the ResourceQuota cluster ------------------------------------------------------------


def test_idle_free_and_usable_equal_the_cluster_on_the_resourcequota_demo(client, seeded):
    sim = seeded("simcluster/fleets/demo.yaml")
    client = admin_client(client)
    # The fleet has GPUs requested under grants and beyond them, idle and held ones.
    check_idle_and_free(client, sim, "demo")

    # Usable by the team: every unscoped quota of the namespace binds (kubectl get quota).
    pods = sim.api.list("pods")
    for ns in TeamNamespace.objects.filter(cluster__slug="demo"):
        quotas = [q for q in sim.api.list("resourcequotas", ns.name) if unscoped(q)]
        body = client.get(f"/api/v1/namespaces/{ns.pk}/").json()
        usable = {u["resource"]: u for u in body["usable"]}
        for r in {k.removeprefix("requests.") for q in quotas for k in q["spec"]["hard"]}:
            if not (r == GPU or r.startswith("nvidia.com/mig-")):
                continue
            limits = [qty(q["spec"]["hard"][f"requests.{r}"]) for q in quotas
                      if f"requests.{r}" in q["spec"]["hard"]]  # fmt: skip
            used = sum(pod_request(p, r) for p in pods
                       if p["metadata"]["namespace"] == ns.name
                       and p["status"].get("phase") not in TERMINAL)  # fmt: skip
            truth = max(min(limits) - used, 0)
            assert (usable[r]["limit"], usable[r]["used"], usable[r]["usable"]) == (
                min(limits),
                used,
                truth,
            ), (ns.name, r)
    # The team page shows the same, to a member.
    alice = get_user_model().objects.get(username="alice")
    client.force_login(alice)
    page = client.get(reverse("quotas:teams")).content.decode()
    vision = TeamNamespace.objects.get(cluster__slug="demo", name="ml-vision")
    body = admin_client(client).get(f"/api/v1/namespaces/{vision.pk}/").json()
    gpu = next(u for u in body["usable"] if u["resource"] == GPU)
    assert number(page, f'data-usable="{GPU}"') == gpu["usable"]
    metrics = client.get("/metrics").content.decode()
    labels = f'cluster="demo",gpu_class="",namespace="ml-vision",resource="{GPU}",team="vision"'
    lines = [x for x in metrics.splitlines() if x.startswith("portal_namespace_usable")]
    assert f"portal_namespace_usable{{{labels}}} {float(gpu['usable'])}" in lines, lines

    # The approval queue and the request form's preview show idle now and usable beside
    # free to grant, equal to the same truths.
    from quotas.models import QuotaRequest

    nodes, per_node = sim.api.list("nodes"), idle_per_node(sim.api.list("nodes"), pods)
    queue = admin_client(client).get(reverse("quotas:queue")).content.decode()
    pending = QuotaRequest.objects.filter(status="pending", namespace__cluster__slug="demo")
    assert pending.exists(), "the demo has requests waiting for a decision"
    for req in pending.select_related("gpu_class", "namespace"):
        selector = req.gpu_class.selector if req.gpu_class else {}
        names = {n["metadata"]["name"] for n in nodes
                 if matches(n["metadata"].get("labels") or {}, selector)}  # fmt: skip
        idle = sums({k: v for k, v in per_node.items() if k[1] == req.resource}, names)[2]
        card = queue[queue.index(f'id="q-{req.pk}"') :]
        assert number(card, "data-queue-idle") == idle, req
        limit = client.get(f"/api/v1/namespaces/{req.namespace.pk}/").json()["usable"]
        usable = next(u["usable"] for u in limit if u["resource"] == req.resource)
        if usable is None:  # no quota binds this resource there
            assert card.split("data-queue-usable>", 1)[1].startswith("no quota limits it")
        else:
            assert number(card, "data-queue-usable") == usable, req
        preview = admin_client(client).post(reverse("quotas:request-new"), {
            "team": req.team_id, "namespace": req.namespace.pk, "resource": req.resource,
            "gpu_class": req.gpu_class.pk if req.gpu_class else "", "amount": 1,
            "duration": "permanent", "justification": "x", "preview": "1",
        }).content.decode()  # fmt: skip
        assert number(preview, 'data-outlook="idle-now"') == idle, req
        if usable is not None:
            assert number(preview, 'data-outlook="usable-now"') == usable, req


# -- the Kueue cluster --------------------------------------------------------------------


def kueue_truth(sim, namespace: str, classes: list[dict]) -> dict:
    """{(class slug, resource): (nominal, used, usable)} of the namespace's ClusterQueue,
    from Kueue's own objects: nominal quota and limits from the spec, what admitted
    workloads hold from ``status.flavorsUsage``, the cohort's unused quota from the others."""
    (lq,) = sim.api.list("localqueues", namespace)
    queues = {q["metadata"]["name"]: q for q in sim.api.list("clusterqueues")}
    mine = queues[lq["spec"]["clusterQueue"]]
    flavors = {f["metadata"]["name"]: f for f in sim.api.list("resourceflavors")}

    def quota(q):
        out = {}
        for group in q["spec"].get("resourceGroups") or []:
            for f in group.get("flavors") or []:
                for r in f.get("resources") or []:
                    out[(f["name"], r["name"])] = r
        return out

    def usage(q):
        return {(f["name"], r["name"]): qty(r.get("total"))
                for f in (q.get("status") or {}).get("flavorsUsage") or []
                for r in f.get("resources") or [] if r["name"] == GPU}  # fmt: skip

    def cohort(q):
        return q["spec"].get("cohortName") or q["spec"].get("cohort")

    out = {}
    for key, r in quota(mine).items():
        if key[1] != GPU:
            continue
        nominal, used = qty(r.get("nominalQuota")), usage(mine).get(key, 0)
        lend = 0
        for other in queues.values():
            if other is mine or not cohort(mine) or cohort(other) != cohort(mine):
                continue
            o = quota(other).get(key)
            if o is None:
                continue
            unused = qty(o.get("nominalQuota")) - usage(other).get(key, 0)
            if unused > 0 and o.get("lendingLimit") is not None:
                unused = min(unused, qty(o["lendingLimit"]))
            lend += unused
        may = lend if r.get("borrowingLimit") is None else min(lend, qty(r["borrowingLimit"]))
        labels = flavors[key[0]]["spec"].get("nodeLabels") or {}
        (cls,) = [c for c in classes if c["selector"] == labels]
        out[(cls["slug"], key[1])] = (nominal, used, max(nominal + may - used, 0))
    return out


def test_idle_free_and_usable_equal_kueue_on_the_kueue_demo(client, seeded):
    from quotas.tasks import reconcile_quotas

    sim = seeded("simcluster/fleets/demo-kueue.yaml", kueue=True)
    client = admin_client(client)
    check_idle_and_free(client, sim, "research")
    classes = client.get("/api/v1/gpu-classes/", {"cluster": "research"}).json()["results"]
    ns = TeamNamespace.objects.get(cluster__slug="research", name="ml-vision")

    def ours():
        body = client.get(f"/api/v1/namespaces/{ns.pk}/").json()
        return {(u["gpu_class"], u["resource"]): (u["nominal"], u["used"], u["usable"])
                for u in body["usable"]}  # fmt: skip

    def agree():
        reconcile_quotas()  # the portal reads Kueue's status back (as its beat does)
        truth = kueue_truth(sim, ns.name, classes)
        assert truth
        assert {k: v for k, v in ours().items() if k in truth} == truth
        return truth

    truth = wait_for(agree, timeout=60, what="the portal's usable figures equal Kueue's")
    assert any(used for _, used, _ in truth.values()), "admitted workloads hold GPUs"
    client.force_login(get_user_model().objects.get(username="alice"))
    page = client.get(reverse("quotas:teams")).content.decode()
    ns_page = client.get(reverse("quotas:namespace", args=[ns.pk])).content.decode()
    # the namespace page shows the queues Kueue enforces, not a ResourceQuota that is not there
    assert "ClusterQueue <code>gpu-portal-vision</code>" in ns_page
    assert not any(q["metadata"]["name"] == "gpu-portal-quota"
                   for q in sim.api.list("resourcequotas", "ml-vision"))  # fmt: skip
    assert "gpu-portal-quota" not in ns_page
    metrics = admin_client(client).get("/metrics").content.decode()
    for (cls, r), (_, _, usable) in truth.items():
        assert number(page, f'data-usable="{cls}/{r}"') == usable
        assert number(ns_page, f'data-usable="{cls}/{r}"') == usable
        labels = (f'cluster="research",gpu_class="{cls}",namespace="ml-vision",'
                  f'resource="{r}",team="vision"')  # fmt: skip
        assert f"portal_namespace_usable{{{labels}}} {float(usable)}" in metrics


def test_idle_counts_bound_unfinished_pods_per_node_never_below_zero(client, tmp_path):
    """A node whose device plugin reports fewer healthy GPUs than its pods request has none
    idle (not a negative that hides another node's idle GPUs); a pending pod, a finished
    one and a pod on another class hold nothing there."""
    from inventory.classes import refresh
    from inventory.sync import sync_cluster
    from tests import kubesim
    from tests.quotas.builders import make_user

    h100 = {"product": "NVIDIA-H100-80GB-HBM3", "count": 8}
    fleet = {
        "nodes": [{"name": "h-sick", "gpu": {**h100, "unhealthy": 2}},
                  {"name": "h-ok", "gpu": h100},
                  {"name": "l-0", "gpu": {"product": "NVIDIA-L40S", "count": 4}}],
        "pods": [
            {"name": "big", "namespace": "lab", "node": "h-sick", "phase": "Running",
             "requests": {GPU: 8}},
            {"name": "small", "namespace": "lab", "node": "h-ok", "phase": "Running",
             "requests": {GPU: 3}},
            {"name": "done", "namespace": "lab", "node": "h-ok", "phase": "Succeeded",
             "requests": {GPU: 2}},
            {"name": "waiting", "namespace": "lab", "phase": "Pending", "requests": {GPU: 4}},
            {"name": "l40s", "namespace": "lab", "node": "l-0", "phase": "Running",
             "requests": {GPU: 1}},
        ],
    }  # fmt: skip
    sim = kubesim.start(fleet, tmp_path)
    try:
        cluster = Cluster.objects.create(
            slug="lab", name="Lab", auth_method=Cluster.AuthMethod.KUBECONFIG,
            kubeconfig_path=str(sim.kubeconfig_path),
        )  # fmt: skip
        assert not sync_cluster(cluster, trigger="test").error
        refresh(cluster)
        client.force_login(make_user("root", staff=True))
        check_idle_and_free(client, sim, "lab")
        classes = client.get("/api/v1/gpu-classes/", {"cluster": "lab"}).json()["results"]
        h = next(c for c in classes if c["selector"] == {PRODUCT: h100["product"]})
        # Per node: h-sick 6 - 8 -> 0, h-ok 8 - 3 = 5; not (6 + 8) - (8 + 3) = 3.
        assert [(x["allocatable"], x["requested"], x["idle"]) for x in h["capacity"]] == [
            (14, 11, 5)
        ]
    finally:
        sim.stop()


# -- "applied" means usable -------------------------------------------------------------


def test_an_approval_capped_by_an_outside_quota_says_granted_6_usable_0(client, seeded):
    """ml-vision's own quota gpu-quota (16) stays in the namespace: a +6 grant raises the
    portal's quota, and the team can use none of it. The API, the request page and the
    notification say so, with what binds; kubectl shows both quotas."""
    from notices.models import Notification
    from quotas import services
    from quotas.apply import run_operation
    from quotas.models import Operation

    sim = seeded("simcluster/fleets/demo.yaml")
    ns = TeamNamespace.objects.get(cluster__slug="demo", name="ml-vision")
    users = get_user_model().objects
    data = services.RequestData(
        team=ns.team, namespace=ns, resource=GPU, amount=6,
        justification="More detector ablations before the deadline.",
    )  # fmt: skip
    req = services.approve(services.submit(users.get(username="alice"), data),
                           users.get(username="admin"))  # fmt: skip
    for op in Operation.objects.filter(namespace=ns, status="pending"):
        run_operation(op.pk)
    req.refresh_from_db()
    assert req.status == "applied"
    quotas = {q["metadata"]["name"]: qty(q["spec"]["hard"][f"requests.{GPU}"])
              for q in sim.api.list("resourcequotas", ns.name) if unscoped(q)}  # fmt: skip
    outside = quotas["gpu-quota"]
    assert quotas["gpu-portal-quota"] - 6 >= outside  # kubectl: the outside quota binds
    client = admin_client(client)
    out = client.get(f"/api/v1/quota-requests/{req.pk}/").json()["outcome"]
    assert (out["granted"], out["usable_gain"], out["applied"]) == (6, 0, True)
    assert "quota gpu-quota" in out["binding"] and out["text"].startswith("granted +6, usable +0")
    page = client.get(reverse("quotas:request", args=[req.pk])).content.decode()
    assert "Granted +6, usable +0." in page and "Quota gpu-quota" in page
    notice = Notification.objects.filter(recipient__username="alice", event="applied",
                                         url__contains=str(req.pk)).get()  # fmt: skip
    assert "Granted +6, usable +0: quota gpu-quota" in notice.body, notice.body
