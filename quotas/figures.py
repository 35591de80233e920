"""Per GPU class: idle now and free to grant side by side (inventory/figures.py names them).

:func:`class_figures` is what the fleet page, ``GET /api/v1/gpu-classes/`` and ``/metrics``
show for each class: the nodes' figures (allocatable, requested by bound pods, idle now:
:func:`inventory.figures.idle_now`) and the grants' (granted, free to grant:
:meth:`quotas.capacity.Capacity.free` for a permanent grant from now). Each figure comes
from its one function; this module only puts them together, in a fixed number of queries.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils import timezone

from inventory.figures import NodeFigures, idle_now
from inventory.models import GpuClass

from .capacity import Capacity, Headroom


@dataclass(frozen=True)
class ClassFigure:
    """One GPU class and resource: its nodes' figures and its grant headroom."""

    gpu_class: GpuClass
    resource: str
    nodes: NodeFigures
    room: Headroom

    @property
    def allocatable(self) -> int:
        return self.nodes.allocatable

    @property
    def requested(self) -> int:
        return self.nodes.requested

    @property
    def idle(self) -> int:
        return self.nodes.idle

    @property
    def granted(self) -> int:
        """What this class's grants reserve at peak from now on."""
        return self.room.reserved

    @property
    def free_to_grant(self) -> int:
        return self.room.free

    @property
    def unit(self) -> str:
        """``replicas`` for a time-sliced class (never added to physical GPUs), else ``GPUs``
        (a MIG resource counts instances)."""
        if self.gpu_class.time_sliced:
            return "replicas"
        return "GPUs" if self.resource == "nvidia.com/gpu" else "instances"


def class_figures(clusters=None, *, classes=None, now=None) -> list[ClassFigure]:
    """Per GPU class of ``clusters`` (or the given ``classes``) and each resource it covers,
    ordered by cluster and class name."""
    if classes is None:
        cluster_ids = [c.pk for c in clusters]
        classes = GpuClass.objects.filter(cluster_id__in=cluster_ids).select_related("cluster")
    classes = list(classes)
    if not classes:
        return []
    cluster_ids = {c.cluster_id for c in classes}
    resources = {r for c in classes for r in c.resources}
    now = timezone.now() if now is None else now
    capacity = Capacity(cluster_ids, resources, now=now)
    nodes = idle_now(cluster_ids, resources)
    return [
        ClassFigure(
            cls,
            resource,
            nodes.get((cls.cluster_id, cls.pk, resource)) or NodeFigures(resource),
            capacity.free(cls.cluster_id, cls, resource, now, None),
        )
        for cls in sorted(classes, key=lambda c: (c.cluster.name, c.name))
        for resource in cls.resources
    ]


# -- usable by the team -------------------------------------------------------------------


@dataclass(frozen=True)
class Usable:
    """One resource (of one class, on a Kueue cluster) of a namespace: what it can start now.

    ``limit`` is the effective limit: on a ResourceQuota cluster the smallest of every
    unscoped quota that binds (the portal's as the cluster enforces it, and any other);
    on a Kueue cluster the team's ClusterQueue nominal quota for the class plus what it
    may borrow now. ``used`` is what counts against it (ResourceQuota: every non-terminal
    pod, pending ones included, since the quota charges a pod at creation; Kueue: what
    admitted workloads hold).
    """

    resource: str
    limit: int | None  # None: no quota limits it (ResourceQuota cluster)
    used: int
    binding: str  # what sets the limit, in words
    gpu_class: GpuClass | None = None
    nominal: int | None = None  # Kueue: the queue's quota for the class
    may_borrow: int = 0  # Kueue: what the cohort's other queues leave unused, capped
    borrowed: int = 0  # Kueue: what admitted workloads hold above the nominal quota
    outside_binds: bool = False  # a quota the portal does not manage sets the limit

    @property
    def usable(self) -> int | None:
        return None if self.limit is None else max(self.limit - self.used, 0)


def usable(state, now=None) -> list[Usable]:
    """THE definition of usable by the team (inventory/figures.py), for one namespace's
    :class:`quotas.preview.NamespaceState`.

    On a ResourceQuota cluster only quotas that exist there bind: the portal's as the
    cluster holds it (its ``status.hard`` as last read; a grant not applied yet adds
    nothing usable) and every unscoped foreign one. With none, nothing limits the
    namespace (``limit`` None)."""

    from .limits import PREFIX, _int

    if state.kueue is not None:
        return _usable_kueue(state, now)
    if state.ns.cluster.is_dra:
        return _usable_dra(state)
    hard = (state.ns.quota_status or {}).get("hard") or {}
    return [
        _limit(key, _int(hard.get(key)), state.foreign, resource, int(state.used.get(key, 0)))
        for resource in sorted(state.effective)
        if (key := PREFIX + resource)
    ]


