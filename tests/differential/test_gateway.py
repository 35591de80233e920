"""Every distinct request the portal's gateway (``inventory/kube/``) makes, as the portal.

The requests are the ones ``KubeGateway`` sends through the official client, with the
portal's ServiceAccount token and the RBAC of ``deploy/kubernetes/rbac.yaml``: version and
identity (``GatewayCore.version``, ``whoami``), one access review per row of the permission
table (``inventory/kube/permissions.py``), paged node and pod lists with label and field
selectors, the resourceVersion a watch starts from and the watch itself (410 included),
node reads, label patches and cordons, server-side apply of ResourceQuotas under the
portal's field manager, quota and LimitRange lists, quota deletion, the GPU Operator's
ClusterPolicies, evictions, the mig-parted ConfigMap in ``gpu-operator`` (read, create,
conditional replace), TokenRequest (the harness issues the portal's token with it) and the
Kueue objects. The scene (a team namespace, nodes, pods) is built once per module as the
admin, the same on both servers.
"""

from __future__ import annotations

from typing import Any

import pytest

from inventory.kube.permissions import PERMISSIONS, Scope
from tests.differential.framework import (
    STRATEGIC,
    Answer,
    Case,
    Pair,
    Request,
    Server,
    apply,
    check,
    delete,
    get,
    params,
    patch,
    post,
    put,
    wait,
)

TEAM = "team-a"
OPERATOR = "gpu-operator"
MIG_CONFIG = "gpu-quota-portal-mig-config"
KUEUE = "kueue.x-k8s.io/v1beta2"
NO_KUBELET = {"gpuemu.gpu-portal.dev/kubelet": "none"}  # kwok leaves such a node alone
GPU = {"nvidia.com/gpu.present": "true", "pool": "gpu"}
REVIEW = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
# resourceVersions and counts of the server that answered
RV_SCRUB = (r"\b\d+\b",)


def _node(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def _pod(name: str, node: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": name}},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "x"}]},
    }


def _ns_api(resource: str, name: str = "", namespace: str = TEAM) -> str:
    path = f"/api/v1/namespaces/{namespace}/{resource}"
    return f"{path}/{name}" if name else path


def _kueue(resource: str, name: str = "", namespace: str = "") -> str:
    base = f"/apis/{KUEUE}"
    if namespace:
        base += f"/namespaces/{namespace}"
    return f"{base}/{resource}/{name}" if name else f"{base}/{resource}"


def _ready(name: str) -> Request:
    """What a kubelet posts (kwok on the real cluster does it too): the node is Ready, so
    the simulator's kubelet starts the pods bound to it."""
    condition = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "kubelet is posting ready status",
    }
    return patch(
        f"/api/v1/nodes/{name}/status",
        {"status": {"conditions": [condition]}},
        content_type=STRATEGIC,
    )


SCENE: list[Any] = [
    post("/api/v1/namespaces", {"metadata": {"name": TEAM, "labels": {"team": "a"}}}),
    post("/api/v1/nodes", _node("gpu-a", GPU)),
    post("/api/v1/nodes", _node("gpu-b", GPU)),
    post("/api/v1/nodes", _node("cpu-a", {"pool": "cpu"})),
    _ready("gpu-a"),
    _ready("gpu-b"),
    post("/api/v1/nodes", _node("quiet-a", {**NO_KUBELET, "pool": "quiet"})),
    post("/api/v1/nodes", _node("quiet-b", {**NO_KUBELET, "pool": "quiet"})),
    wait(get(_ns_api("serviceaccounts", "default")), lambda a: a.status == 200),
    post(_ns_api("pods"), _pod("train-a", "gpu-a")),
    post(_ns_api("pods"), _pod("train-b", "gpu-b")),
    post(_ns_api("pods"), _pod("evict-me", "gpu-a")),
    post(_ns_api("pods"), _pod("guarded", "gpu-b", {"app": "guarded"})),
    post(
        f"/apis/policy/v1/namespaces/{TEAM}/poddisruptionbudgets",
        {
            "metadata": {"name": "guard"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        },
    ),
]


@pytest.fixture(scope="module", autouse=True)
def scene(pair: Pair) -> None:
    pair.prepare(SCENE)


def _review(verb: str, resource: str, **attrs: str) -> dict[str, Any]:
    ra = {"verb": verb, "resource": resource, **{k: v for k, v in attrs.items() if v}}
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": ra},
    }


