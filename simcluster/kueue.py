"""Kueue's webhooks and controllers in the simulated cluster (kubernetes-sigs/kueue).

* Mutating webhooks at create (``pkg/controller/jobs/pod/pod_webhook.go`` ``Default``,
  ``pkg/controller/jobs/job/job_webhook.go``, ``pkg/webhooks/clusterqueue_webhook.go`` and
  ``resourceflavor_webhook.go`` ``Default``): a pod with ``kueue.x-k8s.io/queue-name`` (or in a
  namespace with a LocalQueue ``default``) outside kube-system/kueue-system gets the label
  ``kueue.x-k8s.io/managed=true``, the finalizer ``kueue.x-k8s.io/managed`` and the scheduling
  gate ``kueue.x-k8s.io/admission``; such a Job is created ``suspend: true``; ClusterQueues
  and ResourceFlavors get the finalizer ``kueue.x-k8s.io/resource-in-use``.
* Validating webhooks (:mod:`simcluster.kueue_validation`) after the CRD schemas.
* One reconcile (:class:`KueueController`), queued ~20 ms after any write of a Kueue object,
  a managed pod or Job, standing in for the job reconcilers (Workload per pod/Job,
  ``pkg/controller/jobframework/reconciler.go``), the scheduler (:mod:`.kueue_admission`,
  ``pkg/scheduler/scheduler.go``), the status controllers
  (``pkg/controller/core/clusterqueue_controller.go``, ``localqueue_controller.go``,
  ``workload_controller.go``) and the finalizer removal.
"""

from __future__ import annotations

import copy
import json
import logging
from collections import defaultdict
from fractions import Fraction
from typing import Any

from simcluster import kueue_validation as kv
from simcluster import validation
from simcluster.disruption import selector_matcher
from simcluster.errors import ApiError
from simcluster.kueue_admission import Queue, Snapshot, assign, fmt
from simcluster.kueue_start import StartOps
from simcluster.kueue_status import StatusOps, set_condition
from simcluster.kueue_types import (
    GATE,
    MANAGED_LABEL,
    MANAGER,
    POD_FINALIZER,
    QUEUE_LABEL,
    RESOURCE_IN_USE,
)
from simcluster.patch import MERGE
from simcluster.resources import RT, ResourceType

log = logging.getLogger(__name__)

MUTATED = frozenset({"pods", "jobs", "clusterqueues", "resourceflavors"})
UNMANAGED_NAMESPACES = ("kube-system", "kueue-system")  # managedJobsNamespaceSelector default
TERMINAL = ("Succeeded", "Failed")

for _resource, _create, _update in (
    ("clusterqueues", kv.cluster_queue, kv.cluster_queue_update),
    ("localqueues", kv.local_queue, kv.local_queue_update),
    ("resourceflavors", kv.resource_flavor, kv.resource_flavor_update),
    ("cohorts", kv.cohort, kv.cohort_update),
    ("workloads", kv.workload, kv.workload_update),
):  # schema errors, then the CEL rules unless a schema error blocks them
    validation.register(_resource, kv.gated(_create), kv.gated(_update))


