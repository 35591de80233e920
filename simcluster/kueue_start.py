"""Kueue's job integrations: a Workload per pod/Job, starting admitted work, a minimal bind.

``pkg/controller/jobframework/reconciler.go`` and ``workload_names.go``: a Workload per
managed pod / queued Job, Finished when the owner is done; (kueue.py's mixin).

``pkg/controller/jobframework/reconciler.go`` (``startJob``) with ``podset_info.go``
(``Merge``: the admitted flavors' ``nodeLabels`` into the pod set's nodeSelector, their
tolerations appended): a Job is unsuspended with its template changed so; a pod
(``pkg/controller/jobs/pod/pod_controller.go`` ``Run``) loses the gate
``kueue.x-k8s.io/admission`` and gains the selector and tolerations. The simulator has no
kube-scheduler, so an ungated pod is then bound here (see ``_bind``).
"""

from __future__ import annotations

import copy
import hashlib
from collections import defaultdict
from fractions import Fraction
from typing import Any

from simcluster import kueue_validation as kv
from simcluster.daemonsets import untolerated
from simcluster.fleet import now_iso
from simcluster.kueue_status import _d, _true, set_condition
from simcluster.kueue_types import API_VERSION, GATE, MANAGER, POD_FINALIZER, QUEUE_LABEL
from simcluster.quota import effective
from simcluster.resources import RT

TERMINAL = ("Succeeded", "Failed")


def workload_name(kind: str, group: str, name: str, uid: str) -> str:
    """``GetWorkloadNameForOwnerWithGVK`` (jobframework/workload_names.go), short names."""
    digest = hashlib.sha1(
        f"{kind}\n{group}\n{name}\n{uid}".encode(), usedforsecurity=False
    ).hexdigest()[:5]
    return f"{(kind.lower() + '-' + name)[:57]}-{digest}"