def _access_cases() -> list[Case]:
    """One SelfSubjectAccessReview per permission the portal needs (``access_review``)."""
    out = []
    for perm in PERMISSIONS:
        namespace = {Scope.TEAM: TEAM, Scope.OPERATOR: OPERATOR}.get(perm.scope, "")
        body = _review(
            perm.verb,
            perm.resource,
            group=perm.group,
            namespace=namespace,
            name=perm.name,
            subresource=perm.subresource,
        )
        case_id = "review-" + perm.key.replace(" ", "-").replace("/", "-")
        out.append(Case(case_id, post(REVIEW, body, identity="portal"), fields=("status",)))
    denied = [
        ("delete", "nodes", {}),
        ("get", "secrets", {"namespace": TEAM}),
        ("update", "configmaps", {"namespace": OPERATOR, "name": "other"}),
        ("create", "configmaps", {"namespace": "default"}),
        ("delete", "clusterqueues", {"group": "kueue.x-k8s.io"}),
        ("list", "namespaces", {}),
    ]
    for verb, resource, attrs in denied:
        case_id = f"review-denied-{verb}-{resource}-{attrs.get('namespace', 'cluster')}"
        body = _review(verb, resource, **attrs)
        out.append(Case(case_id, post(REVIEW, body, identity="portal"), fields=("status",)))
    return out


def _continue(limit: int, **query: str):
    """The second page of a paged node list (``list_pages``)."""

    def request(server: Server) -> Request:
        first = server.send(
            get("/api/v1/nodes", params={"limit": limit, **query}, identity="portal")
        )
        token = first.body["metadata"]["continue"]
        return get(
            "/api/v1/nodes", params={"limit": limit, "continue": token, **query}, identity="portal"
        )

    return request


def _watch_after(change: Request, **query: str):
    """A node watch from the resourceVersion before ``change`` (``watch``): it replays the
    change. Only the events of the quiet nodes count (kwok heartbeats the others)."""

    def request(server: Server) -> Request:
        start = server.send(get("/api/v1/nodes", params={"limit": 1}, identity="portal"))
        server.call(change)
        watch = {
            "watch": "1",
            "resourceVersion": start.body["metadata"]["resourceVersion"],
            "timeoutSeconds": "1",
            "allowWatchBookmarks": "true",
            **query,
        }
        return get("/api/v1/nodes", params=watch, identity="portal")

    return request


def _quiet_events(answer: Answer, server: Server) -> dict[str, Any]:
    events = []
    for e in answer.events:
        obj = e.get("object") or {}
        name = (obj.get("metadata") or {}).get("name", "")
        if e.get("type") == "BOOKMARK" or name.startswith("quiet-"):
            labels = (obj.get("metadata") or {}).get("labels") or {}
            events.append((e.get("type"), name, labels.get("watched", "")))
    return {"events": [list(e) for e in events if e[0] != "BOOKMARK"]}


def _watch_list(answer: Answer, server: Server) -> dict[str, Any]:
    seen = []
    for e in answer.events:
        meta = (e.get("object") or {}).get("metadata") or {}
        if e.get("type") == "BOOKMARK":
            seen.append(["BOOKMARK", meta.get("annotations"), sorted(meta)])
            break
        seen.append([e.get("type"), meta.get("name")])
    return {"events until the first bookmark": seen}


def _error_events(answer: Answer, server: Server) -> dict[str, Any]:
    keys = ("kind", "apiVersion", "status", "message", "reason", "code")
    return {
        "events": [
            {"type": e.get("type"), **{k: (e.get("object") or {}).get(k) for k in keys}}
            for e in answer.events
        ]
    }


def _quota(name: str, hard: dict[str, str], labels: dict[str, str] | None = None):
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": TEAM, "labels": labels or {}},
        "spec": {"hard": hard},
    }


def _managers(answer: Answer, server: Server) -> dict[str, Any]:
    """The managed fields but a controller's status writes (whether the quota controller
    has written yet is a matter of timing)."""
    entries = ((answer.body or {}).get("metadata") or {}).get("managedFields") or []
    keys = ("manager", "operation", "apiVersion", "subresource", "fieldsV1")
    return {
        "managedFields": [
            {k: e.get(k) for k in keys} for e in entries if e.get("subresource") != "status"
        ]
    }


