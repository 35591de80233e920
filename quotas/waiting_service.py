"""Why a team's jobs wait: its namespaces read live from their clusters (quotas/waiting.py
says what each signal means), each finding with its GPU class, a sentence of ours and
what to do: a request prefilled with the missing amount, another class with room now,
the admin's part when a quota the portal does not manage binds, and an estimated wait
where one can be computed (quotas/wait_estimate.py: grants that start or end, and how
long pods ran), saying when not.

A cluster that cannot be read is reported as such, fast (no retry, a short timeout), and
its namespaces are left out rather than shown as having nothing waiting.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import urlencode

from django.conf import settings
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from inventory import podruns
from inventory.figures import IDLE_NOW, POOL, idle_now, idle_per_node
from inventory.kube import KubeError, KubeGateway
from inventory.models import GPU_RESOURCE, GpuClass

from . import kueue, preview
from .figures import usable
from .models import Grant, Team, TeamNamespace
from .wait_estimate import HISTORY, MIN_RUNS, Estimate, estimate
from .waiting import DraView, Finding, findings, place_in_queues

READ_TIMEOUT_S = 5.0
NOT_SERVED = (
    "No queue position: this cluster does not serve Kueue's visibility API "
    "(visibility.kueue.x-k8s.io, Kueue's VisibilityOnDemand feature)."
)


@dataclass(frozen=True)
class Suggestion:
    kind: str  # "request", "class", "admin", "fix", "wait"
    text: str
    url: str = ""


@dataclass
class Item:
    finding: Finding
    namespace: TeamNamespace
    gpu_class: GpuClass | None
    explanation: str = ""
    suggestions: list[Suggestion] = field(default_factory=list)

    @property
    def cluster(self):
        return self.namespace.cluster


@dataclass
class Report:
    team: Team
    items: list[Item]
    unreadable: list[tuple]  # (Cluster, why)
    read_at: datetime

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for item in self.items:
            out[item.finding.cause] += 1
        return dict(out)


def _read(namespaces: list[TeamNamespace], now: datetime):
    """{namespace id: [Finding]} and the clusters that could not be read."""
    by_cluster = defaultdict(list)
    for ns in namespaces:
        by_cluster[ns.cluster].append(ns)
    found, unreadable = {}, []
    for cluster, nss in sorted(by_cluster.items(), key=lambda kv: kv[0].name):
        try:
            gw = KubeGateway(cluster, retries=0, timeout=READ_TIMEOUT_S)
            classes, selectors = [], {}
            if cluster.is_dra:
                classes = gw.list_device_classes()
                selectors = dict(
                    GpuClass.objects.filter(cluster=cluster).values_list("slug", "selector")
                )
            for ns in nss:
                workloads = None
                if cluster.is_kueue:
                    workloads = gw.list_kueue_objects("workloads", namespace=ns.name) or []
                pods = gw.list_pending_pods(ns.name)
                dra = None
                if cluster.is_dra:
                    dra = _dra_view(pods, gw.list_resource_claims(ns.name), classes, selectors)
                found[ns.pk] = findings(pods, gw.list_events(ns.name), workloads, now, dra)
                _place(gw, ns.name, found[ns.pk])
        except KubeError as err:
            unreadable.append((cluster, str(err)))
            for ns in nss:
                found.pop(ns.pk, None)
    return found, unreadable


def _dra_view(
    pods: list[dict], claims: list[dict], classes: list[dict], selectors: dict[str, dict]
) -> DraView:
    """What the namespace's claims ask for per Pending pod, and what each DeviceClass quota
    key counts (inventory/dra.py reads the claims; quotas/dra.py names the keys);
    ``selectors``: the cluster's class selectors by slug."""
    from inventory import dra as inventory_dra

    from .dra import quota_key

    inv = inventory_dra.read([], claims, classes)
    usage = {}
    for pod in pods:
        held, slug = inv.pod_usage(pod)
        if held:
            usage[pod["metadata"]["name"]] = (held, dict(selectors.get(slug) or {}))
    keys = {
        quota_key(name): (info.resource, dict(selectors.get(info.gpu_class) or {}))
        for name, info in inventory_dra.device_classes(classes).items()
        if info.resource
    }
    return DraView(usage, keys)


def _place(gw: KubeGateway, namespace: str, found: list[Finding]) -> None:
    """Kueue's queue positions of the namespace's queued workloads (quotas/waiting.py)."""
    queues = sorted({f.local_queue for f in found if f.cause == "queued" and f.local_queue})
    if not queues:
        return
    pending, why_not = {}, ""
    try:
        for lq in queues:
            listed = gw.list_pending_workloads(namespace, lq)
            if listed is None:
                pending, why_not = None, NOT_SERVED
                break
            pending[lq] = listed
    except KubeError as err:
        pending, why_not = None, f"No queue position: Kueue's visibility API answered {err}"
    place_in_queues(found, pending, why_not)


