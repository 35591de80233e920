"""The resource types this server serves, and their discovery documents."""

from __future__ import annotations

from dataclasses import dataclass, field

_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
_BASE_FIELDS = frozenset({"metadata.name", "metadata.namespace"})
_RBAC = "rbac.authorization.k8s.io"
_KUEUE = "kueue.x-k8s.io"
_AUTHN, _AUTHZ, _CREATE = "authentication.k8s.io", "authorization.k8s.io", ("create",)
# pkg/registry/core/event/strategy.go ToSelectableFields (kubectl describe lists events so)
_EVENT_FIELDS = _BASE_FIELDS | {
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
}


@dataclass(frozen=True)
class ResourceType:
    """One REST resource (``pods``) with what discovery and routing need to know."""

    name: str
    kind: str
    group: str
    version: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    fields: frozenset[str] = field(default=_BASE_FIELDS)
    has_status: bool = False
    verbs: tuple[str, ...] = _VERBS
    categories: tuple[str, ...] = ()  # discovery `categories` (`kubectl get all`)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> str:
        return self.api_version


RESOURCES: tuple[ResourceType, ...] = (
    ResourceType(
        "namespaces",
        "Namespace",
        "",
        "v1",
        False,
        ("ns",),
        ("status", "finalize"),
        _BASE_FIELDS | {"status.phase"},
        True,
    ),
    ResourceType(
        "nodes",
        "Node",
        "",
        "v1",
        False,
        ("no",),
        ("status",),
        _BASE_FIELDS | {"spec.unschedulable"},
        True,
    ),
    ResourceType(
        "pods",
        "Pod",
        "",
        "v1",
        True,
        ("po",),
        ("status", "eviction"),
        _BASE_FIELDS
        | {
            "spec.nodeName",
            "status.phase",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.restartPolicy",
            "status.podIP",
            "status.nominatedNodeName",
        },
        True,
        categories=("all",),
    ),
    ResourceType(
        "resourcequotas",
        "ResourceQuota",
        "",
        "v1",
        True,
        ("quota",),
        ("status",),
        _BASE_FIELDS,
        True,
    ),
    ResourceType("configmaps", "ConfigMap", "", "v1", True, ("cm",)),
    ResourceType("secrets", "Secret", "", "v1", True, (), (), _BASE_FIELDS | {"type"}),
    ResourceType(
        "services",
        "Service",
        "",
        "v1",
        True,
        ("svc",),
        ("status",),
        _BASE_FIELDS,
        True,
        categories=("all",),
    ),
    # workload types (simcluster/workloads.py, daemonsets.py); discovery as v1.32 serves them,
    # without the `scale` subresource (pkg/registry/{apps,batch,networking}/*/storage)
    ResourceType(
        "daemonsets",
        "DaemonSet",
        "apps",
        "v1",
        True,
        ("ds",),
        ("status",),
        _BASE_FIELDS,
        True,
        categories=("all",),
    ),
    ResourceType(
        "deployments",
        "Deployment",
        "apps",
        "v1",
        True,
        ("deploy",),
        ("status",),
        _BASE_FIELDS,
        True,
        categories=("all",),
    ),
    ResourceType(
        "replicasets",
        "ReplicaSet",
        "apps",
        "v1",
        True,
        ("rs",),
        ("status",),
        _BASE_FIELDS,
        True,
        categories=("all",),
    ),
    ResourceType(
        "statefulsets",
        "StatefulSet",
        "apps",
        "v1",
        True,
        ("sts",),
        ("status",),
        _BASE_FIELDS,
        True,
        categories=("all",),
    ),
    ResourceType(
        "jobs", "Job", "batch", "v1", True, (), ("status",), _BASE_FIELDS, True, categories=("all",)
    ),
    ResourceType(
        "cronjobs",
        "CronJob",
        "batch",
        "v1",
        True,
        ("cj",),
        ("status",),
        _BASE_FIELDS,
        True,
        categories=("all",),
    ),
    ResourceType(
        "ingresses",
        "Ingress",
        "networking.k8s.io",
        "v1",
        True,
        ("ing",),
        ("status",),
        _BASE_FIELDS,
        True,
    ),
    ResourceType("ingressclasses", "IngressClass", "networking.k8s.io", "v1", False),
    ResourceType("serviceaccounts", "ServiceAccount", "", "v1", True, ("sa",), ("token",)),
    ResourceType("events", "Event", "", "v1", True, ("ev",), (), _EVENT_FIELDS),
    ResourceType("limitranges", "LimitRange", "", "v1", True, ("limits",)),
    ResourceType(
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        "policy",
        "v1",
        True,
        ("pdb",),
        ("status",),
        _BASE_FIELDS,
        True,
    ),
    ResourceType("priorityclasses", "PriorityClass", "scheduling.k8s.io", "v1", False, ("pc",)),
    # node heartbeats (simcluster/leases.py); no short names in real discovery
    ResourceType("leases", "Lease", "coordination.k8s.io", "v1", True),
    # RBAC (simcluster/rbac.py); real discovery lists no short names for these
    ResourceType("clusterrolebindings", "ClusterRoleBinding", _RBAC, "v1", False),
    ResourceType("clusterroles", "ClusterRole", _RBAC, "v1", False),
    ResourceType("rolebindings", "RoleBinding", _RBAC, "v1", True),
    ResourceType("roles", "Role", _RBAC, "v1", True),
    # create-only reviews, nothing stored (simcluster/reviews.py)
    ResourceType("selfsubjectreviews", "SelfSubjectReview", _AUTHN, "v1", False, verbs=_CREATE),
    ResourceType(
        "selfsubjectaccessreviews", "SelfSubjectAccessReview", _AUTHZ, "v1", False, verbs=_CREATE
    ),
    ResourceType(
        "selfsubjectrulesreviews", "SelfSubjectRulesReview", _AUTHZ, "v1", False, verbs=_CREATE
    ),
    # the GPU Operator's CRD (simcluster/clusterpolicy.py; cluster-scoped, status subresource)
    ResourceType(
        "clusterpolicies",
        "ClusterPolicy",
        "nvidia.com",
        "v1",
        False,
        (),
        ("status",),
        has_status=True,
    ),
    # Kueue's CRDs (simcluster/kueue_types.py; kubernetes-sigs/kueue config/components/crd)
    ResourceType(
        "resourceflavors", "ResourceFlavor", _KUEUE, "v1beta2", False, ("flavor", "flavors", "rf")
    ),
    ResourceType(
        "clusterqueues",
        "ClusterQueue",
        _KUEUE,
        "v1beta2",
        False,
        ("cq",),
        ("status",),
        has_status=True,
    ),
    ResourceType(
        "localqueues",
        "LocalQueue",
        _KUEUE,
        "v1beta2",
        True,
        ("queue", "queues", "lq"),
        ("status",),
        has_status=True,
    ),
    ResourceType(
        "cohorts", "Cohort", _KUEUE, "v1beta2", False, ("co",), ("status",), has_status=True
    ),
    ResourceType(
        "workloads",
        "Workload",
        _KUEUE,
        "v1beta2",
        True,
        ("kwl", "kueueworkload", "kueueworkloads"),
        ("status",),
        has_status=True,
    ),
)
# Groups served by apiextensions' custom resource handler (CRDs): a version or resource it
# does not serve falls through to the mux's plain 404, bodies decode as unstructured.
CUSTOM_RESOURCE_GROUPS = frozenset({_KUEUE, "nvidia.com"})


