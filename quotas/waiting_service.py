"""Why a team's jobs wait: its namespaces read live from their clusters (quotas/waiting.py
says what each signal means), each finding with its GPU class, a sentence of ours and
what to do: a request prefilled with the missing amount, another class with room now,
the admin's part when a quota the portal does not manage binds, and an estimated wait
where one can be computed (a grant of the team's that starts later), saying when not.

A cluster that cannot be read is reported as such, fast (no retry, a short timeout), and
its namespaces are left out rather than shown as having nothing waiting.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import urlencode

from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from inventory.figures import IDLE_NOW, POOL, idle_now
from inventory.kube import KubeError, KubeGateway
from inventory.models import GpuClass

from . import kueue, preview
from .figures import usable
from .models import Grant, Team, TeamNamespace
from .waiting import Finding, findings

READ_TIMEOUT_S = 5.0


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
            for ns in nss:
                workloads = None
                if cluster.enforces_classes:
                    workloads = gw.list_kueue_objects("workloads", namespace=ns.name) or []
                found[ns.pk] = findings(
                    gw.list_pending_pods(ns.name), gw.list_events(ns.name), workloads, now
                )
        except KubeError as err:
            unreadable.append((cluster, str(err)))
            for ns in nss:
                found.pop(ns.pk, None)
    return found, unreadable


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
        self.upcoming = defaultdict(list)
        for g in Grant.objects.filter(
            namespace__in=namespaces, ended_at__isnull=True, starts_at__gt=now
        ).order_by("starts_at"):
            self.upcoming[(g.namespace_id, g.resource)].append(g)

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
                sel = ", ".join(f"{k}: {v}" for k, v in sorted(cls.selector.items()))
                out.append(
                    Suggestion(
                        "class",
                        f"{cls.name} has {idle} {item.finding.resource} idle now: "
                        f"target it with the node selector {sel}.",
                    )
                )
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

    def estimate(self, item: Item, missing: int) -> Suggestion:
        ahead = 0
        for g in self.upcoming[(item.namespace.pk, item.finding.resource)]:
            if item.gpu_class is None or g.gpu_class_id in (None, item.gpu_class.pk):
                ahead += g.amount
                if ahead >= missing:
                    when = g.starts_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
                    return Suggestion(
                        "wait", f"Estimated start: {when}, when a grant of the team begins."
                    )
        return Suggestion(
            "wait",
            "No estimated wait: it depends on when running jobs end, which the cluster "
            "does not say.",
        )

    # ---------------------------------------------------------------- causes
    def explain(self, item: Item) -> None:
        getattr(self, f"_{item.finding.cause}")(item)

    def _quota(self, item: Item) -> None:
        f = item.finding
        missing = max((f.amount + (f.used or 0)) - (f.limited or 0), 1)
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
        item.suggestions.append(self.estimate(item, missing))

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
        item.explanation = text + ". Kueue gives no queue position here."
        item.suggestions.append(self.request(item, missing))
        item.suggestions += self.roomier_classes(item, f.amount)
        item.suggestions.append(self.estimate(item, missing))

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
        if "selector" in f.reasons:
            parts.append("Its node selector or affinity leaves out the nodes that have room.")
        if "taint" in f.reasons:
            parts.append("Nodes with room carry a taint it does not tolerate.")
            item.suggestions.append(
                Suggestion("fix", "Add a toleration for the taint the message names.")
            )
        item.explanation = " ".join(parts)
        item.suggestions += self.roomier_classes(item, f.amount)
        item.suggestions.append(self.estimate(item, f.amount))

    def _starting(self, item: Item) -> None:
        item.explanation = "A node holds it but has not started it: the message is the node's own."
        item.suggestions.append(
            Suggestion(
                "fix",
                "Tell a portal admin if this lasts: the node's GPU stack (driver, device "
                "plugin) may be at fault.",
            )
        )