def _replace_config_map(stale: bool):
    """``replace_config_map``: read, change, PUT with the read resourceVersion."""

    def request(server: Server) -> Request:
        path = _ns_api("configmaps", MIG_CONFIG, OPERATOR)
        current = server.call(get(path, identity="portal")).body
        if stale:  # someone else changed it since
            server.call(patch(path, {"data": {"other": "writer"}}))
        current["data"] = {**(current.get("data") or {}), "config.yaml": "version: v2\n"}
        return put(path, current, params={"fieldManager": "gpu-quota-portal"}, identity="portal")

    return request


def _eviction(pod: str, **body: Any) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": TEAM},
        **body,
    }


def _pdb_ready(answer: Answer) -> bool:
    status = (answer.body or {}).get("status") or {}
    return status.get("observedGeneration") == 1 and status.get("currentHealthy") == 1


FLAVOR = {
    "apiVersion": KUEUE,
    "kind": "ResourceFlavor",
    "metadata": {"name": "h100", "labels": {"app.kubernetes.io/managed-by": "gpu-quota-portal"}},
    "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
}


def _cluster_queue(name: str, nominal: str = "8", **extra: Any) -> dict[str, Any]:
    resources = [{"name": "nvidia.com/gpu", "nominalQuota": nominal, **extra}]
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "gpu-quota-portal"}},
        "spec": {
            "namespaceSelector": {
                "matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [TEAM]}
                ]
            },
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [{"name": "h100", "resources": resources}],
                }
            ],
        },
    }


def _local_queue(cq: str) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": {"name": "default", "namespace": TEAM},
        "spec": {"clusterQueue": cq},
    }


