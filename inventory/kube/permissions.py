"""THE table of every permission the portal's credentials need on a cluster.

One row per (verb, API group, resource, subresource, scope, resourceName), with the
feature that needs it and the ``KubeGateway`` methods that make the call. Three things
follow from this table and are tested against it:

- the connection preflight (``inventory/preflight.py``) asks every row with a
  SelfSubjectAccessReview and shows the exact RBAC rule to add for a missing one
  (:func:`rule_snippet`);
- ``deploy/kubernetes/rbac.yaml`` grants exactly these rows, no more
  (tests/inventory/test_preflight_rbac.py evaluates the manifest's rules as RBAC does);
- every public ``KubeGateway`` method is named by some row (or in
  :data:`NO_RBAC_METHODS`), so a new call without its permission fails a test.

Adding a gateway call: add its row(s) here with the method name in ``methods``, and the
matching rule in ``deploy/kubernetes/rbac.yaml`` (keep its header comment in step).

Scopes: ``cluster`` (a cluster-scoped resource, or a namespaced one asked for all
namespaces, granted by the ClusterRole), ``team`` (a namespaced resource in each managed
team namespace; the ClusterRole grants it in every namespace), ``operator`` (only in the
GPU Operator's namespace, ``settings.MIG_CONFIGMAP_NAMESPACE``, granted by a Role there).
A ``resource_name`` that starts with ``$`` names a setting (``$MIG_CONFIGMAP_NAME``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from django.conf import settings


class Scope(StrEnum):
    CLUSTER = "cluster"
    TEAM = "team"
    OPERATOR = "operator"


@dataclass(frozen=True, slots=True)
class Permission:
    verb: str
    resource: str
    group: str = ""
    subresource: str = ""
    scope: Scope = Scope.CLUSTER
    resource_name: str = ""
    feature: str = ""
    methods: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The concrete resourceName ("" = any), with ``$SETTING`` resolved."""
        if self.resource_name.startswith("$"):
            return str(getattr(settings, self.resource_name[1:]))
        return self.resource_name

    @property
    def resource_path(self) -> str:
        """``pods/eviction`` style, as RBAC rules write a subresource."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    @property
    def key(self) -> str:
        """A stable, readable id: ``create pods/eviction``, ``get configmaps@operator/x``."""
        group = f".{self.group}" if self.group else ""
        where = "" if self.scope == Scope.CLUSTER else f" in {self.scope.value} namespace"
        name = f" named {self.name}" if self.name else ""
        return f"{self.verb} {self.resource_path}{group}{where}{name}"

    def namespace(self, team_namespace: str = "") -> str:
        """The namespace to ask a SelfSubjectAccessReview in ("" = cluster-wide)."""
        if self.scope == Scope.OPERATOR:
            return settings.MIG_CONFIGMAP_NAMESPACE
        if self.scope == Scope.TEAM:
            return team_namespace
        return ""


_INVENTORY = "Inventory sync and watch"
_LABELS = "Node labels and cordon"
_MIG = "MIG reconfiguration"
_QUOTAS = "Team quotas"
_PREFLIGHT = "Connection preflight"
_KUEUE = "Kueue enforcement"
_KG = "kueue.x-k8s.io"
_DRA = "Dynamic Resource Allocation"
_RG = "resource.k8s.io"

PERMISSIONS: tuple[Permission, ...] = (
    Permission("get", "nodes", feature=_INVENTORY, methods=("get_node",)),
    Permission(
        "list",
        "nodes",
        feature=_INVENTORY,
        methods=("list_pages", "list_resource_version", "watch"),
    ),
    Permission("watch", "nodes", feature=_INVENTORY, methods=("watch",)),
    Permission(
        "patch",
        "nodes",
        feature=_LABELS,
        methods=("patch_node_labels", "set_unschedulable"),
    ),
    Permission(
        "list",
        "pods",
        feature=f"{_INVENTORY}; pods on a node before a MIG drain",
        methods=("list_pages", "list_pods", "watch"),
    ),
    Permission("watch", "pods", feature=_INVENTORY, methods=("watch",)),
    Permission(
        "list",
        "pods",
        scope=Scope.TEAM,
        feature="Why a job waits: a team namespace's pending pods",
        methods=("list_pending_pods",),
    ),
    Permission(
        "list",
        "events",
        scope=Scope.TEAM,
        feature="Why a job waits: pods a quota refused, pods that cannot start",
        methods=("list_events",),
    ),
    Permission(
        "create",
        "pods",
        subresource="eviction",
        feature=f"{_MIG}: drain a node, respecting PodDisruptionBudgets",
        methods=("try_evict_pod",),
    ),
    Permission(
        "get",
        "resourcequotas",
        scope=Scope.TEAM,
        feature=f"{_QUOTAS}: apply check and drift",
        methods=("get_resource_quota",),
    ),
    Permission(
        "list",
        "resourcequotas",
        scope=Scope.TEAM,
        feature=f"{_QUOTAS}: every quota in a namespace (the effective limit); preflight",
        methods=("list_resource_quotas",),
    ),
    Permission(
        "list",
        "resourcequotas",
        feature=f"{_QUOTAS}: the watcher confirms applies from the portal's quotas' events",
        methods=("list_resource_version",),
    ),
    Permission(
        "watch",
        "resourcequotas",
        feature=f"{_QUOTAS}: the watcher confirms applies from the portal's quotas' events",
        methods=("watch",),
    ),
    Permission(
        "watch",
        "resourcequotas",
        scope=Scope.TEAM,
        feature=f"{_QUOTAS}: the quota controller's status.hard, awaited after an apply",
        methods=("await_resource_quota",),
    ),
    Permission(
        "patch",
        "resourcequotas",
        scope=Scope.TEAM,
        feature=f"{_QUOTAS}: server-side apply",
        methods=("apply_resource_quota",),
    ),
    Permission(
        "create",
        "resourcequotas",
        scope=Scope.TEAM,
        feature=f"{_QUOTAS}: a server-side apply that creates the quota",
        methods=("apply_resource_quota",),
    ),
    Permission(
        "delete",
        "resourcequotas",
        scope=Scope.TEAM,
        feature=f"{_QUOTAS}: remove an adopted foreign quota (admin, on confirmation)",
        methods=("delete_resource_quota",),
    ),
    Permission(
        "list",
        "limitranges",
        scope=Scope.TEAM,
        feature=f"{_PREFLIGHT}: limits on GPU resources in managed namespaces",
        methods=("list_limit_ranges",),
    ),
    Permission(
        "list",
        "clusterpolicies",
        group="nvidia.com",
        feature=f"{_MIG}: the GPU Operator's MIG strategy and mig-manager config",
        methods=("list_cluster_policies",),
    ),
    Permission(
        "patch",
        "resourceflavors",
        group=_KG,
        feature=f"{_KUEUE}: server-side apply of a ResourceFlavor per GPU class",
        methods=("apply_resource_flavor",),
    ),
    Permission(
        "create",
        "resourceflavors",
        group=_KG,
        feature=f"{_KUEUE}: a server-side apply that creates the flavor",
        methods=("apply_resource_flavor",),
    ),
    Permission(
        "list",
        "resourceflavors",
        group=_KG,
        feature=f"{_KUEUE}: drift check of the portal's flavors",
        methods=("list_kueue_objects",),
    ),
    Permission(
        "patch",
        "clusterqueues",
        group=_KG,
        feature=f"{_KUEUE}: server-side apply of a ClusterQueue per team",
        methods=("apply_cluster_queue",),
    ),
    Permission(
        "create",
        "clusterqueues",
        group=_KG,
        feature=f"{_KUEUE}: a server-side apply that creates the ClusterQueue",
        methods=("apply_cluster_queue",),
    ),
    Permission(
        "get",
        "clusterqueues",
        group=_KG,
        feature=f"{_KUEUE}: usage and admission status after an apply",
        methods=("get_cluster_queue",),
    ),
    Permission(
        "list",
        "clusterqueues",
        group=_KG,
        feature=f"{_KUEUE}: drift check and usage of the teams' queues",
        methods=("list_kueue_objects",),
    ),
    Permission(
        "patch",
        "localqueues",
        group=_KG,
        scope=Scope.TEAM,
        feature=f"{_KUEUE}: server-side apply of the LocalQueue in a team namespace",
        methods=("apply_local_queue",),
    ),
    Permission(
        "create",
        "localqueues",
        group=_KG,
        scope=Scope.TEAM,
        feature=f"{_KUEUE}: a server-side apply that creates the LocalQueue",
        methods=("apply_local_queue",),
    ),
    Permission(
        "list",
        "localqueues",
        group=_KG,
        scope=Scope.TEAM,
        feature=f"{_KUEUE}: drift check of a team namespace's LocalQueue",
        methods=("list_kueue_objects",),
    ),
    Permission(
        "list",
        "workloads",
        group=_KG,
        scope=Scope.TEAM,
        feature=f"{_KUEUE}: a team's admitted and queued workloads",
        methods=("list_kueue_objects",),
    ),
    Permission(
        "get",
        "localqueues",
        group="visibility.kueue.x-k8s.io",
        subresource="pendingworkloads",
        scope=Scope.TEAM,
        feature="Why a job waits: its position in Kueue's queue (Kueue's visibility API)",
        methods=("list_pending_workloads",),
    ),
    Permission(
        "list",
        "resourceslices",
        group=_RG,
        feature=f"{_DRA}: the GPUs the DRA driver publishes (inventory)",
        methods=("list_resource_slices",),
    ),
    Permission(
        "list",
        "resourceclaims",
        group=_RG,
        feature=f"{_DRA}: the devices pods ask for and hold (inventory, usage)",
        methods=("list_resource_claims",),
    ),
    Permission(
        "get",
        "resourceclaims",
        group=_RG,
        feature=f"{_DRA}: the claims of a pod the watch brings (inventory)",
        methods=("read_resource_claim",),
    ),
    Permission(
        "list",
        "deviceclasses",
        group=_RG,
        feature=f"{_DRA}: the portal's DeviceClasses (drift) and every GPU class to set to 0",
        methods=("list_device_classes",),
    ),
    Permission(
        "patch",
        "deviceclasses",
        group=_RG,
        feature=f"{_DRA}: server-side apply of a DeviceClass per GPU class",
        methods=("apply_device_class",),
    ),
    Permission(
        "create",
        "deviceclasses",
        group=_RG,
        feature=f"{_DRA}: a server-side apply that creates a DeviceClass needs it too",
        methods=("apply_device_class",),
    ),
    Permission(
        "get",
        "configmaps",
        scope=Scope.OPERATOR,
        resource_name="$MIG_CONFIGMAP_NAME",
        feature=f"{_MIG}: read the portal's mig-parted config",
        methods=("get_config_map",),
    ),
    Permission(
        "update",
        "configmaps",
        scope=Scope.OPERATOR,
        resource_name="$MIG_CONFIGMAP_NAME",
        feature=f"{_MIG}: write the portal's mig-parted config",
        methods=("replace_config_map",),
    ),
    Permission(
        "get",
        "configmaps",
        scope=Scope.OPERATOR,
        resource_name="default-mig-parted-config",
        feature=f"{_MIG}: copy the GPU Operator's stock configs into the portal's config",
        methods=("get_config_map",),
    ),
    Permission(
        "create",
        "configmaps",
        scope=Scope.OPERATOR,
        feature=f"{_MIG}: create the portal's mig-parted config when missing "
        "(create cannot be limited by name)",
        methods=("create_config_map",),
    ),
)

# Public gateway methods that need no RBAC rule of ours: every authenticated user may
# ask them (bootstrap ClusterRoles system:discovery for /version, system:basic-user for
# SelfSubjectReview and SelfSubjectAccessReview; kubernetes
# plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go), or they make no call.
NO_RBAC_METHODS = frozenset({"version", "whoami", "access_review", "close"})


def for_method(method: str) -> list[Permission]:
    """The rows a gateway method needs."""
    return [p for p in PERMISSIONS if method in p.methods]


def rule_snippet(permission: Permission) -> str:
    """The exact RBAC rule (YAML) to add for a missing permission, and where."""
    group = f'"{permission.group}"'
    lines = []
    if permission.scope == Scope.OPERATOR:
        lines.append(
            f"# Role gpu-quota-portal-mig-config, namespace {settings.MIG_CONFIGMAP_NAMESPACE}"
        )
    else:
        lines.append("# ClusterRole gpu-quota-portal")
    lines.append("- apiGroups: [" + group + "]")
    lines.append(f'  resources: ["{permission.resource_path}"]')
    if permission.name:
        lines.append(f'  resourceNames: ["{permission.name}"]')
    lines.append(f'  verbs: ["{permission.verb}"]')
    return "\n".join(lines)
