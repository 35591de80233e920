"""What actually limits a namespace, and what its pods already use.

Kubernetes enforces every ResourceQuota of a namespace: a pod must fit all of them
(GPU-FACTS.md section 1; ``staging/src/k8s.io/apiserver/pkg/admission/plugin/
resourcequota/controller.go`` checks each matching quota). So the limit a team meets is
the minimum over the portal's quota and every unscoped foreign one, and a scoped quota
binds only the pods its scopes select (``podMatchesScopeFunc`` in
``pkg/quota/v1/evaluator/core/pods.go``). :func:`effective_limits` is the one definition
the team page, the approval queue, the request page and the API use.

Usage per resource is the larger of the quota's ``status.used`` as last read (the
portal's quota, else an unscoped foreign one) and the sum of the GPU requests of the
namespace's non-terminal pods in the inventory mirror (``GpuPod``): both count the same
pods, and taking the larger means a stale reading never hides usage.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from django.db import connection

from inventory.models import GpuPod

from .models import ForeignQuota, TeamNamespace

PREFIX = "requests."
DEVICES = ".deviceclass.resource.k8s.io/devices"  # a DRA DeviceClass's devices (quotas/dra.py)


@dataclass(frozen=True)
class ScopedLimit:
    quota: str
    limit: int
    scopes: str


@dataclass
class EffectiveLimit:
    """One resource of one namespace: what the portal grants and what really binds."""

    resource: str
    granted: int
    limit: int  # the minimum over every unscoped quota (the portal's is `granted`)
    binding: str  # the quota that sets it: settings.QUOTA_NAME or a foreign one's name
    outside: list[tuple[str, int]] = field(default_factory=list)  # foreign, unscoped
    scoped: list[ScopedLimit] = field(default_factory=list)

    @property
    def foreign_binds(self) -> bool:
        return self.limit < self.granted

    def text(self) -> str:
        """'granted 17, effective limit 16 (gpu-quota binds)'."""
        return f"granted {self.granted}, effective limit {self.limit} ({self.binding} binds)"

    def after_granting(self, extra: int) -> int:
        """The effective limit once ``extra`` more is granted."""
        return min([self.granted + extra] + [v for _, v in self.outside])


def _int(value) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def effective_limits(
    granted: dict[str, int], foreign: Iterable[ForeignQuota], portal_name: str
) -> dict[str, EffectiveLimit]:
    """Per resource: the minimum over the portal's quota (what is granted now) and every
    present, unscoped foreign quota; scoped ones are listed, not counted. Pure."""
    out: dict[str, EffectiveLimit] = {}
    foreign = [fq for fq in foreign if fq.present]
    resources = set(granted)
    for fq in foreign:
        resources |= {k.removeprefix(PREFIX) for k in fq.hard}
    for resource in sorted(resources):
        own = int(granted.get(resource, 0))
        row = EffectiveLimit(resource=resource, granted=own, limit=own, binding=portal_name)
        for fq in foreign:
            value = _int(fq.hard.get(PREFIX + resource))
            if value is None:
                continue
            if fq.scoped:
                row.scoped.append(ScopedLimit(fq.name, value, fq.scope_text()))
                continue
            row.outside.append((fq.name, value))
            if value < row.limit:
                row.limit, row.binding = value, fq.name
        out[resource] = row
    return out


def foreign_by_namespace(namespaces) -> dict:
    """Present foreign quotas per namespace id, in one query."""
    out = defaultdict(list)
    for fq in ForeignQuota.objects.filter(namespace__in=namespaces, gone_at__isnull=True):
        out[fq.namespace_id].append(fq)
    return out


# -- usage ----------------------------------------------------------------------------


class PodRow(NamedTuple):
    """A GPU pod as the limits read it: GpuPod's fields, without a model instance."""

    cluster_id: object
    namespace: str
    name: str
    node_id: object
    node_name: str
    phase: str
    requests: dict
    gpu_selector: dict


def pods_by_namespace(
    namespaces: list[TeamNamespace], *, waiting: bool = False
) -> dict[object, list[PodRow]]:
    """GPU pods (non-terminal, inventory mirror) per namespace id, in one query;
    ``waiting``: only those pending without a node (quotas/demand.py)."""
    if not namespaces:
        return {}
    by_key = {(ns.cluster_id, ns.name): ns.pk for ns in namespaces}
    out = defaultdict(list)
    rows = GpuPod.objects.filter(
        cluster_id__in={ns.cluster_id for ns in namespaces},
        namespace__in={ns.name for ns in namespaces},
    )
    if waiting:
        rows = rows.filter(phase="Pending", node_name="")
    for row in rows.values_list(*PodRow._fields):
        ns_id = by_key.get((row[0], row[1]))
        if ns_id is not None:
            out[ns_id].append(PodRow._make(row))
    return out


