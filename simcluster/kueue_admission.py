"""Kueue's admission arithmetic: quota, usage, what a cohort lends, flavor assignment.

Pure functions over plain dicts (no store access), following kubernetes-sigs/kueue:

* ``pkg/cache/scheduler/resource_node.go`` (``available``): a ClusterQueue's available
  quota is its local part ``max(0, guaranteed - usage)`` (``guaranteed = nominal -
  lendingLimit`` when a lendingLimit is set, else 0) plus what its cohort has left (the sum of
  the members' lendable quota ``nominal - guaranteed`` minus the members' usage above their
  guaranteed part), capped by the queue's ``borrowingLimit``; without a cohort it is
  ``nominal - usage``.
* ``pkg/scheduler/flavorassigner/flavorassigner.go``: each resource a pod set requests must
  be covered by a resource group of the ClusterQueue (``resource X unavailable in
  ClusterQueue``); the group's flavors are tried in order; a flavor whose taints the pods do
  not tolerate or whose node labels contradict their node selector is skipped; a flavor fits
  when every requested resource of the group fits; ``whenCanBorrow: MayStopSearch`` takes the
  first flavor that fits by borrowing, ``TryNextFlavor`` keeps looking for one that fits
  without; messages ``insufficient unused quota for R in flavor F, N more needed`` and
  ``insufficient quota for R in flavor F, previously considered podsets requests (…) +
  current podset request (…) > maximum capacity (…)``.
* ``pkg/workload/resources.go``: a pod set's requests are the pods' effective requests
  times ``count``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from simcluster.daemonsets import tolerates
from simcluster.kueue_validation import qty
from simcluster.quantity import format_quantity
from simcluster.quota import effective

Usage = dict[tuple[str, str], Fraction]  # (flavor, resource) -> amount
_BINARY = ("memory", "ephemeral-storage")


def _d(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def fmt(resource: str, value: Fraction) -> str:
    """``resource.Quantity.String()`` of a total (binary units for memory)."""
    return format_quantity(
        Fraction(value), binary=resource in _BINARY or resource.startswith("hugepages-")
    )


@dataclass
class Quota:
    nominal: Fraction
    borrowing: Fraction | None = None
    lending: Fraction | None = None

    @property
    def guaranteed(self) -> Fraction:
        return self.nominal - self.lending if self.lending is not None else Fraction(0)


@dataclass
class Queue:
    """A ClusterQueue as the scheduler's cache holds it."""

    name: str
    cohort: str
    strategy: str
    when_can_borrow: str
    groups: list[tuple[list[str], list[str]]]  # (covered resources, flavor names)
    quotas: dict[tuple[str, str], Quota] = field(default_factory=dict)
    usage: Usage = field(default_factory=lambda: defaultdict(Fraction))

    @classmethod
    def from_object(cls, cq: dict[str, Any]) -> Queue:
        spec = _d(cq.get("spec"))
        q = cls(
            name=cq["metadata"]["name"],
            cohort=str(spec.get("cohortName") or ""),
            strategy=str(spec.get("queueingStrategy") or "BestEffortFIFO"),
            when_can_borrow=str(
                _d(spec.get("flavorFungibility")).get("whenCanBorrow") or "MayStopSearch"
            ),
            groups=[],
        )
        for rg in spec.get("resourceGroups") or []:
            covered = [str(r) for r in _d(rg).get("coveredResources") or []]
            flavors = []
            for fq in _d(rg).get("flavors") or []:
                fname = str(_d(fq).get("name"))
                flavors.append(fname)
                for rq in _d(fq).get("resources") or []:
                    rq = _d(rq)
                    q.quotas[(fname, str(rq.get("name")))] = Quota(
                        Fraction(qty(rq.get("nominalQuota"))),
                        Fraction(qty(rq["borrowingLimit"])) if "borrowingLimit" in rq else None,
                        Fraction(qty(rq["lendingLimit"])) if "lendingLimit" in rq else None,
                    )
            q.groups.append((covered, flavors))
        return q

    def flavors(self) -> list[str]:
        return [f for _, fl in self.groups for f in fl]


