"""Create a fleet's objects through the Kubernetes API (``gpuemu.load``).

The fleet file (schema in simcluster/fleet.py) is expanded by
:func:`simcluster.fleet.load_fleet`, exactly as the simulator does, and its objects are
created in dependency order, each kind with a small thread pool:

1. namespaces (plus the operator's), then the ``default`` ServiceAccount of each namespace
   that gets pods: the ServiceAccount admission plugin refuses a pod naming a missing one
   (kubernetes ``plugin/pkg/admission/serviceaccount/admission.go``), and the
   serviceaccount controller creates it only some time after the namespace appears, so the
   load creates it (the same empty object);
2. PriorityClasses (priority admission resolves ``priorityClassName`` at create);
3. the ClusterPolicy CRD (it needs time to become Established);
4. nodes. ``POST`` keeps a node's ``status`` (kubernetes
   ``pkg/registry/core/node/strategy.go`` ``PrepareForCreate`` only drops disabled fields;
   the kubelet registers its node the same way), so capacity, allocatable, addresses and
   nodeInfo go in with the create. Which nodes kwok manages is the harness' choice
   (devstack/controlplane.py: every node but those labelled
   ``gpuemu.gpu-portal.dev/kubelet: none``; kwok's usual opt-in is the annotation
   ``kwok.x-k8s.io/node: fake``, set too so either configuration works). A ready node goes
   in with NO conditions: kwok's ``node-initialize`` stage marks it Ready (sigs.k8s.io/kwok
   ``kustomize/stage/node/fast/node-initialize.yaml``) and renews its Lease. A node the
   fleet marks not ready is labelled ``kubelet: none`` (no kwok annotation) and keeps the
   fleet's ``Ready=False`` condition, with the ``node.kubernetes.io/not-ready:NoSchedule``
   taint the node lifecycle controller keeps on it (``pkg/controller/nodelifecycle``). The
   API server's ``TaintNodesByCondition`` admission plugin gives every new node that taint
   (kubernetes ``plugin/pkg/admission/nodetaint/admission.go``: "Node controller will
   remove the taint when the node becomes ready"); nothing schedules there before (DaemonSet
   pods do not tolerate it either, ``pkg/controller/daemon/util/daemonset_util.go``), so the
   load returns once kwok reports each loaded node Ready and the node lifecycle controller
   (run by devstack/controlplane.py) has lifted the taint. A node hosting
   terminated fleet pods starts as ``kubelet: none`` too and is handed to kwok only after
   those pods' statuses are written, so kwok never sees them Pending and never races the
   status write (its ``pod-ready`` stage only selects Pending pods);
5. ConfigMaps;
6. pods. A pod's ``POST`` drops its status (``pkg/registry/core/pod/strategy.go``
   ``PrepareForCreate`` resets it to Pending), so pods that are Succeeded/Failed, unscheduled,
   or on a node kwok does not manage get the fleet's status through ``pods/status``.
   Pre-bound pods keep ``spec.nodeName``. Unscheduled Pending pods name the scheduler
   ``gpuemu-hold`` (``hold_pending=True``, default) so kube-scheduler, which only takes pods
   of its own profiles (``pkg/scheduler/eventhandlers.go`` ``responsibleForPod``), leaves them
   Pending as the fleet describes; with ``hold_pending=False`` it schedules any that fit,
   and a pod marked ``schedule: true`` in the fleet is always left to it (its status is
   then the scheduler's, never the fleet's ``message``);
7. ResourceQuotas, after the pods: the quota admission plugin would refuse pods while a
   fresh quota has no status yet, and fleet pods above a quota are what a lowered quota
   looks like (the quota controller then reports ``used`` above ``hard``);
8. the fleet's Kueue objects, when its ``kueue`` key is a mapping with ``resourceFlavors``,
   ``cohorts``, ``clusterQueues`` and/or ``localQueues`` lists (complete objects,
   ``apiVersion`` defaulting to ``kueue.x-k8s.io/v1beta2``);
9. the GPU Operator (fleet ``gpuOperator`` unless ``false``): the ClusterPolicy and its
   status, ``default-mig-parted-config`` unless a custom config is named, the operands'
   ServiceAccounts and DaemonSets (see :mod:`gpuemu.operands`).

Creating an object that exists is not an error (the load is repeatable: a test fleet can be
loaded into a cluster that already has the operator).
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from devstack.kubeapi import KubeAPI, KubeError, wait_for
from gpuemu import operands
from simcluster.clusterpolicy import mig_settings
from simcluster.fleet import Fleet, load_fleet, namespace_object, now_iso

log = logging.getLogger("gpuemu.load")
FIELD_MANAGER = "gpuemu-fleet"
# A fleet pod's start in the past (its ``age``), read by devstack/kwok-stages/pod-ready.yaml
# as the startTime kwok reports: the API server sets creationTimestamp itself.
STARTED_AT_ANNOTATION = "gpuemu.gpu-portal.dev/started-at"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"  # kwok's --manage-nodes-with-annotation-selector
# devstack/controlplane.py runs kwok with --manage-nodes-with-label-selector=<this>!=none
NO_KUBELET_LABEL = "gpuemu.gpu-portal.dev/kubelet"
HOLD_SCHEDULER = "gpuemu-hold"
NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
KUEUE_KINDS = (  # Kueue's own dependency order: flavors and cohorts before queues
    ("resourceFlavors", "ResourceFlavor"),
    ("cohorts", "Cohort"),
    ("clusterQueues", "ClusterQueue"),
    ("localQueues", "LocalQueue"),
)
_TRANSIENT = {429, 500, 502, 503, 504}


@dataclass
class LoadReport:
    """What was created (``counts`` per kind; existing objects count too) and how long it took."""

    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    existing: int = 0
    phases: dict[str, float] = field(default_factory=dict)  # seconds per kind

    def __str__(self) -> str:
        parts = ", ".join(f"{n} {kind}" for kind, n in self.counts.items() if n)
        return f"{parts} in {self.seconds:.1f} s"


class _Loader:
    def __init__(self, api: KubeAPI, workers: int) -> None:
        self.api = api
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gpuemu-load")
        self.report = LoadReport()

    def create(
        self, resource: str, obj: dict[str, Any], namespace: str = ""
    ) -> dict[str, Any] | None:
        """POST one object; None when it exists already. Transient errors are retried."""
        res = self.api.resource(resource)
        body = dict(obj)
        body.setdefault("apiVersion", res.group_version)
        body.setdefault("kind", res.kind)
        ns = namespace or (obj.get("metadata") or {}).get("namespace", "")
        path = res.path(ns if res.namespaced else "")
        for attempt in range(8):
            try:
                return self.api.request("POST", path, body, params={"fieldManager": FIELD_MANAGER})
            except KubeError as exc:
                if exc.status == 409 and exc.reason == "AlreadyExists":
                    self.report.existing += 1
                    return None
                retry = (
                    exc.status in _TRANSIENT
                    or (
                        # quota admission before the quota controller's first sync
                        exc.status == 403 and "status unknown for quota" in exc.message
                    )
                    or (
                        # Kueue's pod webhook before its informer has the new namespace (kueue
                        # v0.17 pkg/controller/jobs/pod/pod_webhook.go, PodWebhook.Default)
                        exc.status == 404 and "admission webhook" in exc.message
                    )
                )
                if not retry or attempt == 7:
                    raise
            time.sleep(min(2.0, 0.05 * 2**attempt))
        return None

    def each(self, kind: str, items: Iterable[Any], fn: Callable[[Any], Any]) -> list[Any]:
        """Run ``fn`` over ``items`` on the pool; the first error is raised after all ran."""
        began = time.monotonic()
        futures = [self.pool.submit(fn, item) for item in items]
        results, error = [], None
        for fut in futures:
            try:
                results.append(fut.result())
            except Exception as exc:
                error = error or exc
        if error is not None:
            raise error
        self.report.counts[kind] = self.report.counts.get(kind, 0) + len(futures)
        self.report.phases[kind] = self.report.phases.get(kind, 0.0) + time.monotonic() - began
        return results


def _clean_meta(obj: dict[str, Any]) -> dict[str, Any]:
    """A fleet object ready to POST: no uid, creationTimestamp or status."""
    out = copy.deepcopy(obj)
    meta = out.setdefault("metadata", {})
    for k in ("uid", "creationTimestamp", "resourceVersion", "managedFields"):
        meta.pop(k, None)
    out.pop("status", None)
    return out


def _aged(timestamp: str, slack_s: float = 60.0) -> bool:
    """Whether a fleet timestamp lies more than ``slack_s`` in the past (an ``age:`` key)."""
    then = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return (datetime.now(UTC) - then).total_seconds() > slack_s


def _ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def node_body(node: dict[str, Any], *, kwok: bool) -> dict[str, Any]:
    """The node to POST: the fleet's status less the conditions kwok writes; ``kwok=False``
    keeps kwok away for now (module doc, step 4)."""
    body = _clean_meta(node)
    status = copy.deepcopy(node.get("status") or {})
    meta = body["metadata"]
    ready = _ready(node)
    if ready and kwok:
        meta.setdefault("annotations", {})[KWOK_ANNOTATION] = "fake"
    else:
        meta.setdefault("labels", {})[NO_KUBELET_LABEL] = "none"
    if ready:
        status.pop("conditions", None)
    else:
        taints = body.setdefault("spec", {}).setdefault("taints", [])
        if not any(t.get("key") == NOT_READY_TAINT["key"] for t in taints):
            taints.append(dict(NOT_READY_TAINT))
    body["status"] = status
    return body


def _pod_needs_status(pod: dict[str, Any], kwok_nodes: set[str]) -> bool:
    phase = (pod.get("status") or {}).get("phase", "Pending")
    node = pod["spec"].get("nodeName", "")
    return phase in ("Succeeded", "Failed") or not node or node not in kwok_nodes


def _status_patch(pod: dict[str, Any]) -> dict[str, Any]:
    status = copy.deepcopy(pod.get("status") or {})
    status.pop("qosClass", None)  # set by the server at create; not ours to change
    return {"status": status}


def load(
    api: KubeAPI,
    fleet: Fleet | dict[str, Any] | str | Path | None,
    *,
    workers: int = 8,
    hold_pending: bool = True,
    operator: bool = True,
) -> LoadReport:
    """Create ``fleet``'s objects through ``api`` (module docstring); returns a report.

    ``operator=False`` skips the GPU Operator's part even when the fleet has one.
    """
    began = time.monotonic()
    fl = fleet if isinstance(fleet, Fleet) else load_fleet(fleet)
    ld = _Loader(api, workers)
    try:
        _load(ld, fl, hold_pending=hold_pending, operator=operator)
    finally:
        ld.pool.shutdown(wait=True)
    ld.report.seconds = time.monotonic() - began
    log.info("loaded fleet %s: %s", fl.name, ld.report)
    return ld.report


def _load(ld: _Loader, fl: Fleet, *, hold_pending: bool, operator: bool) -> None:
    api = ld.api
    op_spec = fl.gpu_operator if operator else None
    op_ns = str((op_spec or {}).get("namespace") or "gpu-operator")

    # 1. namespaces (and the operator's), then their default ServiceAccounts
    namespaces = [_clean_meta(ns) for ns in fl.namespaces]
    names = {ns["metadata"]["name"] for ns in namespaces}
    if op_spec is not None and op_ns not in names:
        namespaces.append(_clean_meta(namespace_object(op_ns, None, now_iso())))
    ld.each("namespaces", namespaces, lambda ns: ld.create("namespaces", ns))
    need_sa = sorted({p["metadata"]["namespace"] for p in fl.pods})
    _default_service_accounts(ld, need_sa)

    # 2. priority classes; 3. the CRD
    if fl.dra:  # the driver's DeviceClasses, as its Helm chart installs them
        from gpuemu.dra import DEVICE_CLASSES

        ld.each(
            "deviceclasses",
            copy.deepcopy(DEVICE_CLASSES),
            lambda dc: ld.create("deviceclasses", dc),
        )
    ld.each(
        "priorityclasses",
        [_clean_meta(pc) for pc in fl.priorityclasses],
        lambda pc: ld.create("priorityclasses", pc),
    )
    if op_spec is not None:
        ensure_crd(ld)

    # 4. nodes
    kwok_nodes = {n["metadata"]["name"] for n in fl.nodes if _ready(n)}
    later = {
        p["spec"]["nodeName"]
        for p in fl.pods
        if p["spec"].get("nodeName") in kwok_nodes
        and (p.get("status") or {}).get("phase") in ("Succeeded", "Failed")
    }
    ld.each(
        "nodes",
        [node_body(n, kwok=n["metadata"]["name"] not in later) for n in fl.nodes],
        lambda n: ld.create("nodes", n),
    )

    # 5. configmaps; 6. pods (+ statuses), then kwok for the nodes held back
    ld.each(
        "configmaps",
        [_clean_meta(cm) for cm in fl.configmaps],
        lambda cm: ld.create("configmaps", cm),
    )

    def make_pod(pod: dict[str, Any]) -> None:
        body = _clean_meta(pod)
        created = pod["metadata"].get("creationTimestamp")
        if created and _aged(created):  # the fleet's ``age``: devstack/kwok-stages/pod-ready
            body["metadata"].setdefault("annotations", {})[STARTED_AT_ANNOTATION] = created
        unscheduled = not pod["spec"].get("nodeName")
        if unscheduled and hold_pending and pod["status"].get("phase") == "Pending":
            body["spec"]["schedulerName"] = HOLD_SCHEDULER
        made = ld.create("pods", body)
        if made is not None and _pod_needs_status(pod, kwok_nodes - later):
            meta = pod["metadata"]
            api.patch(
                "pods", meta["name"], _status_patch(pod), meta["namespace"], subresource="status"
            )

    def key(pod: dict[str, Any]) -> tuple[str, str]:
        return pod["metadata"]["namespace"], pod["metadata"]["name"]

    ld.each("pods", [p for p in fl.pods if key(p) not in fl.scheduled], make_pod)
    # after every pre-bound pod, so the scheduler sees what they hold
    ld.each(
        "pods for the scheduler",
        [_clean_meta(p) for p in fl.pods if key(p) in fl.scheduled],
        lambda body: ld.create("pods", body),
    )
    ld.each(
        "nodes handed to kwok",
        sorted(later),
        lambda name: api.patch(
            "nodes",
            name,
            {
                "metadata": {
                    "labels": {NO_KUBELET_LABEL: None},
                    "annotations": {KWOK_ANNOTATION: "fake"},
                }
            },
        ),
    )

    # 7. quotas; 8. Kueue
    ld.each(
        "resourcequotas",
        [_clean_meta(q) for q in fl.resourcequotas],
        lambda q: ld.create("resourcequotas", q),
    )
    _load_kueue(ld, fl.kueue)

    # 9. the GPU Operator
    if op_spec is not None:
        load_operator(ld, op_spec, op_ns)
    wait_nodes_ready(ld, sorted(kwok_nodes))


def _untainted(node: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The node's taints without ``not-ready:NoSchedule``; None when it has none."""
    taints = (node.get("spec") or {}).get("taints") or []
    kept = [t for t in taints if t.get("key") != NOT_READY_TAINT["key"]]
    return kept if len(kept) != len(taints) else None