def team_waiting(team: Team, now: datetime | None = None) -> Report:
    """Everything that waits in ``team``'s namespaces, explained (module doc)."""
    now = now or timezone.now()
    namespaces = list(TeamNamespace.objects.filter(team=team).select_related("cluster", "team"))
    found, unreadable = _read(namespaces, now)
    if not found:
        return Report(team, [], unreadable, now)
    read = [ns for ns in namespaces if ns.pk in found]
    ctx = _Context(read, now)
    items = []
    for ns in read:
        for f in found[ns.pk]:
            item = Item(f, ns, ctx.class_of(ns, f))
            ctx.explain(item)
            items.append(item)
    return Report(team, items, unreadable, now)


class _Context:
    """What the suggestions need, loaded once for the namespaces read."""

    def __init__(self, namespaces: list[TeamNamespace], now: datetime):
        self.now = now
        cluster_ids = {ns.cluster_id for ns in namespaces}
        self.classes = defaultdict(list)
        for cls in GpuClass.objects.filter(cluster_id__in=cluster_ids).order_by("name"):
            self.classes[cls.cluster_id].append(cls)
        self.idle = idle_now(cluster_ids)
        self.states = preview.states(namespaces, now)
        # Grants not released: those that start or end later change the team's limit.
        self.grants = defaultdict(list)
        for g in Grant.objects.filter(namespace__in=namespaces, ended_at__isnull=True).filter(
            Q(starts_at__gt=now) | Q(ends_at__gt=now)
        ):
            self.grants[(g.namespace_id, g.resource)].append(g)
        self._history: dict = {}
        # Read once per page, however many pods wait on the same class (a sweep of
        # hundreds): the running pods and idle nodes a wait estimate reads, and the
        # estimate of a wait for the same capacity.
        self._running: dict = {}
        self._idle_nodes: dict = {}
        self._capacity: dict = {}

    def running(self, cluster_id, resource: str, **scope) -> list:
        """:func:`inventory.podruns.running`, read once per argument list."""
        key = (cluster_id, resource, tuple(sorted(scope.items())))
        if key not in self._running:
            self._running[key] = podruns.running(cluster_id, resource, **scope)
        return self._running[key]

    def idle_nodes(self, cluster_id, resource: str, gpu_class_id) -> dict:
        """:func:`inventory.figures.idle_per_node`, read once per argument list (pods
        that wait for different amounts of the same class share it)."""
        key = (cluster_id, resource, gpu_class_id)
        if key not in self._idle_nodes:
            self._idle_nodes[key] = idle_per_node(cluster_id, resource, gpu_class_id)
        return self._idle_nodes[key]

    def class_of(self, ns: TeamNamespace, f: Finding) -> GpuClass | None:
        for cls in self.classes[ns.cluster_id]:
            if cls.matches(f.selector) or (f.flavor and kueue.flavor_name(cls) == f.flavor):
                return cls
        return None

    def idle_of(self, ns: TeamNamespace, cls: GpuClass | None, resource: str) -> int:
        fig = self.idle.get((ns.cluster_id, cls.pk if cls else POOL, resource))
        return fig.idle if fig else 0

    def roomier_classes(self, item: Item, amount: int) -> list[Suggestion]:
        """Other classes of the cluster with ``amount`` of the resource idle now."""
        out = []
        for cls in self.classes[item.namespace.cluster_id]:
            if cls == item.gpu_class or item.finding.resource not in (cls.resources or []):
                continue
            idle = self.idle_of(item.namespace, cls, item.finding.resource)
            if idle >= amount:
                if item.cluster.is_dra:  # a claim names its class's DeviceClass
                    from .dra import device_class_name

                    how = f"claim from DeviceClass {device_class_name(cls, item.finding.resource)}"
                else:
                    sel = ", ".join(f"{k}: {v}" for k, v in sorted(cls.selector.items()))
                    how = f"target it with the node selector {sel}"
                text = f"{cls.name} has {idle} {item.finding.resource} idle now: {how}."
                out.append(Suggestion("class", text))
        return out

    def request(self, item: Item, amount: int, cls: GpuClass | None = None) -> Suggestion:
        cls = cls if cls is not None else item.gpu_class
        query = {
            "namespace": item.namespace.pk,
            "resource": item.finding.resource,
            "amount": amount,
            "justification": f"{item.finding.name} waits for {amount} more "
            f"{item.finding.resource} ({item.finding.cause}).",
        }
        if cls is not None:
            query["gpu_class"] = cls.pk
        url = reverse("quotas:request-new") + "?" + urlencode(query)
        where = f" of {cls.name}" if cls else ""
        return Suggestion("request", f"Request {amount} more {item.finding.resource}{where}", url)

    def estimate(self, item: Item, need: int, free_now: int, *, team_grants=True) -> Suggestion:
        """When ``need`` fits the team's own limit, ``free_now`` of it free
        (quotas/wait_estimate.py): as its pods in the namespace end, and as its grants
        start and end (unless ``team_grants`` is False: a quota outside the portal)."""
        f, ns, cls = item.finding, item.namespace, item.gpu_class
        scope = {"namespace": ns.name}
        if cls is not None and ns.cluster.enforces_classes:
            scope["gpu_class_id"] = cls.pk
        holders = [(a, s) for a, s, _ in self.running(ns.cluster_id, f.resource, **scope)]
        durations, what = self._durations(item, scope), ns.name
        if len(durations) < MIN_RUNS:  # the team's own history is short: the class's
            durations, what = self._class_history(item)
        grants = self._grant_events(item) if team_grants else []
        est = estimate(need, free_now, holders, durations, grants, self.now, what, ns.name)
        return self._wait(item, est)

    def capacity_estimate(self, item: Item, need: int) -> Suggestion:
        """When ``need`` is idle on one node of the item's class (a pod runs on one node):
        the earliest estimate over those nodes, each from its idle GPUs and its pods."""
        f, ns = item.finding, item.namespace
        cls_id = item.gpu_class.pk if item.gpu_class else None
        key = (ns.cluster_id, f.resource, cls_id, need)
        if key not in self._capacity:
            self._capacity[key] = self._capacity_estimate(item, need, cls_id)
        return self._wait(item, self._capacity[key])

    def _capacity_estimate(self, item: Item, need: int, cls_id) -> Estimate:
        f, ns = item.finding, item.namespace
        durations, what = self._class_history(item)
        on_node: dict = defaultdict(list)
        for amount, started, node_id in self.running(
            ns.cluster_id, f.resource, gpu_class_id=cls_id
        ):
            on_node[node_id].append((amount, started))
        nodes = self.idle_nodes(ns.cluster_id, f.resource, cls_id)
        found = [estimate(need, idle, on_node[node_id], durations, [], self.now, what)
                 for node_id, idle in nodes.items()]  # fmt: skip
        timed = [e for e in found if e.at is not None]
        if timed:
            return min(timed, key=lambda e: e.at)
        # None: why, for the class as a whole (little history, or nothing that frees)
        pods = [p for held in on_node.values() for p in held]
        est = estimate(need, 0, pods, durations, [], self.now, what)
        if est.at is not None:
            est = Estimate(
                None,
                f"No estimated wait: pods of {what} are expected to end, but no single node "
                f"is expected to have {need} free, and a pod runs on one node.",
            )
        return est

    def _wait(self, item: Item, est: Estimate) -> Suggestion:
        text = est.text
        if est.at is None and item.finding.resource != GPU_RESOURCE:
            text = (
                f"No estimated wait: run history is kept for whole GPUs ({GPU_RESOURCE}) "
                f"only, and no grant of the team starts that would fit it."
            )
        return Suggestion("wait", text)

    def _class_history(self, item: Item) -> tuple[list[float], str]:
        """How long pods of the item's class (its cluster's, with none) ran, and its name."""
        cls = item.gpu_class
        scope = {"gpu_class_id": cls.pk if cls else None}
        return self._durations(item, scope), cls.name if cls else item.namespace.cluster.name

    def _durations(self, item: Item, scope: dict) -> list[float]:
        """Run lengths of ended GPU pods in ``scope`` over :data:`HISTORY` (none for other
        resources: runs are kept for whole GPUs only), read once per scope."""
        if item.finding.resource != GPU_RESOURCE:
            return []
        cluster_id = item.namespace.cluster_id
        key = (cluster_id, tuple(sorted(scope.items())))
        if key not in self._history:
            since = self.now - HISTORY
            self._history[key] = podruns.run_durations(cluster_id, since, **scope)
        return self._history[key]

    def _grant_events(self, item: Item) -> list[tuple[datetime, int]]:
        """(when, +amount) for the namespace's grants of the resource that start later,
        (when, -amount) for those that end; a class's only (or any-class) where given."""
        out = []
        for g in self.grants[(item.namespace.pk, item.finding.resource)]:
            if item.gpu_class is not None and g.gpu_class_id not in (None, item.gpu_class.pk):
                continue
            if g.starts_at > self.now:
                out.append((g.starts_at, g.amount))
            if g.ends_at is not None and g.ends_at > self.now:
                out.append((g.ends_at, -g.amount))
        return out

    # ---------------------------------------------------------------- causes
    def explain(self, item: Item) -> None:
        getattr(self, f"_{item.finding.cause}")(item)

    def _quota(self, item: Item) -> None:
        f = item.finding
        missing = max((f.amount + (f.used or 0)) - (f.limited or 0), 1)
        if f.kind == "pod":  # a DRA claim from the pod's template (quotas/waiting.py)
            item.explanation = (
                f"Quota {f.quota} refused the ResourceClaim of pod {f.name}: it asks for "
                f"{f.amount} {f.resource}, the namespace's claims hold {f.used} of the "
                f"{f.limited} it allows."
            )
        else:
            item.explanation = (
                f"Quota {f.quota} refused the pods of {f.owner}: each asks for {f.amount} "
                f"{f.resource}, the namespace uses {f.used} of the {f.limited} it allows."
            )
        if f.quota == settings.QUOTA_NAME:
            item.suggestions.append(self.request(item, missing))
        else:
            item.suggestions.append(
                Suggestion(
                    "admin",
                    f"Quota {f.quota} is not the portal's: a grant does not raise it. "
                    "An admin can adopt it on the namespace's page.",
                    reverse("quotas:namespace", args=[item.namespace.pk]),
                )
            )
        ours = f.quota == settings.QUOTA_NAME
        item.suggestions.append(self.estimate(item, f.amount, f.amount - missing, team_grants=ours))

    def _queued(self, item: Item) -> None:
        f = item.finding
        state = self.states.get(item.namespace.pk)
        figure = next(
            (
                u
                for u in (usable(state, self.now) if state else [])
                if u.resource == f.resource
                and (item.gpu_class is None or u.gpu_class == item.gpu_class)
            ),
            None,
        )
        missing = f.needed or f.amount
        where = f" of {item.gpu_class.name}" if item.gpu_class else ""
        text = f"Kueue queues it: it needs {f.amount} {f.resource}{where}"
        if f.needed:
            text += f", {f.needed} more than the queue can admit now"
        if figure is not None and figure.usable is not None:
            text += f"; usable by the team now: {figure.usable} ({figure.binding})"
            missing = max(f.amount - figure.usable, 1) if not f.needed else missing
        item.explanation = f"{text}. {self.position(f)}"
        item.suggestions.append(self.request(item, missing))
        item.suggestions += self.roomier_classes(item, f.amount)
        item.suggestions.append(self.estimate(item, missing, 0))

    @staticmethod
    def position(f: Finding) -> str:
        p = f.queue_position
        if p is None:
            return f.queue_note or "Kueue gives no queue position for it."
        return (
            f"Kueue's queue position: {p.in_local_queue} in LocalQueue {p.local_queue}, "
            f"{p.in_cluster_queue} in its ClusterQueue (1 is the next it considers)."
        )

    def _unschedulable(self, item: Item) -> None:
        f = item.finding
        cls, ns = item.gpu_class, item.namespace
        offered = any(f.resource in (c.resources or []) for c in self.classes[ns.cluster_id])
        if not offered and "mig-" in f.resource:
            item.explanation = (
                f"No node of {ns.cluster.name} offers {f.resource}: no GPU is partitioned "
                "into that MIG profile."
            )
            item.suggestions.append(
                Suggestion("fix", "Ask for a MIG layout with this profile.", reverse("mig:index"))
            )
            return
        idle = self.idle_of(ns, cls, f.resource)
        where = cls.name if cls else f"any node of {ns.cluster.name}"
        parts = []
        if "capacity" in f.reasons or not f.reasons:
            parts.append(f"{IDLE_NOW} on {where}: {idle} {f.resource}; it asks for {f.amount}.")
        if "selector" in f.reasons and cls is not None and "capacity" in f.reasons:
            parts.append(f"Its node selector keeps it on {cls.name}; other nodes do not match.")
        elif "selector" in f.reasons:
            parts.append("Its node selector or affinity leaves out the nodes that have room.")
        if "taint" in f.reasons:
            parts.append("Nodes with room carry a taint it does not tolerate.")
            item.suggestions.append(
                Suggestion("fix", "Add a toleration for the taint the message names.")
            )
        item.explanation = " ".join(parts)
        item.suggestions += self.roomier_classes(item, f.amount)
        if f.reasons and "capacity" not in f.reasons:
            text = "No estimated wait: it waits for a change to the job (above), not for GPUs."
            item.suggestions.append(Suggestion("wait", text))
        else:
            item.suggestions.append(self.capacity_estimate(item, f.amount))

    def _starting(self, item: Item) -> None:
        item.explanation = "A node holds it but has not started it: the message is the node's own."
        item.suggestions.append(
            Suggestion(
                "fix",
                "Tell a portal admin if this lasts: the node's GPU stack (driver, device "
                "plugin) may be at fault.",
            )
        )
