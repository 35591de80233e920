"""The DaemonSet controller: one pod per eligible node, and the DaemonSet's status.

After ``pkg/controller/daemon/daemon_controller.go`` (``manage``, ``podsShouldBeOnNode``,
``syncNodes``, ``updateDaemonSetStatus``), ``pkg/controller/daemon/util/daemonset_util.go``
(``CreatePodTemplate``, ``AddOrUpdateDaemonPodTolerations``,
``ReplaceDaemonSetPodNodeNameNodeAffinity``) and the predicates of
``NodeShouldRunDaemonPod``: the node name, the template's ``nodeSelector`` and required node
affinity (``component-helpers/scheduling/corev1/nodeaffinity``), and the node's
``NoSchedule``/``NoExecute`` taints against the template's tolerations plus the
controller's own (``k8s.io/api/core/v1/toleration.go`` ``ToleratesTaint``,
``pkg/apis/core/v1/helper/helpers.go`` ``FindMatchingUntoleratedTaint``).

- A node that should run the pod and has none gets one: ``generateName: <ds>-``, the
  template's labels plus ``controller-revision-hash`` and ``pod-template-generation``, a
  controller ``ownerReference`` (``blockOwnerDeletion``), the default tolerations
  (``not-ready``/``unreachable`` NoExecute; ``disk-pressure``, ``memory-pressure``,
  ``pid-pressure``, ``unschedulable`` NoSchedule; ``network-unavailable`` with
  ``hostNetwork``) and a required node affinity on ``metadata.name``. It is created
  through the API's create path (admission: ServiceAccount, quota), with ``spec.nodeName``
  set as the scheduler would bind it, so the node's kubelet starts it. A refused create is
  retried after ``retry_s``, doubling on each refusal in a row (the rate-limited queue).
- A node that must not keep it (``nodeSelector``/affinity no longer match, an untolerated
  ``NoExecute`` taint) has its pods deleted gracefully; a new pod is created only once the
  old one is gone (a terminating pod still counts as the node's pod). An untolerated
  ``NoSchedule`` taint stops new pods but keeps running ones. Cordoned nodes keep theirs
  (the ``unschedulable`` toleration).
- Status: ``desiredNumberScheduled``, ``currentNumberScheduled``, ``numberMisscheduled``,
  ``numberReady``, ``numberAvailable`` (ready for ``minReadySeconds``),
  ``numberUnavailable``, ``updatedNumberScheduled`` (pods with the current hash),
  ``observedGeneration``, written through ``daemonsets/status`` as
  ``kube-controller-manager``.

The controller reacts (``sync_s`` later) to writes of DaemonSets, of nodes (labels, taints,
added or removed) and of the pods a DaemonSet controls. Not emulated: rolling updates of
outdated pods (``updatedNumberScheduled`` shows them), ControllerRevisions (a hash of the
template of the same shape labels the pods; nothing is stored), failed-pod backoff, surge.
"""

from __future__ import annotations

import contextlib
import json
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from simcluster import deletion
from simcluster.errors import ApiError
from simcluster.resources import RT
from simcluster.workloads import TEMPLATE_GENERATION

if TYPE_CHECKING:
    from simcluster.cluster import SimCluster

CONTROLLER = "kube-controller-manager"
_SAFE = "bcdfghjklmnpqrstvwxz2456789"
_DEFAULT_TOLERATIONS = (
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
)