def _limit(key: str, own: int | None, foreign, resource: str, used: int, **kw) -> Usable:
    """The smallest of the portal's quota (``own``, as the cluster holds it) and every
    unscoped foreign quota on ``key``; no limit when none sets one."""
    from django.conf import settings

    from .limits import _int

    candidates = [
        (value, f"quota {fq.name}", True)
        for fq in foreign
        if fq.present and not fq.scoped and (value := _int(fq.hard.get(key))) is not None
    ]
    if own is not None:
        candidates.append((own, f"quota {settings.QUOTA_NAME}", False))
    if not candidates:
        return Usable(resource, None, used, "no quota limits it", **kw)
    limit, binding, outside = min(candidates, key=lambda c: (c[0], c[2]))
    return Usable(resource, limit, used, binding, outside_binds=outside, **kw)


def _usable_dra(state) -> list[Usable]:
    """On a DRA cluster per class and resource: the quota's devices of the class's
    DeviceClass (quotas/dra.py), limited as the cluster holds it, used as it counts them
    (every claim, allocated or not: a claim is charged at creation)."""
    from .dra import device_class_name, quota_key
    from .kueue import classes_of
    from .limits import _int

    hard = (state.ns.quota_status or {}).get("hard") or {}
    out = []
    for cls in classes_of(state.ns.cluster):
        for resource in sorted(cls.resources or []):
            key = quota_key(device_class_name(cls, resource))
            used = int(state.used.get(key, 0))
            out.append(
                _limit(key, _int(hard.get(key)), state.foreign, resource, used, gpu_class=cls)
            )
    return sorted(out, key=lambda u: (u.gpu_class.name, u.resource))


def _usable_kueue(state, now=None) -> list[Usable]:
    """Kueue admits a workload while the queue stays within nominal + borrowing limit and
    the cohort within the sum of its queues' quotas: so what the team may add is its
    unused quota plus what the cohort's other queues leave (negative when they borrowed
    this queue's unused quota), the latter capped by the borrowing limit.

    This is Kueue's own arithmetic (kubernetes-sigs/kueue v0.17.0
    ``pkg/cache/scheduler/resource_node.go`` ``available``): for a queue in a cohort
    without lending limits, ``min(cohort quota - cohort usage, nominal - usage +
    borrowingLimit)``; the first term is ``nominal + lendable - used`` here."""
    from .kueue import ClassQueueRow, classes_of, cohort_lendable, queue_name

    if state.queue is None:
        return []
    tq, rows = state.queue
    lendable = cohort_lendable(tq, now) if tq.cohort else {}
    known = {(r.gpu_class.pk, r.resource) for r in rows}
    # Every class the queue covers, with quota or not: a class without quota may borrow.
    rows = list(rows) + [
        ClassQueueRow(cls, res, 0, 0, 0)
        for cls in classes_of(tq.cluster)
        for res in cls.resources
        if (cls.pk, res) not in known
    ]
    out = []
    for r in sorted(rows, key=lambda r: (r.gpu_class.name, r.resource)):
        may = lendable.get((r.gpu_class.pk, r.resource), 0)
        if tq.borrowing_limit is not None:
            may = min(may, tq.borrowing_limit)
        binding = f"ClusterQueue {queue_name(tq.team)}: quota {r.nominal}"
        if may > 0:
            binding += f" + {may} it may borrow from cohort {tq.cohort}"
        elif may < 0:
            binding += f" - {-may} other queues of cohort {tq.cohort} borrowed"
        figure = Usable(r.resource, r.nominal + may, r.used, binding, gpu_class=r.gpu_class,
                        nominal=r.nominal, may_borrow=may, borrowed=r.borrowed)  # fmt: skip
        out.append(figure)
    return out