CASES: list[Case] = [
    # ---- identity
    Case(
        "whoami",
        post(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
            identity="portal",
        ),
        fields=("kind", "apiVersion", "status.userInfo.username", "status.userInfo.groups"),
        extract=lambda a, s: {
            "userInfo keys": sorted(((a.body or {}).get("status") or {}).get("userInfo") or {}),
            "extra keys": sorted(a.body["status"]["userInfo"].get("extra") or {}),
            "metadata keys": sorted((a.body or {}).get("metadata") or {}),
        },
    ),
    Case(
        "access-review-response",
        post(REVIEW, _review("list", "nodes"), identity="portal"),
        fields=("kind", "apiVersion", "spec", "status"),
        extract=_managers,
    ),
    *_access_cases(),
    # ---- inventory lists
    Case(
        "nodes-first-page",
        get("/api/v1/nodes", params={"limit": 2}, identity="portal"),
        fields=("kind", "apiVersion", "items[].metadata.name", "metadata.remainingItemCount"),
        extract=lambda a, s: {"continue": bool((a.body.get("metadata") or {}).get("continue"))},
    ),
    Case(
        "nodes-next-page",
        _continue(2),
        fields=("items[].metadata.name", "metadata.remainingItemCount"),
        extract=lambda a, s: {"continue": bool((a.body.get("metadata") or {}).get("continue"))},
    ),
    Case(
        "nodes-label-selector-paged",
        _continue(1, labelSelector="nvidia.com/gpu.present=true"),
        fields=("items[].metadata.name", "items[].metadata.labels"),
        extract=lambda a, s: {"continue": bool((a.body.get("metadata") or {}).get("continue"))},
    ),
    Case(
        "nodes-label-selector-set",
        get(
            "/api/v1/nodes",
            params={"labelSelector": "pool in (cpu,quiet),pool!=quiet"},
            identity="portal",
        ),
        fields=("items[].metadata.name",),
    ),
    Case(
        "nodes-label-selector-invalid",
        get("/api/v1/nodes", params={"labelSelector": "pool in cpu"}, identity="portal"),
    ),
    Case(
        "nodes-one-for-the-resource-version",
        get("/api/v1/nodes", params={"limit": 1}, identity="portal"),
        extract=lambda a, s: {
            "items": len(a.body["items"]),
            "has resourceVersion": bool(a.body["metadata"].get("resourceVersion")),
            "remaining": a.body["metadata"].get("remainingItemCount"),
        },
    ),
    Case(
        "pods-on-a-node",
        get(
            "/api/v1/pods",
            params={"limit": 500, "fieldSelector": "spec.nodeName=gpu-a"},
            identity="portal",
        ),
        fields=("kind", "items[].metadata.name", "items[].spec.nodeName"),
    ),
    Case(
        "pods-field-selector-unsupported",
        get("/api/v1/pods", params={"fieldSelector": "spec.schedulerName=x"}, identity="portal"),
    ),
    Case(
        "pods-continue-garbage",
        get("/api/v1/pods", params={"limit": 1, "continue": "not-a-token"}, identity="portal"),
    ),
    Case(
        "pods-in-a-namespace-forbidden",
        get(_ns_api("pods"), identity="portal"),
    ),
    # ---- watch
    Case(
        "watch-replays-a-label-change",
        _watch_after(patch("/api/v1/nodes/quiet-a", {"metadata": {"labels": {"watched": "1"}}})),
        extract=_quiet_events,
    ),
    Case(
        # The watch cache of a custom resource starts when its CRD is established, so "1" is
        # older than its history on both (a node watch from "1" would replay the real
        # server's whole history since it started, which a fresh simulator does not have).
        "watch-too-old-resource-version",
        get(
            _kueue("clusterqueues"),
            params={"watch": "1", "resourceVersion": "1", "timeoutSeconds": "1"},
        ),
        extract=_error_events,
        scrub=RV_SCRUB,
    ),
    Case(
        "watch-bad-resource-version",
        get(
            "/api/v1/nodes",
            params={"watch": "1", "resourceVersion": "abc", "timeoutSeconds": "1"},
            identity="portal",
        ),
    ),
    Case(
        # client-go's watch-list: the initial state, then a bookmark that ends it
        "watch-list-initial-events-end",
        get(
            "/api/v1/namespaces/gpu-quota-portal/serviceaccounts",
            params={
                "watch": "1",
                "sendInitialEvents": "true",
                "resourceVersionMatch": "NotOlderThan",
                "allowWatchBookmarks": "true",
                "timeoutSeconds": "2",
            },
        ),
        extract=_watch_list,
    ),
    Case(
        "watch-forbidden-for-nobody",
        get("/api/v1/nodes", params={"watch": "1", "timeoutSeconds": "1"}, identity="nobody"),
    ),
    # ---- nodes
    Case(
        "node-get",
        get("/api/v1/nodes/quiet-b", identity="portal"),
        fields=("kind", "apiVersion", "metadata.name", "metadata.labels", "spec.unschedulable"),
    ),
    Case(
        # the create answer itself (the node lifecycle controller lifts the taint later)
        "node-created-not-ready-taint",
        post("/api/v1/nodes", _node("fresh", NO_KUBELET)),
        fields=("spec.taints",),
        known="R2",
        why="no NodeTaint admission plugin: an API-created node gets no not-ready taint",
    ),
    Case("node-get-missing", get("/api/v1/nodes/nope", identity="portal")),
    Case(
        "node-label-add",
        patch(
            "/api/v1/nodes/quiet-b",
            {"metadata": {"labels": {"portal.example/class": "h100", "keep": "x"}}},
            identity="portal",
        ),
        fields=("metadata.labels",),
    ),
    Case(
        "node-label-remove",
        patch("/api/v1/nodes/quiet-b", {"metadata": {"labels": {"keep": None}}}, identity="portal"),
        fields=("metadata.labels",),
    ),
    Case(
        "node-label-invalid-value",
        patch("/api/v1/nodes/quiet-b", {"metadata": {"labels": {"bad": "-x-"}}}, identity="portal"),
    ),
    Case(
        "node-label-invalid-key",
        patch("/api/v1/nodes/quiet-b", {"metadata": {"labels": {"a/b/c": "x"}}}, identity="portal"),
    ),
    Case(
        "node-cordon",
        patch("/api/v1/nodes/quiet-b", {"spec": {"unschedulable": True}}, identity="portal"),
        fields=("spec.unschedulable",),
    ),
    Case(
        "node-uncordon",
        patch("/api/v1/nodes/quiet-b", {"spec": {"unschedulable": None}}, identity="portal"),
        fields=("spec.unschedulable",),
    ),
    Case(
        "node-patch-missing",
        patch("/api/v1/nodes/nope", {"spec": {"unschedulable": True}}, identity="portal"),
    ),
    Case(
        "node-delete-forbidden",
        delete("/api/v1/nodes/quiet-b", identity="portal"),
    ),
    # ---- quotas
    Case("quota-get-missing", get(_ns_api("resourcequotas", "gpu-quota"), identity="portal")),
    Case(
        "quota-apply-creates",
        apply(
            _ns_api("resourcequotas", "gpu-quota"),
            _quota(
                "gpu-quota",
                {"requests.nvidia.com/gpu": "4", "limits.nvidia.com/gpu": "4"},
                {"app.kubernetes.io/managed-by": "gpu-quota-portal"},
            ),
            identity="portal",
        ),
        fields=("kind", "metadata.name", "metadata.labels", "spec"),
        extract=_managers,
    ),
    Case(
        "quota-apply-changes-and-drops",
        lambda server: (
            server.call(
                apply(
                    _ns_api("resourcequotas", "q-change"),
                    _quota("q-change", {"requests.nvidia.com/gpu": "4", "pods": "10"}),
                    identity="portal",
                )
            ),
            apply(
                _ns_api("resourcequotas", "q-change"),
                _quota("q-change", {"requests.nvidia.com/gpu": "2"}),
                identity="portal",
            ),
        )[1],
        fields=("spec",),
        extract=_managers,
    ),
    Case(
        "quota-apply-keeps-other-managers-fields",
        lambda server: (
            server.call(
                post(
                    _ns_api("resourcequotas"),
                    _quota("q-shared", {"pods": "5"}),
                    params={"fieldManager": "kubectl-create"},
                )
            ),
            apply(
                _ns_api("resourcequotas", "q-shared"),
                _quota("q-shared", {"requests.nvidia.com/gpu": "2"}),
                identity="portal",
            ),
        )[1],
        fields=("spec",),
        extract=_managers,
    ),
    Case(
        "quota-apply-conflict-without-force",
        lambda server: (
            server.call(
                post(
                    _ns_api("resourcequotas"),
                    _quota("q-conflict", {"requests.nvidia.com/gpu": "1"}),
                    params={"fieldManager": "kubectl-edit"},
                )
            ),
            apply(
                _ns_api("resourcequotas", "q-conflict"),
                _quota("q-conflict", {"requests.nvidia.com/gpu": "2"}),
                force=False,
                identity="portal",
            ),
        )[1],
    ),
    Case(
        "quota-apply-get",
        lambda server: (
            server.call(
                apply(
                    _ns_api("resourcequotas", "q-read"),
                    _quota("q-read", {"requests.nvidia.com/gpu": "3"}),
                    identity="portal",
                )
            ),
            get(_ns_api("resourcequotas", "q-read"), identity="portal"),
        )[1],
        fields=("kind", "apiVersion", "metadata.name", "spec"),
    ),
    Case(
        "quota-status-filled-by-the-controller",
        lambda server: (
            server.call(
                apply(
                    _ns_api("resourcequotas", "q-status"),
                    _quota("q-status", {"requests.nvidia.com/gpu": "3", "pods": "9"}),
                    identity="portal",
                )
            ),
            server.wait(
                get(_ns_api("resourcequotas", "q-status")),
                lambda a: (a.body.get("status") or {}).get("hard"),
            ),
        )[1],
        fields=("status",),
    ),
    Case(
        "quota-list-in-namespace",
        lambda server: (
            server.call(
                apply(
                    _ns_api("resourcequotas", "q-listed"),
                    _quota("q-listed", {"requests.nvidia.com/gpu": "1"}),
                    identity="portal",
                )
            ),
            get(_ns_api("resourcequotas"), identity="portal"),
        )[1],
        fields=("kind", "apiVersion"),
        extract=lambda a, s: {
            "q-listed": [i["spec"] for i in a.body["items"] if i["metadata"]["name"] == "q-listed"]
        },
    ),
    Case(
        "quota-apply-in-missing-namespace",
        apply(
            _ns_api("resourcequotas", "q", "nope"),
            {**_quota("q", {"pods": "1"}), "metadata": {"name": "q", "namespace": "nope"}},
            identity="portal",
        ),
    ),
    Case(
        "quota-delete",
        lambda server: (
            server.call(
                apply(
                    _ns_api("resourcequotas", "q-gone"),
                    _quota("q-gone", {"pods": "1"}),
                    identity="portal",
                )
            ),
            delete(_ns_api("resourcequotas", "q-gone"), identity="portal"),
        )[1],
        fields=("kind", "apiVersion", "metadata.name", "spec"),
    ),
    Case("quota-delete-missing", delete(_ns_api("resourcequotas", "nope"), identity="portal")),
    Case(
        "limitranges-list",
        get(_ns_api("limitranges"), identity="portal"),
        fields=("kind", "apiVersion", "items"),
    ),
    Case(
        "clusterpolicies-list",
        get("/apis/nvidia.com/v1/clusterpolicies", identity="portal"),
        # what the portal reads: the MIG strategy and the mig-parted config it mounts
        fields=(
            "kind",
            "apiVersion",
            "items[].metadata.name",
            "items[].spec.mig",
            "items[].spec.migManager",
        ),
    ),
    Case(
        "clusterpolicies-schema-defaults",
        get("/apis/nvidia.com/v1/clusterpolicies", identity="portal"),
        fields=("items[].spec",),
        known="R3",
        why="the ClusterPolicy is served without the operator CRD's schema defaults",
    ),
    # ---- evictions
    Case(
        "evict",
        post(_ns_api("pods", "evict-me") + "/eviction", _eviction("evict-me"), identity="portal"),
        fields=("kind", "apiVersion", "status", "metadata", "details"),
    ),
    Case(
        "evict-missing-pod",
        post(_ns_api("pods", "nope") + "/eviction", _eviction("nope"), identity="portal"),
    ),
    Case(
        "evict-blocked-by-budget",
        post(_ns_api("pods", "guarded") + "/eviction", _eviction("guarded"), identity="portal"),
        setup=(
            wait(get(f"/apis/policy/v1/namespaces/{TEAM}/poddisruptionbudgets/guard"), _pdb_ready),
        ),
        headers=("Retry-After",),
    ),
    Case(
        "evict-dry-run",
        post(
            _ns_api("pods", "train-b") + "/eviction",
            _eviction("train-b", deleteOptions={"dryRun": ["All"]}),
            identity="portal",
        ),
        fields=("kind", "status"),
    ),
    Case(
        "evict-name-mismatch",
        post(_ns_api("pods", "train-b") + "/eviction", _eviction("train-a"), identity="portal"),
    ),
    # ---- the mig-parted ConfigMap
    Case(
        "configmap-stock-missing",
        get(_ns_api("configmaps", "default-mig-parted-config", OPERATOR), identity="portal"),
    ),
    Case(
        "configmap-create",
        post(
            _ns_api("configmaps", namespace=OPERATOR),
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": MIG_CONFIG,
                    "namespace": OPERATOR,
                    "annotations": {"gpu-quota-portal/owner": "portal"},
                },
                "data": {"config.yaml": "version: v1\n"},
            },
            identity="portal",
        ),
        fields=("kind", "metadata.name", "metadata.annotations", "data"),
        extract=_managers,
    ),
    Case(
        "configmap-create-again",
        post(
            _ns_api("configmaps", namespace=OPERATOR),
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": MIG_CONFIG}},
            identity="portal",
        ),
    ),
    Case(
        "configmap-read",
        get(_ns_api("configmaps", MIG_CONFIG, OPERATOR), identity="portal"),
        fields=("kind", "apiVersion", "metadata.name", "data"),
    ),
    Case(
        "configmap-replace",
        _replace_config_map(stale=False),
        fields=("data",),
        extract=_managers,
    ),
    Case("configmap-replace-stale", _replace_config_map(stale=True)),
    Case(
        "configmap-replace-name-mismatch",
        put(
            _ns_api("configmaps", MIG_CONFIG, OPERATOR),
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other"}},
            identity="portal",
        ),
    ),
    Case(
        "configmap-other-forbidden",
        get(_ns_api("configmaps", "other", OPERATOR), identity="portal"),
    ),
    Case(
        "configmap-patch-forbidden",
        patch(_ns_api("configmaps", MIG_CONFIG, OPERATOR), {"data": {"x": "y"}}, identity="portal"),
    ),
    Case(
        "configmap-create-elsewhere-forbidden",
        post(
            _ns_api("configmaps", namespace="default"),
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}},
            identity="portal",
        ),
    ),
    # ---- TokenRequest
    Case(
        "token-request",
        post(
            "/api/v1/namespaces/gpu-quota-portal/serviceaccounts/gpu-quota-portal/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 86400},
            },
        ),
        fields=("kind", "apiVersion", "metadata.name", "metadata.namespace", "spec"),
        extract=lambda a, s: {"status keys": sorted((a.body or {}).get("status") or {})},
    ),
    Case(
        "token-request-too-short",
        post(
            "/api/v1/namespaces/gpu-quota-portal/serviceaccounts/gpu-quota-portal/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 599},
            },
        ),
    ),
    Case(
        "token-request-missing-account",
        post(
            "/api/v1/namespaces/gpu-quota-portal/serviceaccounts/nope/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
        ),
    ),
    Case(
        "token-request-forbidden",
        post(
            "/api/v1/namespaces/gpu-quota-portal/serviceaccounts/gpu-quota-portal/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
            identity="portal",
        ),
    ),
    # ---- Kueue
    Case(
        "kueue-flavor-apply",
        apply(_kueue("resourceflavors", "h100"), FLAVOR, identity="portal"),
        fields=("kind", "apiVersion", "metadata.name", "metadata.labels", "spec"),
        extract=_managers,
    ),
    Case(
        "kueue-cluster-queue-apply",
        lambda server: (
            server.call(apply(_kueue("resourceflavors", "h100"), FLAVOR, identity="portal")),
            apply(_kueue("clusterqueues", "team-a"), _cluster_queue("team-a"), identity="portal"),
        )[1],
        fields=("kind", "metadata.name", "metadata.finalizers", "spec"),
        extract=_managers,
    ),
    Case(
        "kueue-cluster-queue-get",
        lambda server: (
            server.call(
                apply(
                    _kueue("clusterqueues", "cq-read"), _cluster_queue("cq-read"), identity="portal"
                )
            ),
            get(_kueue("clusterqueues", "cq-read"), identity="portal"),
        )[1],
        fields=("kind", "metadata.name", "spec"),
    ),
    Case(
        "kueue-cluster-queue-get-missing",
        get(_kueue("clusterqueues", "nope"), identity="portal"),
    ),
    Case(
        "kueue-local-queue-apply",
        lambda server: (
            server.call(
                apply(
                    _kueue("clusterqueues", "cq-local"),
                    _cluster_queue("cq-local"),
                    identity="portal",
                )
            ),
            apply(
                _kueue("localqueues", "default", TEAM), _local_queue("cq-local"), identity="portal"
            ),
        )[1],
        fields=("kind", "metadata.name", "metadata.namespace", "spec"),
        extract=_managers,
    ),
    Case(
        "kueue-lists",
        lambda server: (
            server.call(apply(_kueue("resourceflavors", "h100"), FLAVOR, identity="portal")),
            get(
                _kueue("resourceflavors"),
                params={"labelSelector": "app.kubernetes.io/managed-by=gpu-quota-portal"},
                identity="portal",
            ),
        )[1],
        fields=("kind", "apiVersion", "items[].metadata.name"),
    ),
    Case(
        "kueue-workloads-list",
        get(_kueue("workloads", namespace=TEAM), identity="portal"),
        fields=("kind", "apiVersion", "items"),
    ),
    Case(
        "kueue-lending-limit-above-nominal",
        apply(
            _kueue("clusterqueues", "cq-lend"),
            {
                **_cluster_queue("cq-lend", lendingLimit="9"),
                "spec": {
                    **_cluster_queue("cq-lend", lendingLimit="9")["spec"],
                    "cohortName": "research",
                },
            },
            identity="portal",
        ),
    ),
    Case(
        "kueue-borrowing-limit-without-cohort",
        apply(
            _kueue("clusterqueues", "cq-borrow"),
            _cluster_queue("cq-borrow", borrowingLimit="2"),
            identity="portal",
        ),
    ),
    Case(
        "kueue-bad-queueing-strategy",
        apply(
            _kueue("clusterqueues", "cq-strategy"),
            {
                **_cluster_queue("cq-strategy"),
                "spec": {**_cluster_queue("cq-strategy")["spec"], "queueingStrategy": "Random"},
            },
            identity="portal",
        ),
    ),
    Case(
        "kueue-cluster-queue-delete-forbidden",
        delete(_kueue("clusterqueues", "team-a"), identity="portal"),
    ),
    Case(
        "kueue-workload-create-forbidden",
        post(
            _kueue("workloads", namespace=TEAM),
            {"apiVersion": KUEUE, "kind": "Workload", "metadata": {"name": "w"}},
            identity="portal",
        ),
    ),
]


@pytest.mark.parametrize("case", params(CASES))
def test_gateway(case: Case, pair: Pair) -> None:
    check(case, pair)