class StartOps:
    """Starting admitted pods and Jobs (a mixin of :class:`simcluster.kueue.KueueController`)."""

    cluster: Any
    _patch: Any
    _waiting: bool

    # ------------------------------------------------------- start admitted jobs
    # ---------------------------------------------------------- job reconcilers
    def _sync_owners(
        self, pods: list[dict[str, Any]], jobs: list[dict[str, Any]], wls: dict[Any, dict[str, Any]]
    ) -> dict[tuple[str, str], tuple[str, dict[str, Any]]]:
        """Workload per pod/Job (created when missing, Finished when the owner is done);
        returns workload key -> (owner kind, owner)."""
        owners: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
        for kind, group, objs in (("Pod", "", pods), ("Job", "batch", jobs)):
            for o in objs:
                m = o["metadata"]
                ns = m["namespace"]
                key = (ns, workload_name(kind, group, m["name"], m["uid"]))
                owners[key] = (kind, o)
                wl = wls.get(key)
                done, success, message = self._owner_finished(kind, o)
                if wl is None:
                    if not done and not m.get("deletionTimestamp"):
                        self._create_workload(kind, o, key[1])
                elif done and not _true(wl, "Finished"):
                    self._finish(wl, success, message)
                fins = m.get("finalizers") or []
                if kind == "Pod" and POD_FINALIZER in fins and (done or m.get("deletionTimestamp")):
                    rest = [f for f in fins if f != POD_FINALIZER]
                    self._patch("pods", ns, m["name"], {"metadata": {"finalizers": rest or None}})
        return owners

    @staticmethod
    def _owner_finished(kind: str, o: dict[str, Any]) -> tuple[bool, bool, str]:
        st = _d(o.get("status"))
        if kind == "Pod":
            phase = st.get("phase")
            return phase in TERMINAL, phase == "Succeeded", str(st.get("message") or "")
        for cnd in st.get("conditions") or []:
            if _d(cnd).get("status") == "True" and cnd.get("type") in ("Complete", "Failed"):
                ok = cnd["type"] == "Complete"
                return (
                    True,
                    ok,
                    "Job finished successfully" if ok else str(cnd.get("message") or ""),
                )
        return False, False, ""

    def _create_workload(self, kind: str, o: dict[str, Any], name: str) -> None:
        m = o["metadata"]
        if kind == "Pod":
            spec = copy.deepcopy(o.get("spec") or {})
            spec["schedulingGates"] = [
                g for g in spec.get("schedulingGates") or [] if g.get("name") != GATE
            ]
            if not spec["schedulingGates"]:
                spec.pop("schedulingGates")
            spec.pop("nodeName", None)
            template = {"metadata": {"labels": dict(m.get("labels") or {})}, "spec": spec}
            count, api_version = 1, "v1"
        else:
            js = o.get("spec") or {}
            template = copy.deepcopy(js.get("template") or {})
            count, api_version = int(js.get("parallelism", 1) or 1), "batch/v1"
        spec: dict[str, Any] = {
            "queueName": m["labels"][QUEUE_LABEL],
            "podSets": [{"name": "main", "count": count, "template": template}],
        }
        prio = _d(template.get("spec")).get("priority")
        pcn = _d(template.get("spec")).get("priorityClassName")
        if pcn:
            spec["priorityClassRef"] = {
                "group": "scheduling.k8s.io",
                "kind": "PriorityClass",
                "name": pcn,
            }
            pc = self.cluster.store.get("priorityclasses", "", pcn)  # priority.go: the value
            spec["priority"] = int(pc.obj().get("value") or 0) if pc is not None else int(prio or 0)
        elif prio is not None:
            spec["priority"] = int(prio)
        body = {
            "apiVersion": API_VERSION,
            "kind": "Workload",
            "metadata": {
                "name": name,
                "namespace": m["namespace"],
                "labels": {"kueue.x-k8s.io/job-uid": m["uid"]},
                "ownerReferences": [
                    {
                        "apiVersion": api_version,
                        "kind": kind,
                        "name": m["name"],
                        "uid": m["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": spec,
        }
        self._call(self.cluster.op_create, RT["workloads"], m["namespace"], body, {}, MANAGER)

    def _finish(self, wl: dict[str, Any], success: bool, message: str) -> None:
        conds = copy.deepcopy(_d(wl.get("status")).get("conditions") or [])
        gen = int(wl["metadata"].get("generation") or 1)
        reason = "Succeeded" if success else "Failed"
        set_condition(conds, "Finished", "True", reason, message, gen)
        m = wl["metadata"]
        self._patch(
            "workloads", m["namespace"], m["name"], {"status": {"conditions": conds}}, "status"
        )

    def _start_admitted(
        self, flavors: dict[str, Any], wls: dict[Any, Any], owners: dict[Any, Any]
    ) -> None:
        waiting = False
        for key, wl in wls.items():
            if key not in owners or not _true(wl, "Admitted") or _true(wl, "Finished"):
                continue
            kind, o = owners[key]
            adm = _d(_d(wl.get("status")).get("admission"))
            psa = (adm.get("podSetAssignments") or [{}])[0]
            names = sorted(set(_d(psa.get("flavors")).values()))
            selector: dict[str, str] = {}
            tolerations: list[dict[str, Any]] = []
            for n in names:  # podset_info.go: the flavors' node labels and tolerations
                fs = _d(flavors.get(n, {}).get("spec"))
                selector.update(_d(fs.get("nodeLabels")))
                tolerations += [t for t in fs.get("tolerations") or [] if isinstance(t, dict)]
            m = o["metadata"]
            if kind == "Job":
                if _d(o.get("spec")).get("suspend"):
                    tspec = _d(_d(_d(o.get("spec")).get("template")).get("spec"))
                    tols = list(tspec.get("tolerations") or [])
                    tols += [t for t in tolerations if t not in tols]
                    tmpl: dict[str, Any] = {
                        "nodeSelector": {**_d(tspec.get("nodeSelector")), **selector}
                    }
                    if tols:
                        tmpl["tolerations"] = tols
                    body = {"spec": {"suspend": False, "template": {"spec": tmpl}}}
                    self._patch("jobs", m["namespace"], m["name"], body)
                continue
            spec = _d(o.get("spec"))
            if m.get("deletionTimestamp") or _d(o.get("status")).get("phase") in TERMINAL:
                continue
            gates = spec.get("schedulingGates") or []
            if any(_d(g).get("name") == GATE for g in gates):
                tols = list(spec.get("tolerations") or [])
                tols += [t for t in tolerations if t not in tols]
                rest = [g for g in gates if _d(g).get("name") != GATE]
                pspec: dict[str, Any] = {
                    "schedulingGates": rest or None,
                    "nodeSelector": {**_d(spec.get("nodeSelector")), **selector},
                }
                if tols != list(spec.get("tolerations") or []):
                    pspec["tolerations"] = tols
                self._patch("pods", m["namespace"], m["name"], {"spec": pspec})
            elif not spec.get("nodeName") and not gates:
                waiting = not self._bind(m["namespace"], m["name"]) or waiting
        self._waiting = waiting

    def _bind(self, ns: str, name: str) -> bool:
        """A minimal scheduler: the first Ready, schedulable node (by name) whose labels match
        the pod's nodeSelector, whose NoSchedule/NoExecute taints it tolerates and whose
        allocatable still holds its requests; ``spec.nodeName`` set as the binding
        subresource does (``pkg/registry/core/pod/storage/storage.go`` ``assignPod``)."""
        c = self.cluster
        with c.store.lock:
            rec = c.store.get("pods", ns, name)
            if rec is None:
                return True
            pod = rec.obj()
            spec = pod.get("spec") or {}
            if spec.get("nodeName") or spec.get("schedulingGates"):
                return True
            want = effective(spec, "requests")
            used: dict[str, dict[str, Fraction]] = defaultdict(lambda: defaultdict(Fraction))
            for p in c.list("pods"):
                node = (p.get("spec") or {}).get("nodeName")
                if node and (p.get("status") or {}).get("phase") not in TERMINAL:
                    for r, q in effective(p["spec"], "requests").items():
                        used[node][r] += q.value
                    used[node]["pods"] += 1
            sel = _d(spec.get("nodeSelector"))
            for node in c.list("nodes"):
                nm, labels = node["metadata"]["name"], node["metadata"].get("labels") or {}
                nspec = node.get("spec") or {}
                if nspec.get("unschedulable") or not c.kubelets.ready(nm):
                    continue
                if any(labels.get(k) != v for k, v in sel.items()):
                    continue
                if untolerated(
                    nspec.get("taints") or [],
                    spec.get("tolerations") or [],
                    ("NoSchedule", "NoExecute"),
                ):
                    continue
                alloc = _d(_d(node.get("status")).get("allocatable"))
                if any(
                    used[nm][r] + q.value > Fraction(kv.qty(alloc.get(r))) for r, q in want.items()
                ):
                    continue
                if used[nm]["pods"] + 1 > Fraction(kv.qty(alloc.get("pods", "110"))):
                    continue
                old = copy.deepcopy(pod)
                pod["spec"]["nodeName"] = nm
                conds = [
                    x
                    for x in pod.get("status", {}).get("conditions") or []
                    if x.get("type") != "PodScheduled"
                ]
                conds.insert(
                    0,
                    {
                        "type": "PodScheduled",
                        "status": "True",
                        "lastProbeTime": None,
                        "lastTransitionTime": now_iso(),
                    },
                )
                pod.setdefault("status", {})["conditions"] = conds
                c.store.put("pods", pod, "MODIFIED")
                c._after_write(RT["pods"], ns, old, pod)
                c.kubelets.admit(ns, pod)
                return True
            return False  # no node fits: it stays Pending (unschedulable)