def wait_nodes_ready(ld: _Loader, names: list[str], timeout: float | None = None) -> None:
    """Wait until each named node is Ready (kwok) and without ``not-ready:NoSchedule`` (the
    node lifecycle controller's NoSchedule pass, ``node_lifecycle_controller.go``
    ``doNoScheduleTaintingPass``; module docstring, step 4)."""
    todo = set(names)
    timeout = timeout if timeout is not None else max(120.0, 0.1 * len(names))
    deadline = time.monotonic() + timeout
    while todo:
        todo -= {
            n["metadata"]["name"]
            for n in ld.api.list("nodes")
            if n["metadata"]["name"] in todo and _ready(n) and _untainted(n) is None
        }
        if not todo:
            break
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"{len(todo)} node(s) not Ready by kwok and untainted by the node lifecycle "
                f"controller within {timeout:.0f} s"
            )
        time.sleep(0.2 if len(todo) < 200 else 1.0)  # each round lists every node
    ld.report.counts["nodes ready"] = len(names)
    ld.report.phases["nodes ready"] = time.monotonic() - (deadline - timeout)


def _default_service_accounts(ld: _Loader, namespaces: list[str]) -> None:
    """Each namespace's ``default`` ServiceAccount, created now rather than waited for: the
    serviceaccount controller (``pkg/controller/serviceaccount/serviceaccounts_controller.go``)
    creates the same empty object some time after the namespace appears, and takes one that
    exists as done (an AlreadyExists either way round is harmless)."""
    ld.each(
        "default serviceaccounts",
        namespaces,
        lambda ns: ld.create("serviceaccounts", {"metadata": {"name": "default", "namespace": ns}}),
    )