class Snapshot:
    """ClusterQueues with their usage, grouped by cohort (``pkg/cache/scheduler``)."""

    def __init__(self, queues: list[Queue]) -> None:
        self.queues = {q.name: q for q in queues}
        self.cohorts: dict[str, list[Queue]] = defaultdict(list)
        for q in queues:
            if q.cohort:
                self.cohorts[q.cohort].append(q)

    def _cohort_available(self, cohort: str, fr: tuple[str, str]) -> Fraction:
        total = Fraction(0)
        for m in self.cohorts[cohort]:
            quota = m.quotas.get(fr)
            if quota is None:
                continue
            total += (quota.nominal - quota.guaranteed) - max(
                Fraction(0), m.usage[fr] - quota.guaranteed
            )
        return total

    def available(self, q: Queue, fr: tuple[str, str]) -> Fraction:
        quota = q.quotas.get(fr, Quota(Fraction(0)))
        used = q.usage[fr]
        if not q.cohort:
            return max(Fraction(0), quota.nominal - used)
        local = max(Fraction(0), quota.guaranteed - used)
        parent = self._cohort_available(q.cohort, fr)
        if quota.borrowing is not None:
            stored = quota.nominal - quota.guaranteed
            used_in_parent = max(Fraction(0), used - quota.guaranteed)
            parent = min(stored - used_in_parent + quota.borrowing, parent)
        return local + max(Fraction(0), parent)

    def potential(self, q: Queue, fr: tuple[str, str]) -> Fraction:
        """``PotentialAvailable``: the most this queue could ever hold (no other usage)."""
        quota = q.quotas.get(fr, Quota(Fraction(0)))
        if not q.cohort:
            return quota.nominal
        lend = sum(
            (m.quotas[fr].nominal - m.quotas[fr].guaranteed)
            for m in self.cohorts[q.cohort]
            if fr in m.quotas
        )
        cap = quota.guaranteed + lend
        if quota.borrowing is not None:
            cap = min(cap, quota.nominal + quota.borrowing)
        return cap

    def borrowed(self, q: Queue, fr: tuple[str, str]) -> Fraction:
        quota = q.quotas.get(fr, Quota(Fraction(0)))
        return max(Fraction(0), q.usage[fr] - quota.nominal)


def podset_requests(podset: dict[str, Any]) -> dict[str, Fraction]:
    """Total requests of a pod set: effective pod requests x count (``pods`` not counted)."""
    spec = _d(_d(podset.get("template")).get("spec"))
    count = int(podset.get("count", 1) or 0)
    return {k: v.value * count for k, v in effective(spec, "requests").items() if v.value}


def _flavor_compatible(flavor: dict[str, Any], spec: dict[str, Any]) -> str:
    """'' or why the pod template cannot run on the flavor (taints, node selector)."""
    fs = _d(flavor.get("spec"))
    name = flavor["metadata"]["name"]
    tols = list(spec.get("tolerations") or []) + list(fs.get("tolerations") or [])
    for t in fs.get("nodeTaints") or []:
        if _d(t).get("effect") in ("NoSchedule", "NoExecute") and not any(
            tolerates(_d(tol), _d(t)) for tol in tols
        ):
            value = f"={t['value']}" if _d(t).get("value") else ""
            return f"untolerated taint {{{t.get('key')}{value} {t.get('effect')}}} in flavor {name}"
    labels = _d(fs.get("nodeLabels"))
    for k, v in _d(spec.get("nodeSelector")).items():
        if k in labels and labels[k] != v:
            return f"flavor {name} doesn't match node affinity"
    return ""


@dataclass
class Assignment:
    flavors: dict[str, str]  # resource -> flavor
    usage: dict[str, Fraction]
    borrows: bool
    message: str = ""


def assign(
    snap: Snapshot,
    q: Queue,
    podset: dict[str, Any],
    flavors: dict[str, dict[str, Any]],
    exclude_prefixes: tuple[str, ...] = (),
) -> Assignment:
    """Flavors for one pod set, or an Assignment with ``message`` when it does not fit."""
    req = {
        r: v
        for r, v in podset_requests(podset).items()
        if not any(r.startswith(p) for p in exclude_prefixes)
    }
    spec = _d(_d(podset.get("template")).get("spec"))
    out = Assignment({}, req, False)
    reasons: list[str] = []
    for r in req:
        if not any(r in covered for covered, _ in q.groups):
            return Assignment({}, req, False, f"resource {r} unavailable in ClusterQueue")
    for covered, names in q.groups:
        wanted = [r for r in covered if r in req]
        if not wanted:
            continue
        chosen: tuple[str, bool] | None = None
        for fname in names:
            flavor = flavors.get(fname)
            if flavor is None:
                reasons.append(f"flavor {fname} not found")
                continue
            why = _flavor_compatible(flavor, spec)
            if why:
                reasons.append(why)
                continue
            fits, borrow = True, False
            for r in wanted:
                fr = (fname, r)
                val = req[r]  # previously considered pod sets of this workload: none
                cap = snap.potential(q, fr)
                if val > cap:
                    reasons.append(
                        f"insufficient quota for {r} in flavor {fname}, previously considered "
                        f"podsets requests ({fmt(r, Fraction(0))}) + current podset request "
                        f"({fmt(r, req[r])}) > maximum capacity ({fmt(r, cap)})"
                    )
                    fits = False
                    break
                avail = snap.available(q, fr)
                if val > avail:
                    reasons.append(
                        f"insufficient unused quota for {r} in flavor {fname}, "
                        f"{fmt(r, req[r] - avail)} more needed"
                    )
                    fits = False
                    break
                if q.usage[fr] + val > q.quotas.get(fr, Quota(Fraction(0))).nominal:
                    borrow = True
            if not fits:
                continue
            if not borrow:
                chosen = (fname, False)
                break
            if chosen is None:
                chosen = (fname, True)
            if q.when_can_borrow == "MayStopSearch":
                break
        if chosen is None:
            return Assignment({}, req, False, ", ".join(sorted(reasons)))
        for r in wanted:
            out.flavors[r] = chosen[0]
        out.borrows = out.borrows or chosen[1]
    return out