def conversion_name(rt: ResourceType) -> str:
    """The resource whose field label conversion words a field selector's errors ("" for a
    custom resource, whose handler has its own)."""
    return "" if rt.group in CUSTOM_RESOURCE_GROUPS else rt.name


# served by simcluster/reviews.py: POST only, never stored
REVIEWS = frozenset({"selfsubjectreviews", "selfsubjectaccessreviews", "selfsubjectrulesreviews"})

RT: dict[str, ResourceType] = {r.name: r for r in RESOURCES}
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
BY_PATH: dict[tuple[str, str], ResourceType] = {(r.group_version, r.name): r for r in RESOURCES}
GROUP_VERSIONS: dict[str, list[ResourceType]] = {}
for _r in RESOURCES:
    GROUP_VERSIONS.setdefault(_r.group_version, []).append(_r)


def api_resource_list(group_version: str) -> dict:
    """APIResourceList for ``/api/v1`` or ``/apis/<group>/<version>``."""
    items = []
    for r in GROUP_VERSIONS.get(group_version, []):
        entry = {
            "name": r.name,
            "singularName": r.kind.lower(),
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": list(r.verbs),
        }
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        if r.categories:
            entry["categories"] = list(r.categories)
        items.append(entry)
        for sub in r.subresources:
            if sub == "eviction":
                items.append(
                    {
                        "name": f"{r.name}/eviction",
                        "singularName": "",
                        "namespaced": True,
                        "group": "policy",
                        "version": "v1",
                        "kind": "Eviction",
                        "verbs": ["create"],
                    }
                )
            elif sub == "token":
                items.append(
                    {
                        "name": f"{r.name}/token",
                        "singularName": "",
                        "namespaced": True,
                        "group": "authentication.k8s.io",
                        "version": "v1",
                        "kind": "TokenRequest",
                        "verbs": ["create"],
                    }
                )
            elif sub == "finalize":
                items.append(
                    {
                        "name": f"{r.name}/finalize",
                        "singularName": "",
                        "namespaced": False,
                        "kind": r.kind,
                        "verbs": ["update"],
                    }
                )
            else:
                items.append(
                    {
                        "name": f"{r.name}/{sub}",
                        "singularName": "",
                        "namespaced": r.namespaced,
                        "kind": r.kind,
                        "verbs": ["get", "patch", "update"],
                    }
                )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": items,
    }


def api_group_list() -> dict:
    """APIGroupList for ``/apis`` (every non-core group served)."""
    groups = []
    for gv in GROUP_VERSIONS:
        if "/" not in gv:
            continue
        g, v = gv.split("/")
        ver = {"groupVersion": gv, "version": v}
        groups.append({"name": g, "versions": [ver], "preferredVersion": ver})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