def _load_kueue(ld: _Loader, spec: Any) -> None:
    if not isinstance(spec, dict):
        return
    if spec.get("excludeResourcePrefixes"):
        log.warning(
            "kueue.excludeResourcePrefixes is Kueue's Configuration, set where Kueue is "
            "started (devstack/controlplane.py), not through the API: ignored here"
        )
    for key, kind in KUEUE_KINDS:
        objs = []
        for obj in spec.get(key) or []:
            body = _clean_meta(obj)
            body.setdefault("apiVersion", "kueue.x-k8s.io/v1beta2")
            body.setdefault("kind", kind)
            objs.append(body)
        if objs:
            res = ld.api.resource_for(objs[0]["apiVersion"], kind)
            ld.each(res.name, objs, lambda o, r=res.name: ld.create(r, o))


def ensure_crd(ld: _Loader) -> None:
    """The ClusterPolicy CRD, applied unless one is installed already (a cluster with the
    operator, or a harness that keeps it in its baseline)."""
    began = time.monotonic()
    try:
        ld.api.get("customresourcedefinitions", operands.CRD_NAME)
    except KubeError as exc:
        if exc.status != 404:
            raise
        ld.api.apply(operands.crd())
    ld.report.phases["clusterpolicy crd"] = time.monotonic() - began