# -- what an approval made usable -----------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """An approved request as the team meets it: what was granted, and what it can use now.

    ``usable_gain`` is how much the grant raised the namespace's effective limit (0 when
    another quota binds below it, or the portal's quota is not applied yet); ``binding``
    names what limits the namespace when that is not the portal's own quota or queue.
    """

    granted: int
    usable_gain: int
    usable_now: int | None
    binding: str
    applied: bool  # the cluster holds the portal's quota or queue with this grant
    advice: str = ""  # what an admin can do about what binds

    @property
    def capped(self) -> bool:
        return self.usable_gain < self.granted

    def text(self, namespace: str) -> str:
        """'granted +6, usable +0: quota gpu-quota caps ml-vision at 16; an admin can adopt it'."""
        head = f"granted +{self.granted}, usable +{self.usable_gain}"
        if not self.capped:
            return head
        if not self.applied:
            return f"{head}: the cluster does not hold the new quota yet"
        return f"{head}: {self.binding} caps {namespace}; {self.advice}"


def outcome(req, state=None) -> Outcome | None:
    """For an approved request with its grant: :class:`Outcome`; None otherwise."""
    from django.conf import settings

    from .limits import PREFIX, _int
    from .models import QuotaRequest
    from .preview import state as load_state

    grant = req.grant
    done = (QuotaRequest.Status.APPROVED, QuotaRequest.Status.APPLYING, QuotaRequest.Status.APPLIED)
    if req.status not in done or grant is None:
        return None
    if state is None:  # fresh: the apply has just recorded the quota's status
        from .models import TeamNamespace

        ns = TeamNamespace.objects.select_related("team", "cluster").get(pk=req.namespace_id)
        state = load_state(ns)
    per_class = state.kueue is not None or state.ns.cluster.is_dra
    rows = [
        u for u in usable(state)
        if u.resource == req.resource and (not per_class or u.gpu_class == req.gpu_class)
    ]  # fmt: skip
    now = rows[0] if rows else None
    if state.ns.cluster.is_dra:
        return _outcome_dra(req, state, now)
    if state.kueue is not None:
        # Kueue: the queue's quota includes the grant once applied (the nominal quota).
        applied = req.status == QuotaRequest.Status.APPLIED
        gain = grant.amount if applied else 0
        return Outcome(grant.amount, gain, now.usable if now else None,
                       now.binding if now else "", applied)  # fmt: skip
    hard = (state.ns.quota_status or {}).get("hard") or {}
    own = _int(hard.get(PREFIX + req.resource))
    eff = state.effective.get(req.resource)
    applied = own is not None and eff is not None and own >= eff.granted
    outside = [value for _, value in (eff.outside if eff else [])]
    if own is None:
        gain = 0
    else:
        without = min([own - grant.amount, *outside])
        gain = max(min([own, *outside]) - max(without, 0), 0)
    binding, advice = f"quota {settings.QUOTA_NAME}", ""
    if now and now.outside_binds:
        binding = f"{now.binding} (limit {now.limit})"
        name = now.binding.removeprefix("quota ")
        decision = next((fq.decision for fq in state.foreign if fq.name == name), "")
        advice = ADVICE.get(decision, ADVICE["undecided"])
    return Outcome(grant.amount, min(gain, grant.amount), now.usable if now else None,
                   binding, applied, advice)  # fmt: skip


def _outcome_dra(req, state, now: Usable | None) -> Outcome:
    """As on a ResourceQuota cluster, for the devices of the class's DeviceClass."""
    from django.conf import settings

    from .dra import desired_hard, device_class_name, quota_key
    from .limits import _int

    grant = req.grant
    key = quota_key(device_class_name(req.gpu_class, req.resource))
    own = _int(((state.ns.quota_status or {}).get("hard") or {}).get(key))
    applied = own is not None and own >= desired_hard(state.ns).get(key, 0)
    gain = 0
    if own is not None and now is not None and now.limit is not None:
        gain = max(now.limit - max(min(own - grant.amount, now.limit), 0), 0)
    binding = now.binding if now and now.outside_binds else f"quota {settings.QUOTA_NAME}"
    advice = ADVICE["undecided"] if now and now.outside_binds else ""
    return Outcome(grant.amount, min(gain, grant.amount), now.usable if now else None,
                   binding, applied, advice)  # fmt: skip


# What an admin can do about a foreign quota that caps a grant, by its decision.
ADVICE = {
    "undecided": "an admin can adopt it",
    "adopted": "its limits are grants already: an admin can remove it from the cluster",
    "kept": "it is kept as an outside limit: an admin can raise or remove it",
}