def _d(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


# ------------------------------------------------------------------ predicates
def tolerates(tol: dict[str, Any], taint: dict[str, Any]) -> bool:
    """``Toleration.ToleratesTaint``."""
    if tol.get("effect") and tol["effect"] != taint.get("effect"):
        return False
    if tol.get("key") and tol["key"] != taint.get("key"):
        return False
    op = tol.get("operator") or "Equal"
    if op == "Exists":
        return True
    return op == "Equal" and (tol.get("value") or "") == (taint.get("value") or "")


def untolerated(taints: list[Any], tolerations: list[Any], effects: tuple[str, ...]) -> bool:
    """``FindMatchingUntoleratedTaint`` restricted to ``effects``: is there one?"""
    for taint in taints:
        taint = _d(taint)
        if taint.get("effect") not in effects:
            continue
        if not any(tolerates(_d(t), taint) for t in tolerations):
            return True
    return False


def _requirement(req: dict[str, Any], values: dict[str, str]) -> bool:
    key, op = req.get("key") or "", req.get("operator") or ""
    vals = [str(v) for v in req.get("values") or []]
    if op == "In":
        return key in values and values[key] in vals
    if op == "NotIn":
        return key not in values or values[key] not in vals
    if op == "Exists":
        return key in values
    if op == "DoesNotExist":
        return key not in values
    if op in ("Gt", "Lt") and key in values and len(vals) == 1:
        try:
            have, bound = int(values[key]), int(vals[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def _term(term: dict[str, Any], labels: dict[str, str], name: str) -> bool:
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches no objects
    return all(_requirement(_d(r), labels) for r in exprs) and all(
        _requirement(_d(r), {"metadata.name": name}) for r in fields
    )


def matches_node(spec: dict[str, Any], node: dict[str, Any]) -> bool:
    """``nodeName``, ``nodeSelector`` and required node affinity (``GetRequiredNodeAffinity``)."""
    meta = _d(node.get("metadata"))
    name, labels = str(meta.get("name") or ""), _d(meta.get("labels"))
    if spec.get("nodeName") and spec["nodeName"] != name:
        return False
    for k, v in _d(spec.get("nodeSelector")).items():
        if labels.get(k) != v:
            return False
    required = _d(_d(_d(spec.get("affinity")).get("nodeAffinity"))).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if isinstance(required, dict):
        terms = required.get("nodeSelectorTerms") or []
        if not any(_term(_d(t), labels, name) for t in terms):
            return False
    return True


def should_run(spec: dict[str, Any], node: dict[str, Any]) -> tuple[bool, bool]:
    """``NodeShouldRunDaemonPod``: (shouldRun, shouldContinueRunning) for a daemon pod spec."""
    if not matches_node(spec, node):
        return False, False
    taints = _d(node.get("spec")).get("taints") or []
    tols = spec.get("tolerations") or []
    if untolerated(taints, tols, ("NoExecute", "NoSchedule")):
        return False, not untolerated(taints, tols, ("NoExecute",))
    return True, True


# -------------------------------------------------------------------- the pods
def add_daemon_tolerations(spec: dict[str, Any]) -> None:
    """``AddOrUpdateDaemonPodTolerations``, each through ``AddOrUpdateTolerationInPodSpec``:
    a toleration with the same key, operator, value and effect is replaced by the default
    one (its ``tolerationSeconds`` go), otherwise the default is appended."""
    tols = list(spec.get("tolerations") or []) if isinstance(spec.get("tolerations"), list) else []
    wanted = list(_DEFAULT_TOLERATIONS)
    if spec.get("hostNetwork"):
        wanted.append(("node.kubernetes.io/network-unavailable", "NoSchedule"))
    for key, effect in wanted:
        tol = {"key": key, "operator": "Exists", "effect": effect}
        out, updated = [], False
        for t in tols:
            t = _d(t)
            same = (
                t.get("key") == key
                and t.get("effect") == effect
                and (t.get("operator") or "Equal") == "Exists"
                and not t.get("value")
            )
            if same:
                out.append(tol)
                updated = True
            else:
                out.append(t)
        tols = out if updated else [*out, tol]
    spec["tolerations"] = tols


def template_hash(template: dict[str, Any]) -> str:
    """As ``controller.ComputeHash``: a 32-bit FNV-1a hash, ``rand.SafeEncodeString``-d.

    The real one hashes the Go struct's dump, so the value differs; its shape (up to ten
    characters of ``bcdfghjklmnpqrstvwxz2456789``) and its stability do not.
    """
    h = 0x811C9DC5
    for byte in json.dumps(template, sort_keys=True).encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(_SAFE[int(c) % len(_SAFE)] for c in str(h))


def daemon_pod(ds: dict[str, Any], node: str, hash_: str) -> dict[str, Any]:
    """The pod ``syncNodes`` creates for ``node`` (``GetPodFromTemplate`` + node affinity)."""
    meta, spec = ds["metadata"], _d(ds.get("spec"))
    tpl = json.loads(json.dumps(_d(spec.get("template"))))
    tmeta, pspec = _d(tpl.get("metadata")), _d(tpl.get("spec"))
    labels = dict(_d(tmeta.get("labels")))
    labels["controller-revision-hash"] = hash_
    labels["pod-template-generation"] = str(
        _d(meta.get("annotations")).get(TEMPLATE_GENERATION) or meta.get("generation") or 1
    )
    pmeta: dict[str, Any] = {"generateName": f"{meta['name']}-", "labels": labels}
    if tmeta.get("annotations"):
        pmeta["annotations"] = dict(tmeta["annotations"])
    if tmeta.get("finalizers"):
        pmeta["finalizers"] = list(tmeta["finalizers"])
    pmeta["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    add_daemon_tolerations(pspec)
    affinity = pspec.get("affinity") if isinstance(pspec.get("affinity"), dict) else {}
    node_aff = _d(affinity.get("nodeAffinity"))
    node_aff["requiredDuringSchedulingIgnoredDuringExecution"] = {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        ]
    }
    affinity["nodeAffinity"] = node_aff
    pspec["affinity"] = affinity
    pspec["nodeName"] = node  # bound as the scheduler would (the simulator has none)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pmeta, "spec": pspec}


def _now() -> float:
    return time.time()


def _epoch(ts: str) -> float:
    try:
        return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except (TypeError, ValueError):
        return 0.0


def _ready_since(pod: dict[str, Any]) -> float | None:
    for c in _d(pod.get("status")).get("conditions") or []:
        if _d(c).get("type") == "Ready":
            return _epoch(c.get("lastTransitionTime") or "") if c.get("status") == "True" else None
    return None


def _controller_uid(pod: dict[str, Any]) -> str:
    for ref in _d(pod.get("metadata")).get("ownerReferences") or []:
        if _d(ref).get("controller") and ref.get("kind") == "DaemonSet":
            return str(ref.get("uid") or "")
    return ""


class DaemonSetController:
    """Keeps every DaemonSet's pods and status in step with the nodes."""

    def __init__(self, cluster: SimCluster, sync_s: float = 0.05, retry_s: float = 1.0) -> None:
        self.cluster = cluster
        self.sync_s = sync_s
        self.retry_s = retry_s
        self.failures: dict[tuple[str, str], int] = {}  # refused creates in a row

    # ------------------------------------------------------------- informers
    def enqueue(self, ns: str, name: str, delay: float | None = None) -> None:
        self.cluster.controllers.add_after(
            ("daemonset", ns, name),
            self.sync_s if delay is None else delay,
            lambda: self._sync_task(ns, name),
        )

    def _enqueue_all(self) -> None:
        for ns, name in list(self.cluster.store.objects["daemonsets"]):
            self.enqueue(ns, name)

    def on_daemonset_write(self, ns: str, new: dict[str, Any] | None) -> None:
        if new is not None:
            self.enqueue(ns, new["metadata"]["name"])

    def on_node_write(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if not self.cluster.store.objects["daemonsets"]:
            return
        if old is not None and new is not None:
            om, nm = old.get("metadata") or {}, new.get("metadata") or {}
            if om.get("labels") == nm.get("labels") and (old.get("spec") or {}).get("taints") == (
                new.get("spec") or {}
            ).get("taints"):
                return
        self._enqueue_all()

    def on_pod_write(self, ns: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        uid = _controller_uid(new or old or {})
        if not uid:
            return
        for rec in self.cluster.store.in_namespace("daemonsets", ns):
            if rec.obj()["metadata"].get("uid") == uid:
                self.enqueue(ns, rec.name)

    # ------------------------------------------------------------------ sync
    def _sync_task(self, ns: str, name: str) -> None:
        with self.cluster.store.lock:
            self.sync(ns, name)

    def sync(self, ns: str, name: str) -> None:
        store = self.cluster.store
        rec = store.get("daemonsets", ns, name)
        if rec is None:
            return  # its pods go with the garbage collector
        ds = rec.obj()
        if ds["metadata"].get("deletionTimestamp"):
            return
        spec = _d(ds.get("spec"))
        tpl = _d(spec.get("template"))
        hash_ = template_hash(tpl)
        probe = json.loads(json.dumps(_d(tpl.get("spec"))))
        add_daemon_tolerations(probe)  # NewPod: the predicates see the added tolerations
        nodes = [r.obj() for r in store.objects["nodes"].values()]
        by_node = self._pods_by_node(ns, ds["metadata"]["uid"])
        retry = False
        rv = store.rv
        for node in nodes:
            node_name = node["metadata"]["name"]
            run, keep = should_run(probe, node)
            pods = by_node.get(node_name, [])
            if run and not pods:
                retry |= not self._create(ns, ds, node_name, hash_)
            elif not keep:
                for pod in pods:
                    if not pod["metadata"].get("deletionTimestamp"):
                        self._delete(ns, pod["metadata"]["name"])
            else:
                self._keep_one(ns, pods)
        if store.rv != rv:  # manage wrote: the status counts what is there now
            by_node = self._pods_by_node(ns, ds["metadata"]["uid"])
        recheck = self._status(ns, ds, nodes, probe, hash_, by_node)
        if retry:  # the work queue's exponential backoff: retry_s, 2x, ... up to 5 min
            n = self.failures.get((ns, name), 0)
            self.failures[(ns, name)] = n + 1
            self.enqueue(ns, name, min(self.retry_s * 2**n, 300.0))
            return
        self.failures.pop((ns, name), None)
        if recheck is not None:
            self.enqueue(ns, name, recheck)

    def _keep_one(self, ns: str, pods: list[dict[str, Any]]) -> None:
        """Failed and succeeded daemon pods are deleted (recreated on a later sync, without
        the real failed-pod backoff); of several running ones the oldest stays."""
        running = []
        for pod in pods:
            if pod["metadata"].get("deletionTimestamp"):
                continue
            if _d(pod.get("status")).get("phase") in ("Failed", "Succeeded"):
                self._delete(ns, pod["metadata"]["name"])
            else:
                running.append(pod)
        running.sort(key=lambda p: p["metadata"].get("creationTimestamp") or "")
        for pod in running[1:]:
            self._delete(ns, pod["metadata"]["name"])

    def _pods_by_node(self, ns: str, uid: str) -> dict[str, list[dict[str, Any]]]:
        """``getNodesToDaemonPods``: the DaemonSet's pods per node, terminal deleted ones out."""
        by_node: dict[str, list[dict[str, Any]]] = {}
        needle = uid.encode()
        for prec in self.cluster.store.in_namespace("pods", ns):
            if needle not in prec.raw:  # cheap: most pods of the namespace are not ours
                continue
            pod = prec.obj()
            if _controller_uid(pod) != uid:
                continue
            phase = _d(pod.get("status")).get("phase")
            if pod["metadata"].get("deletionTimestamp") and phase in ("Succeeded", "Failed"):
                continue
            by_node.setdefault(str(_d(pod.get("spec")).get("nodeName") or ""), []).append(pod)
        return by_node

    def _create(self, ns: str, ds: dict[str, Any], node: str, hash_: str) -> bool:
        pod = daemon_pod(ds, node, hash_)
        try:
            self.cluster.op_create(RT["pods"], ns, pod, {}, CONTROLLER)
        except ApiError:
            return False  # FailedCreate (quota, a missing ServiceAccount ...): retried
        return True

    def _delete(self, ns: str, name: str) -> None:
        with contextlib.suppress(ApiError):  # already gone
            deletion.delete_object(self.cluster, RT["pods"], ns, name, deletion.DeleteOptions())

    def _status(
        self,
        ns: str,
        ds: dict[str, Any],
        nodes: list[dict[str, Any]],
        probe: dict[str, Any],
        hash_: str,
        by_node: dict[str, list[dict[str, Any]]],
    ) -> float | None:
        """``updateDaemonSetStatus``; returns when to look again (minReadySeconds)."""
        desired = current = ready = available = updated = mis = 0
        min_ready = int(_d(ds.get("spec")).get("minReadySeconds") or 0)
        now = _now()
        recheck: float | None = None
        for node in nodes:
            pods = by_node.get(node["metadata"]["name"], [])
            run, _ = should_run(probe, node)
            if not run:
                mis += 1 if pods else 0
                continue
            desired += 1
            if not pods:
                continue
            current += 1
            pod = min(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "")
            since = _ready_since(pod)
            if since is not None:
                ready += 1
                if min_ready == 0 or since + min_ready <= now:
                    available += 1
                else:
                    wait = since + min_ready - now
                    recheck = wait if recheck is None else min(recheck, wait)
            if _d(pod["metadata"].get("labels")).get("controller-revision-hash") == hash_:
                updated += 1
        status: dict[str, Any] = {
            "currentNumberScheduled": current,
            "numberMisscheduled": mis,
            "desiredNumberScheduled": desired,
            "numberReady": ready,
        }
        for k, v in (
            ("observedGeneration", int(ds["metadata"].get("generation") or 0)),
            ("updatedNumberScheduled", updated),
            ("numberAvailable", available),
            ("numberUnavailable", desired - available),
        ):
            if v:
                status[k] = v
        old = _d(ds.get("status"))
        for k in ("collisionCount", "conditions"):
            if k in old:
                status[k] = old[k]
        if status != old:
            self.cluster._write_status(
                RT["daemonsets"], ns, ds["metadata"]["name"], status, CONTROLLER
            )
        return recheck