@dataclass
class Requested:
    """What one namespace's pods request: ``totals`` by quota key (``requests.<resource>``;
    on a DRA cluster, devices per DeviceClass, quotas/dra.py) and ``pods`` counted by the
    set of resources each asks for (what a lowered limit would affect, :func:`affected`)."""

    totals: dict[str, int] = field(default_factory=dict)
    pods: dict[frozenset, int] = field(default_factory=dict)


def requested_by_namespace(namespaces: list[TeamNamespace]) -> dict[object, Requested]:
    """:class:`Requested` per namespace id, summed by PostgreSQL in two queries (plus the
    pods of namespaces on a DRA cluster): a member's namespaces can hold thousands of pods,
    and reading them as rows cost 0.2 s of a 0.4 s approvals page at 5,000 nodes."""
    out: dict = defaultdict(Requested)
    dra = [ns for ns in namespaces if ns.cluster.is_dra]
    if dra:
        from .dra import pod_usage

        pods = pods_by_namespace(dra)
        for ns in dra:
            mine = pods.get(ns.pk, [])
            out[ns.pk].totals = pod_usage(ns, mine)
            out[ns.pk].pods = Counter(frozenset(p.requests or {}) for p in mine)
    plain = [ns for ns in namespaces if not ns.cluster.is_dra]
    if not plain:
        return out
    by_key = {(str(ns.cluster_id), ns.name): ns.pk for ns in plain}
    table = GpuPod._meta.db_table
    where = "p.cluster_id = ANY(%s::uuid[]) AND p.namespace = ANY(%s)"
    params = [sorted({str(ns.cluster_id) for ns in plain}), sorted({ns.name for ns in plain})]
    totals = f"""
        SELECT p.cluster_id::text, p.namespace, r.key, SUM(r.value::bigint)
        FROM {table} p, jsonb_each_text(p.requests) r WHERE {where} GROUP BY 1, 2, 3
    """  # noqa: S608 - the table name is the model's
    key_sets = f"""
        SELECT p.cluster_id::text, p.namespace,
               ARRAY(SELECT jsonb_object_keys(p.requests)), COUNT(*)
        FROM {table} p WHERE {where} GROUP BY 1, 2, 3
    """  # noqa: S608 - the table name is the model's
    with connection.cursor() as cursor:
        cursor.execute(totals, params)
        for cluster_id, namespace, resource, total in cursor.fetchall():
            if (ns_id := by_key.get((cluster_id, namespace))) is not None:
                out[ns_id].totals[PREFIX + resource] = int(total)
        cursor.execute(key_sets, params)
        for cluster_id, namespace, keys, count in cursor.fetchall():
            if (ns_id := by_key.get((cluster_id, namespace))) is not None:
                mine = out[ns_id].pods
                mine[frozenset(keys)] = mine.get(frozenset(keys), 0) + count
    return out


def affected(requested: Requested, resources: Iterable[str]) -> int:
    """How many of the namespace's pods ask for one of ``resources`` (names without the
    ``requests.`` prefix): those :func:`pods_over` would list."""
    resources = set(resources)
    return sum(n for keys, n in requested.pods.items() if resources & keys)


def usage(ns: TeamNamespace, requested: Requested, foreign: Iterable[ForeignQuota] = ()) -> dict:
    """``requests.<resource>`` -> units in use (see the module doc): what the pods request
    (the namespace's :func:`requested_by_namespace`) against the quotas' readings."""
    used: dict[str, int] = defaultdict(int, requested.totals)
    readings = [(ns.quota_status or {}).get("used") or {}]
    readings += [fq.used for fq in foreign if fq.present and not fq.scoped]
    for reading in readings:
        for key, value in reading.items():
            counted = key.startswith(PREFIX) or key.endswith(DEVICES)
            if counted and _int(value) is not None:
                used[key] = max(used[key], _int(value))
    return dict(used)


def lowering(
    ns: TeamNamespace, hard: dict[str, int], used: dict[str, int], confirmed: dict | None = None
) -> dict[str, dict[str, int | None]]:
    """Keys that ``hard`` would set below what pods use, and lower than the quota holds
    now (re-writing a limit already in force is no lowering). ``confirmed`` values an
    admin accepted pass: a write of that value or more is not held again."""
    current = (ns.quota_status or {}).get("hard") or {}
    confirmed = confirmed or {}
    out = {}
    for key, value in hard.items():
        in_use = used.get(key, 0)
        was = _int(current.get(key))
        if value >= in_use or (was is not None and value >= was):
            continue
        ok = _int(confirmed.get(key))
        if ok is not None and value >= ok:
            continue
        out[key] = {"hard": value, "was": was, "used": in_use}
    return out


def pods_over(pods: list[PodRow], keys: Iterable[str]) -> list[PodRow]:
    """The pods that use the resources of ``keys`` (they keep running; the next ones of
    the team are refused)."""
    resources = {k.removeprefix(PREFIX) for k in keys}
    return [p for p in pods if resources & set(p.requests or {})]
