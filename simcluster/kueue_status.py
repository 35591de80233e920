"""Kueue's status controllers and finalizers (kueue.py's mixin).

``pkg/controller/core/clusterqueue_controller.go`` with ``pkg/cache/scheduler/clusterqueue.go``
(condition ``Active``: ``Ready`` "Can admit new workloads", ``FlavorNotFound`` "Can't admit
new workloads: references missing ResourceFlavor(s): a,b.", ``Stopped``;
``flavorsReservation``/``flavorsUsage`` per flavor and covered resource with ``borrowed``;
``pendingWorkloads``, ``reservingWorkloads``, ``admittedWorkloads``),
``localqueue_controller.go`` (``Ready`` "Can submit new workloads to localQueue",
``ClusterQueueDoesNotExist``/``ClusterQueueIsInactive`` "Can't submit new workloads to
clusterQueue", ``Stopped`` "LocalQueue is stopped"; its own workloads' counts and usage) and
the ``kueue.x-k8s.io/resource-in-use`` finalizers of ClusterQueues and ResourceFlavors.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from fractions import Fraction
from typing import Any

from simcluster import kueue_validation as kv
from simcluster.fleet import now_iso
from simcluster.kueue_admission import fmt
from simcluster.kueue_types import RESOURCE_IN_USE


def _d(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _true(obj: dict[str, Any], typ: str) -> bool:
    return any(
        _d(c).get("type") == typ and _d(c).get("status") == "True"
        for c in _d(obj.get("status")).get("conditions") or []
    )


def set_condition(
    conds: list[dict[str, Any]], typ: str, status: str, reason: str, message: str, gen: int
) -> bool:
    """``apimeta.SetStatusCondition``: True when something changed."""
    for c in conds:
        if c.get("type") == typ:
            if (c.get("status"), c.get("reason"), c.get("message")) == (status, reason, message):
                return False
            if c.get("status") != status:
                c["lastTransitionTime"] = now_iso()
            c.update(status=status, reason=reason, message=message, observedGeneration=gen)
            return True
    conds.append(
        {
            "type": typ,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": now_iso(),
            "observedGeneration": gen,
        }
    )
    return True


class StatusOps:
    """Status writes (a mixin of :class:`simcluster.kueue.KueueController`)."""

    _patch: Any
    _build: Any
    _holds_quota: Any
    _inactive: Any

    # ---------------------------------------------------------------- status
    def _statuses(
        self,
        flavors: dict[str, Any],
        cqs: dict[str, Any],
        lqs: dict[Any, Any],
        wls: dict[Any, Any],
        owners: dict[Any, Any],
    ) -> None:
        snap = self._build(flavors, cqs, wls, owners)
        counts: dict[Any, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        lq_usage: dict[Any, dict[tuple[str, str], Fraction]] = defaultdict(
            lambda: defaultdict(Fraction)
        )
        for key, wl in wls.items():
            if _true(wl, "Finished"):
                continue
            lq = lqs.get((key[0], _d(wl.get("spec")).get("queueName")))
            cq_name = str(_d((lq or {}).get("spec")).get("clusterQueue") or "")
            holds = self._holds_quota(key, wl, owners)
            if holds:
                cq_name = str(_d(_d(wl.get("status")).get("admission")).get("clusterQueue"))
            elif _true(wl, "QuotaReserved"):
                continue
            which = ("reservingWorkloads", "admittedWorkloads") if holds else ("pendingWorkloads",)
            for target in (("cq", cq_name), ("lq", key[0], _d(wl.get("spec")).get("queueName"))):
                for w in which:
                    counts[target][w] += 1
            if holds:
                for psa in _d(_d(wl.get("status")).get("admission")).get("podSetAssignments") or []:
                    fl = _d(_d(psa).get("flavors"))
                    for r, v in _d(psa.get("resourceUsage")).items():
                        if r in fl:
                            lq_usage[(key[0], _d(wl.get("spec")).get("queueName"))][(fl[r], r)] += (
                                Fraction(kv.qty(v))
                            )
        for name, cq in cqs.items():
            q = snap.queues[name]
            missing = self._inactive(cq, flavors)
            stopped = _d(cq.get("spec")).get("stopPolicy", "None") != "None"
            reasons, msgs = [], []  # clusterqueue.go inactiveReason: stopped first
            if stopped:
                reasons.append("Stopped")
                msgs.append("is stopped")
            if missing:
                reasons.append("FlavorNotFound")
                msgs.append(f"references missing ResourceFlavor(s): {','.join(missing)}")
            if reasons:
                active = ("False", reasons[0], f"Can't admit new workloads: {', '.join(msgs)}.")
            else:
                active = ("True", "Ready", "Can admit new workloads")
            usage = []
            for covered, fnames in q.groups:
                for f in fnames:
                    usage.append(
                        {
                            "name": f,
                            "resources": [
                                {
                                    "name": r,
                                    "total": fmt(r, q.usage[(f, r)]),
                                    "borrowed": fmt(r, snap.borrowed(q, (f, r))),
                                }
                                for r in covered
                            ],
                        }
                    )
            n = counts[("cq", name)]
            status = {
                "flavorsReservation": usage,
                "flavorsUsage": copy.deepcopy(usage),
                "pendingWorkloads": n["pendingWorkloads"],
                "reservingWorkloads": n["reservingWorkloads"],
                "admittedWorkloads": n["admittedWorkloads"],
            }
            self._write_status("clusterqueues", "", cq, status, active)
        for (ns, name), lq in lqs.items():
            cq = cqs.get(str(_d(lq.get("spec")).get("clusterQueue") or ""))
            if cq is None:
                active = (
                    "False",
                    "ClusterQueueDoesNotExist",
                    "Can't submit new workloads to clusterQueue",
                )
            elif (
                self._inactive(cq, flavors)
                or _d(cq.get("spec")).get("stopPolicy", "None") != "None"
            ):
                active = (
                    "False",
                    "ClusterQueueIsInactive",
                    "Can't submit new workloads to clusterQueue",
                )
            elif _d(lq.get("spec")).get("stopPolicy", "None") != "None":
                active = ("False", "Stopped", "LocalQueue is stopped")
            else:
                active = ("True", "Ready", "Can submit new workloads to localQueue")
            use = lq_usage[(ns, name)]
            fl = []
            if cq is not None:
                for covered, fnames in snap.queues[cq["metadata"]["name"]].groups:
                    for f in fnames:
                        fl.append(
                            {
                                "name": f,
                                "resources": [
                                    {"name": r, "total": fmt(r, use[(f, r)])} for r in covered
                                ],
                            }
                        )
            n = counts[("lq", ns, name)]
            status = {
                "flavorsReservation": fl,
                "flavorsUsage": copy.deepcopy(fl),
                "pendingWorkloads": n["pendingWorkloads"],
                "reservingWorkloads": n["reservingWorkloads"],
                "admittedWorkloads": n["admittedWorkloads"],
            }
            self._write_status("localqueues", ns, lq, status, active)

    def _write_status(
        self,
        resource: str,
        ns: str,
        obj: dict[str, Any],
        status: dict[str, Any],
        active: tuple[str, str, str],
    ) -> None:
        old = _d(obj.get("status"))
        conds = copy.deepcopy(old.get("conditions") or [])
        gen = int(obj["metadata"].get("generation") or 1)
        changed = set_condition(conds, "Active", *active, gen)
        if not changed and all(old.get(k) == v for k, v in status.items()):
            return
        status["conditions"] = conds
        self._patch(resource, ns, obj["metadata"]["name"], {"status": status}, "status")

    # ------------------------------------------------------------- finalizers
    def _finalizers(
        self, flavors: dict[str, Any], cqs: dict[str, Any], wls: dict[Any, Any]
    ) -> None:
        """``resource-in-use``: a ClusterQueue goes once no workload holds its quota, a
        ResourceFlavor once no ClusterQueue names it (clusterqueue/resourceflavor controllers)."""
        for name, cq in cqs.items():
            fins = cq["metadata"].get("finalizers") or []
            if not cq["metadata"].get("deletionTimestamp") or RESOURCE_IN_USE not in fins:
                continue
            if any(
                _true(w, "QuotaReserved")
                and not _true(w, "Finished")
                and _d(_d(w.get("status")).get("admission")).get("clusterQueue") == name
                for w in wls.values()
            ):
                continue
            rest = [f for f in fins if f != RESOURCE_IN_USE]
            self._patch("clusterqueues", "", name, {"metadata": {"finalizers": rest or None}})
        used = {
            str(_d(f).get("name"))
            for cq in cqs.values()
            for rg in _d(cq.get("spec")).get("resourceGroups") or []
            for f in _d(rg).get("flavors") or []
        }
        for name, fl in flavors.items():
            fins = fl["metadata"].get("finalizers") or []
            if (
                fl["metadata"].get("deletionTimestamp")
                and RESOURCE_IN_USE in fins
                and name not in used
            ):
                rest = [f for f in fins if f != RESOURCE_IN_USE]
                self._patch("resourceflavors", "", name, {"metadata": {"finalizers": rest or None}})