def _d(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _cond(obj: dict[str, Any], typ: str) -> dict[str, Any]:
    for c in _d(obj.get("status")).get("conditions") or []:
        if _d(c).get("type") == typ:
            return c
    return {}


def _true(obj: dict[str, Any], typ: str) -> bool:
    return _cond(obj, typ).get("status") == "True"


# ------------------------------------------------------------------ webhooks
def mutate_create(cluster: Any, rt: ResourceType, ns: str, body: dict[str, Any]) -> None:
    """The mutating webhooks, in the create path (before validation)."""
    if not cluster.kueue.enabled:
        return
    meta = body.setdefault("metadata", {})
    if rt.name in ("clusterqueues", "resourceflavors"):
        fins = meta.setdefault("finalizers", [])
        if RESOURCE_IN_USE not in fins:
            fins.append(RESOURCE_IN_USE)
        if rt.name == "resourceflavors":
            # the webhook's patch is the typed object's JSON: a ResourceFlavorSpec struct is
            # never omitted (apis/kueue/v1beta2/resourceflavor_types.go, controller-runtime
            # admission.PatchResponseFromRaw)
            body.setdefault("spec", {})
        return
    if ns in UNMANAGED_NAMESPACES:
        return
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else None
    if any(_d(r).get("controller") for r in meta.get("ownerReferences") or []):
        return  # FindAncestorJobManagedByKueue: the owner is the one queued
    if not (labels or {}).get(QUEUE_LABEL) and cluster.store.get("localqueues", ns, "default"):
        labels = meta.setdefault("labels", {}) if labels is None else labels
        labels[QUEUE_LABEL] = "default"  # the default LocalQueue
    if not (labels or {}).get(QUEUE_LABEL):
        return
    spec = body.setdefault("spec", {})
    if rt.name == "jobs":
        spec["suspend"] = True  # job_webhook.go: a queued Job starts suspended
        return
    labels[MANAGED_LABEL] = "true"  # type: ignore[index]
    fins = meta.setdefault("finalizers", [])
    if POD_FINALIZER not in fins:
        fins.append(POD_FINALIZER)
    gates = spec.setdefault("schedulingGates", [])
    if not any(_d(g).get("name") == GATE for g in gates):
        gates.append({"name": GATE})


def validate_admission(
    cluster: Any, rt: ResourceType, old: dict[str, Any] | None, new: dict[str, Any], sub: str = ""
) -> None:
    """The validating webhooks (create and update; not the status subresource)."""
    if rt.name not in kv.WEBHOOKS or sub == "status" or not cluster.kueue.enabled:
        return
    if (new.get("metadata") or {}).get("deletionTimestamp"):
        return  # finalizer removal of an object being deleted
    kv.check_webhook(rt.name, new)


class KueueController(StartOps, StatusOps):
    """The Kueue manager's reconcilers, as one pass over the store (see module docstring)."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.enabled = True
        self.exclude_resource_prefixes: tuple[str, ...] = ()  # Configuration.resources
        # managed pods and queued Jobs by (namespace, name): no full pod scans per reconcile
        self._owned: dict[str, set[tuple[str, str]]] = {"pods": set(), "jobs": set()}
        self._waiting = False  # an ungated pod waits for a node (node/pod writes re-check)

    def configure(self, spec: Any) -> None:
        """The fleet's ``kueue`` key: ``false`` turns the webhooks and controllers off."""
        if spec is False:
            self.enabled = False
        elif isinstance(spec, dict):
            self.enabled = bool(spec.get("enabled", True))
            self.exclude_resource_prefixes = tuple(spec.get("excludeResourcePrefixes") or ())

    def on_write(
        self, rt: ResourceType, ns: str, old: dict[str, Any] | None, new: dict[str, Any] | None
    ) -> None:
        if not self.enabled:
            return
        if rt.group == "kueue.x-k8s.io":
            self._queue()
        elif rt.name in ("pods", "jobs"):
            obj = new or old or {}
            meta = obj.get("metadata") or {}
            labels = meta.get("labels") or {}
            mine = self._owned[rt.name]
            key = (ns, str(meta.get("name")))
            label = MANAGED_LABEL if rt.name == "pods" else QUEUE_LABEL
            if label in labels and new is not None:
                mine.add(key)
            else:
                mine.discard(key)
            if QUEUE_LABEL in labels or MANAGED_LABEL in labels:
                self._queue()
            elif (
                rt.name == "pods" and self._waiting and (old or {}).get("spec", {}).get("nodeName")
            ):
                self._queue()  # node capacity freed: ungated pods may bind now
        elif rt.name == "nodes" and self._waiting:
            self._queue()
        elif rt.name == "namespaces" and self.cluster.store.count("clusterqueues"):
            self._queue()  # labels a ClusterQueue's namespaceSelector may match

    def _queue(self) -> None:
        self.cluster.controllers.add_after(("kueue",), 0.02, self.reconcile)

    # -------------------------------------------------------------- helpers
    def _objects(self, resource: str) -> list[dict[str, Any]]:
        with self.cluster.store.lock:
            recs = [
                self.cluster.store.get(resource, ns, n) for ns, n in sorted(self._owned[resource])
            ]
            return [r.obj() for r in recs if r is not None]

    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except ApiError as exc:  # a conflict with a concurrent write: the next event retries
            log.info("kueue reconcile: %s", exc)
            return None

    def _patch(
        self, resource: str, ns: str, name: str, body: dict[str, Any], sub: str = ""
    ) -> None:
        rt = RT[resource]
        raw = json.dumps(body).encode()
        self._call(
            self.cluster.op_patch,
            rt,
            ns if rt.namespaced else "",
            name,
            sub,
            raw,
            MERGE,
            {},
            MANAGER,
        )

    # -------------------------------------------------------------- reconcile
    def reconcile(self) -> None:
        c = self.cluster
        flavors = {f["metadata"]["name"]: f for f in c.list("resourceflavors")}
        cqs = {q["metadata"]["name"]: q for q in c.list("clusterqueues")}
        lqs = {
            (q["metadata"]["namespace"], q["metadata"]["name"]): q for q in c.list("localqueues")
        }
        pods, jobs = self._objects("pods"), self._objects("jobs")
        wls = {(w["metadata"]["namespace"], w["metadata"]["name"]): w for w in c.list("workloads")}
        owners = self._sync_owners(pods, jobs, wls)
        self._admit(flavors, cqs, lqs, wls, owners)
        wls = {(w["metadata"]["namespace"], w["metadata"]["name"]): w for w in c.list("workloads")}
        self._start_admitted(flavors, wls, owners)
        self._statuses(flavors, cqs, lqs, wls, owners)
        self._finalizers(flavors, cqs, wls)

    # -------------------------------------------------------------- scheduler
    def _build(
        self,
        flavors: dict[str, Any],
        cqs: dict[str, Any],
        wls: dict[Any, dict[str, Any]],
        owners: dict[Any, Any],
    ) -> Snapshot:
        snap = Snapshot([Queue.from_object(q) for q in cqs.values()])
        for key, wl in wls.items():
            if not self._holds_quota(key, wl, owners):
                continue
            adm = _d(_d(wl.get("status")).get("admission"))
            q = snap.queues.get(str(adm.get("clusterQueue")))
            if q is None:
                continue
            for psa in adm.get("podSetAssignments") or []:
                fl = _d(_d(psa).get("flavors"))
                for r, v in _d(psa.get("resourceUsage")).items():
                    if r in fl:
                        q.usage[(fl[r], r)] += Fraction(kv.qty(v))
        return snap

    @staticmethod
    def _holds_quota(key: Any, wl: dict[str, Any], owners: dict[Any, Any]) -> bool:
        if not _true(wl, "QuotaReserved") or _true(wl, "Finished"):
            return False
        refs = wl["metadata"].get("ownerReferences") or []
        return not refs or key in owners  # an owner that is gone releases its quota

    def _inactive(self, cq: dict[str, Any] | None, flavors: dict[str, Any]) -> list[str]:
        spec = _d((cq or {}).get("spec"))
        names = [
            str(_d(f).get("name"))
            for rg in spec.get("resourceGroups") or []
            for f in _d(rg).get("flavors") or []
        ]
        return [n for n in names if n not in flavors]

    def _admit(
        self,
        flavors: dict[str, Any],
        cqs: dict[str, Any],
        lqs: dict[Any, Any],
        wls: dict[Any, dict[str, Any]],
        owners: dict[Any, Any],
    ) -> None:
        snap = self._build(flavors, cqs, wls, owners)
        pending: dict[str, list[tuple[Any, dict[str, Any]]]] = defaultdict(list)
        for key, wl in wls.items():
            if _true(wl, "QuotaReserved") or _true(wl, "Finished"):
                continue
            spec = _d(wl.get("spec"))
            if spec.get("active") is False:
                continue
            lq = lqs.get((key[0], spec.get("queueName")))
            if lq is None:
                self._pending(
                    wl, "Misconfigured", f"LocalQueue {spec.get('queueName')} doesn't exist"
                )
                continue
            cq_name = str(_d(lq.get("spec")).get("clusterQueue") or "")
            cq = cqs.get(cq_name)
            if cq is None:
                self._pending(wl, "Misconfigured", f"ClusterQueue {cq_name} doesn't exist")
                continue
            stopped = _d(cq.get("spec")).get("stopPolicy", "None") != "None"
            if self._inactive(cq, flavors) or stopped or cq["metadata"].get("deletionTimestamp"):
                self._pending(wl, "Suspended", f"ClusterQueue {cq_name} is inactive")
                continue
            if _d(lq.get("spec")).get("stopPolicy", "None") != "None":
                self._pending(wl, "Suspended", f"LocalQueue {spec.get('queueName')} is inactive")
                continue
            if not self._namespace_matches(cq, key[0]):  # workload/resources.go: a nil
                msg = "workload namespace doesn't match ClusterQueue selector"  # selector: none
                self._pending(wl, "Misconfigured", msg)
                continue
            pending[cq_name].append((key, wl))
        order = {
            n: sorted(
                ws,
                key=lambda kw: (
                    -int(_d(kw[1].get("spec")).get("priority") or 0),
                    kw[1]["metadata"].get("creationTimestamp", ""),
                    kw[0],
                ),
            )
            for n, ws in pending.items()
        }
        blocked: set[str] = set()
        # two passes: workloads that fit without borrowing first (the scheduler orders a
        # cycle's heads so: scheduler.go entryOrdering), then those that borrow
        for allow_borrow in (False, True):
            for cq_name in sorted(order):
                q = snap.queues[cq_name]
                for key, wl in list(order[cq_name]):
                    if cq_name in blocked:
                        break
                    result = self._try(snap, q, wl, flavors)
                    if isinstance(result, str):
                        if allow_borrow:
                            self._pending(wl, *self._reason(result))
                            if q.strategy == "StrictFIFO":
                                blocked.add(cq_name)
                        elif q.strategy == "StrictFIFO":
                            break
                        continue
                    assignments, borrows = result
                    if borrows and not allow_borrow:
                        if q.strategy == "StrictFIFO":
                            break
                        continue
                    for psa in assignments:
                        for r, f in psa["flavors"].items():
                            q.usage[(f, r)] += Fraction(kv.qty(psa["resourceUsage"][r]))
                    order[cq_name].remove((key, wl))
                    self._reserve(wl, cq_name, assignments)

    def _namespace_matches(self, cq: dict[str, Any], ns: str) -> bool:
        rec = self.cluster.store.get("namespaces", "", ns)
        labels = ((rec.obj() if rec else {}).get("metadata") or {}).get("labels") or {}
        return bool(selector_matcher(_d(cq.get("spec")).get("namespaceSelector"))(labels))

    @staticmethod
    def _reason(message: str) -> tuple[str, str]:
        if "maximum capacity" in message:
            return "ExceedsMaxQuota", message
        if "insufficient unused quota" in message:
            return "WaitingForQuota", message
        return "NoMatchingFlavor", message

    def _try(
        self, snap: Snapshot, q: Queue, wl: dict[str, Any], flavors: dict[str, Any]
    ) -> str | tuple[list[dict[str, Any]], bool]:
        out: list[dict[str, Any]] = []
        borrows = False
        msgs: list[str] = []
        for ps in _d(wl.get("spec")).get("podSets") or []:
            a = assign(snap, q, ps, flavors, self.exclude_resource_prefixes)
            if a.message:
                msgs.append(
                    f"couldn't assign flavors to pod set {ps.get('name', 'main')}: {a.message}"
                )
                continue
            borrows = borrows or a.borrows
            out.append(
                {
                    "name": ps.get("name", "main"),
                    "flavors": a.flavors,
                    "resourceUsage": {r: fmt(r, v) for r, v in a.usage.items() if r in a.flavors},
                    "count": int(ps.get("count", 1)),
                }
            )
        return "; ".join(msgs) if msgs else (out, borrows)

    def _pending(self, wl: dict[str, Any], reason: str, message: str) -> None:
        conds = copy.deepcopy(_d(wl.get("status")).get("conditions") or [])
        gen = int(wl["metadata"].get("generation") or 1)
        if set_condition(conds, "QuotaReserved", "False", reason, message, gen):
            m = wl["metadata"]
            self._patch(
                "workloads", m["namespace"], m["name"], {"status": {"conditions": conds}}, "status"
            )

    def _reserve(self, wl: dict[str, Any], cq: str, assignments: list[dict[str, Any]]) -> None:
        """``workload.SetQuotaReservation`` and (no admission checks) the Admitted condition."""
        conds = copy.deepcopy(_d(wl.get("status")).get("conditions") or [])
        gen = int(wl["metadata"].get("generation") or 1)
        set_condition(
            conds,
            "QuotaReserved",
            "True",
            "QuotaReserved",
            f"Quota reserved in ClusterQueue {cq}",
            gen,
        )
        set_condition(conds, "Admitted", "True", "Admitted", "The workload is admitted", gen)
        m = wl["metadata"]
        status = {
            "admission": {"clusterQueue": cq, "podSetAssignments": assignments},
            "conditions": conds,
        }
        self._patch("workloads", m["namespace"], m["name"], {"status": status}, "status")