def load_operator(ld: _Loader, spec: dict[str, Any], namespace: str) -> None:
    """ClusterPolicy (+status), default ConfigMap, operand ServiceAccounts and DaemonSets."""
    api = ld.api
    began = time.monotonic()
    wait_for(
        lambda: any(
            c.get("type") == "Established" and c.get("status") == "True"
            for c in (
                api.get("customresourcedefinitions", operands.CRD_NAME).get("status") or {}
            ).get("conditions", [])
        ),
        timeout=60,
        what=f"CRD {operands.CRD_NAME} established",
    )
    obj, status = operands.cluster_policy(spec)
    created = wait_for(
        lambda: ld.create("clusterpolicies", obj) or {"existing": True},
        timeout=30,
        what="ClusterPolicy create (discovery of the new CRD)",
    )
    if "existing" not in created:
        api.patch(
            "clusterpolicies", obj["metadata"]["name"], {"status": status}, subresource="status"
        )
    ld.report.counts["clusterpolicies"] = 1
    ld.report.phases["clusterpolicies"] = time.monotonic() - began
    policy = api.get("clusterpolicies", obj["metadata"]["name"])
    settings = mig_settings(policy)
    if settings["enabled"] and not settings["config_name"]:
        ld.each(
            "configmaps",
            [operands.default_configmap(namespace, policy)],
            lambda cm: ld.create("configmaps", cm),
        )
    ld.each(
        "serviceaccounts",
        operands.service_accounts(namespace),
        lambda sa: ld.create("serviceaccounts", sa),
    )
    ld.each("runtimeclasses", [operands.runtime_class(policy)],
            lambda rc: ld.create("runtimeclasses", rc))  # fmt: skip
    ld.each(
        "daemonsets",
        operands.daemonsets(namespace, policy),
        lambda ds: ld.create("daemonsets", ds),
    )
