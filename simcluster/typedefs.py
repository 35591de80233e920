"""What the official client's models do not say about the API types, from the real Go types.

:mod:`simcluster.schema` builds every type's schema from the installed ``kubernetes``
client's generated models (field names, JSON names, nesting, descriptions). The models are
the OpenAPI form of the same Go types but lose the facts this table restores, transcribed
from the struct tags and ``+`` markers of k8s.io/api v0.32.4 (``core/v1/types.go``,
``policy/v1``, ``scheduling/v1``, ``rbac/v1``, ``coordination/v1``, ``authorization/v1``,
``authentication/v1``) and k8s.io/apimachinery ``pkg/apis/meta/v1/types.go``:

``FIELDS[definition][json field]`` is a space-separated list of facts:

- ``req``: required (no ``omitempty`` and no ``+optional``), as the OpenAPI ``required``.
- ``t=<leaf>``: the leaf type where the model's is too coarse: ``int64`` (the models say
  ``int``, read as int32), ``quantity`` and ``byte`` (models: ``str``), ``intstr``,
  ``fieldsv1``, ``rawext`` (models: ``object``), ``microtime`` (models: ``datetime``).
  Lists and maps keep their shape from the model; the fact names the innermost type.
- ``ps=`` / ``pk=``: ``patchStrategy`` / ``patchMergeKey`` struct tags (strategic merge
  patch). A list without ``ps`` is replaced as a whole (``NodeSpec.taints``,
  ``PodSpec.tolerations``).
- ``lt=`` / ``lk=`` / ``mt=``: ``+listType``, ``+listMapKey`` (comma-separated) and
  ``+mapType`` markers (server-side apply, ``x-kubernetes-list-type`` ...).
- ``go=<type>``: the Go type name ``encoding/json`` prints in ``cannot unmarshal`` errors
  where it is not derivable from the model (named string types such as
  ``v1.RestartPolicy``, ``v1.ResourceList``).

Keys are short definition names: ``core.v1.PodSpec`` is ``io.k8s.api.core.v1.PodSpec``,
``meta.v1.ObjectMeta`` is ``io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta``.
``NON_CORE`` lists, per package, the definitions whose client class is named ``V1<Name>``
but that are not in core/v1 (the client prefixes only ambiguous names: ``CoreV1Event``).
``NEWER_THAN_1_32`` names fields the installed client (a newer release) has but a 1.32 API
server does not know: they are unknown fields here, as there.
"""

from __future__ import annotations

from simcluster.clusterpolicy import CRD_FIELDS
from simcluster.kueue_types import CRD_FIELDS as KUEUE_FIELDS
from simcluster.kueue_types import PACKAGE as KUEUE_PACKAGE
from simcluster.kueue_types import VERSION as KUEUE_VERSION
from simcluster.typedefs_apps import (
    WORKLOAD_ATOMIC,
    WORKLOAD_FIELDS,
    WORKLOAD_NEWER,
    WORKLOAD_NON_CORE,
    WORKLOAD_PACKAGES,
)
from simcluster.typedefs_core import CORE_FIELDS

# Definition-name prefix per API group (the Go package of the group's v1 types).
GROUP_PACKAGES: dict[str, str] = {
    "": "io.k8s.api.core.v1",
    "policy": "io.k8s.api.policy.v1",
    "scheduling.k8s.io": "io.k8s.api.scheduling.v1",
    "rbac.authorization.k8s.io": "io.k8s.api.rbac.v1",
    "coordination.k8s.io": "io.k8s.api.coordination.v1",
    "authorization.k8s.io": "io.k8s.api.authorization.v1",
    "authentication.k8s.io": "io.k8s.api.authentication.v1",
    **WORKLOAD_PACKAGES,  # apps, batch, networking.k8s.io (typedefs_apps.py)
    "nvidia.com": "com.nvidia.v1",  # the GPU Operator's CRD (simcluster/clusterpolicy.py)
    "kueue.x-k8s.io": KUEUE_PACKAGE,  # Kueue's CRDs (simcluster/kueue_types.py)
}
# the served version of a group whose types are not v1
GROUP_VERSION: dict[str, str] = {"kueue.x-k8s.io": KUEUE_VERSION}
META = "io.k8s.apimachinery.pkg.apis.meta.v1"


def expand(short: str) -> str:
    """``core.v1.PodSpec`` -> ``io.k8s.api.core.v1.PodSpec``."""
    if short.startswith("meta.v1."):
        return "io.k8s.apimachinery.pkg.apis." + short
    return "io.k8s.api." + short


def shorten(name: str) -> str:
    """Inverse of :func:`expand`."""
    return name.replace("io.k8s.apimachinery.pkg.apis.", "").replace("io.k8s.api.", "")


FIELDS: dict[str, dict[str, str]] = {
    "scheduling.v1.PriorityClass": {"value": "req", "preemptionPolicy": "go=v1.PreemptionPolicy"},
    "rbac.v1.Role": {"rules": "lt=atomic"},
    "rbac.v1.ClusterRole": {"rules": "lt=atomic"},
    "rbac.v1.RoleBinding": {"subjects": "lt=atomic", "roleRef": "req"},
    "rbac.v1.ClusterRoleBinding": {"subjects": "lt=atomic", "roleRef": "req"},
    "authorization.v1.SelfSubjectAccessReview": {"spec": "req"},
    "authorization.v1.SelfSubjectRulesReview": {"spec": "req"},
    "authentication.v1.TokenRequest": {"spec": "req"},
    "meta.v1.Status": {"reason": "go=v1.StatusReason", "details": "lt=atomic"},
    "meta.v1.DeleteOptions": {
        "gracePeriodSeconds": "t=int64",
        "propagationPolicy": "go=v1.DeletionPropagation",
        "dryRun": "lt=atomic",
    },
    "meta.v1.ListMeta": {"remainingItemCount": "t=int64"},
    "meta.v1.WatchEvent": {"type": "req", "object": "req t=rawext go=runtime.RawExtension"},
    "policy.v1.PodDisruptionBudgetList": {"items": "req"},
    "scheduling.v1.PriorityClassList": {"items": "req"},
    "rbac.v1.RoleList": {"items": "req"},
    "rbac.v1.ClusterRoleList": {"items": "req"},
    "rbac.v1.RoleBindingList": {"items": "req"},
    "rbac.v1.ClusterRoleBindingList": {"items": "req"},
    "coordination.v1.LeaseList": {"items": "req"},
    "meta.v1.ObjectMeta": {
        "uid": "go=types.UID",
        "generation": "t=int64",
        "deletionGracePeriodSeconds": "t=int64",
        "ownerReferences": "ps=merge pk=uid lt=map lk=uid",
        "finalizers": "ps=merge lt=set",
        "managedFields": "lt=atomic",
    },
    "policy.v1.PodDisruptionBudgetSpec": {
        "minAvailable": "t=intstr",
        "selector": "ps=replace",
        "maxUnavailable": "t=intstr",
        "unhealthyPodEvictionPolicy": "go=v1.UnhealthyPodEvictionPolicyType",
    },
    "policy.v1.PodDisruptionBudgetStatus": {
        "observedGeneration": "t=int64",
        "disruptionsAllowed": "req",
        "currentHealthy": "req",
        "desiredHealthy": "req",
        "expectedPods": "req",
        "conditions": "ps=merge pk=type lt=map lk=type",
    },
    "rbac.v1.PolicyRule": {
        "verbs": "req lt=atomic",
        "apiGroups": "lt=atomic",
        "resources": "lt=atomic",
        "resourceNames": "lt=atomic",
        "nonResourceURLs": "lt=atomic",
    },
    "rbac.v1.AggregationRule": {"clusterRoleSelectors": "lt=atomic"},
    "rbac.v1.Subject": {"name": "req"},
    "rbac.v1.RoleRef": {"apiGroup": "req", "name": "req"},
    "coordination.v1.LeaseSpec": {
        "acquireTime": "t=microtime",
        "renewTime": "t=microtime",
        "strategy": "go=v1.CoordinatedLeaseStrategy",
    },
    "authorization.v1.SubjectAccessReviewStatus": {"allowed": "req"},
    "authorization.v1.SubjectRulesReviewStatus": {
        "resourceRules": "req lt=atomic",
        "nonResourceRules": "req lt=atomic",
        "incomplete": "req",
    },
    "authentication.v1.TokenRequestSpec": {
        "audiences": "req lt=atomic",
        "expirationSeconds": "t=int64",
    },
    "authentication.v1.TokenRequestStatus": {"token": "req", "expirationTimestamp": "req"},
    "meta.v1.StatusDetails": {"uid": "go=types.UID", "causes": "lt=atomic"},
    "meta.v1.Preconditions": {"uid": "go=types.UID"},
    "meta.v1.OwnerReference": {"name": "req", "uid": "req go=types.UID"},
    "meta.v1.ManagedFieldsEntry": {
        "operation": "go=v1.ManagedFieldsOperationType",
        "fieldsV1": "t=fieldsv1",
    },
    "meta.v1.Condition": {
        "type": "req",
        "status": "req go=v1.ConditionStatus",
        "observedGeneration": "t=int64",
        "lastTransitionTime": "req",
        "reason": "req",
        "message": "req",
    },
    "meta.v1.LabelSelector": {"matchExpressions": "lt=atomic"},
    "authorization.v1.ResourceRule": {
        "verbs": "req lt=atomic",
        "apiGroups": "lt=atomic",
        "resources": "lt=atomic",
        "resourceNames": "lt=atomic",
    },
    "authorization.v1.NonResourceRule": {"verbs": "req lt=atomic", "nonResourceURLs": "lt=atomic"},
    "authentication.v1.UserInfo": {"groups": "lt=atomic", "extra": "go=map[string]v1.ExtraValue"},
    "authentication.v1.BoundObjectReference": {"uid": "go=types.UID"},
    "meta.v1.StatusCause": {"reason": "go=v1.CauseType"},
    "meta.v1.LabelSelectorRequirement": {
        "key": "req",
        "operator": "req go=v1.LabelSelectorOperator",
        "values": "lt=atomic",
    },
    "authorization.v1.FieldSelectorAttributes": {"requirements": "lt=atomic"},
    "authorization.v1.LabelSelectorAttributes": {"requirements": "lt=atomic"},
    "meta.v1.FieldSelectorRequirement": {
        "key": "req",
        "operator": "req go=v1.FieldSelectorOperator",
        "values": "lt=atomic",
    },
}
FIELDS.update(CORE_FIELDS)
FIELDS.update(WORKLOAD_FIELDS)
FIELDS.update(CRD_FIELDS)  # the GPU Operator's ClusterPolicy (clusterpolicy.py)
FIELDS.update(KUEUE_FIELDS)  # Kueue (kueue_types.py)

ATOMIC_STRUCTS: frozenset[str] = frozenset(
    {
        "core.v1.ObjectReference",
        "core.v1.LocalObjectReference",
        "rbac.v1.Subject",
        "rbac.v1.RoleRef",
        "meta.v1.OwnerReference",
        "core.v1.ScopeSelector",
        "meta.v1.LabelSelector",
        "core.v1.NodeSelector",
        "core.v1.ObjectFieldSelector",
        "core.v1.ResourceFieldSelector",
        "core.v1.ConfigMapKeySelector",
        "core.v1.SecretKeySelector",
        "core.v1.NodeSelectorTerm",
        "core.v1.TypedLocalObjectReference",
    }
)

NON_CORE: dict[str, str] = {
    "policy.v1": (
        "PodDisruptionBudget Eviction PodDisruptionBudgetList PodDisruptionBudgetSpec "
        "PodDisruptionBudgetStatus"
    ),
    "scheduling.v1": ("PriorityClass PriorityClassList"),
    "rbac.v1": (
        "Role ClusterRole RoleBinding ClusterRoleBinding RoleList ClusterRoleList "
        "RoleBindingList ClusterRoleBindingList PolicyRule AggregationRule RoleRef"
    ),
    "coordination.v1": ("Lease LeaseList LeaseSpec"),
    "authorization.v1": (
        "SelfSubjectAccessReview SelfSubjectRulesReview SelfSubjectAccessReviewSpec "
        "SubjectAccessReviewStatus SelfSubjectRulesReviewSpec SubjectRulesReviewStatus "
        "ResourceAttributes NonResourceAttributes ResourceRule NonResourceRule "
        "FieldSelectorAttributes LabelSelectorAttributes"
    ),
    "authentication.v1": (
        "SelfSubjectReview SelfSubjectReviewStatus TokenRequestSpec TokenRequestStatus "
        "UserInfo BoundObjectReference"
    ),
    "meta.v1": (
        "Status DeleteOptions ListMeta WatchEvent ObjectMeta StatusDetails Preconditions "
        "OwnerReference ManagedFieldsEntry Condition LabelSelector StatusCause "
        "LabelSelectorRequirement FieldSelectorRequirement"
    ),
}

NEWER_THAN_1_32: dict[str, tuple[str, ...]] = {
    "meta.v1.ListMeta": ("shardInfo",),
    "core.v1.NodeStatus": ("declaredFeatures",),
    "core.v1.PodSpec": (
        "hostnameOverride",
        "schedulingGroup",
    ),
    "core.v1.PodStatus": (
        "allocatedResources",
        "extendedResourceClaimStatus",
        "nodeAllocatableResourceClaimStatuses",
        "observedGeneration",
        "resources",
    ),
    "core.v1.NodeSystemInfo": ("swap",),
    "core.v1.Container": ("restartPolicyRules",),
    "core.v1.EphemeralContainer": ("restartPolicyRules",),
    "core.v1.PodCondition": ("observedGeneration",),
    "core.v1.ContainerStatus": ("stopSignal",),
    "core.v1.Lifecycle": ("stopSignal",),
    "core.v1.VolumeMountStatus": ("volumeStatus",),
    "core.v1.VolumeProjection": ("podCertificate",),
    "core.v1.EnvVarSource": ("fileKeyRef",),
    "core.v1.ResourceHealth": ("message",),
}
ATOMIC_STRUCTS |= WORKLOAD_ATOMIC
NON_CORE.update(WORKLOAD_NON_CORE)
NEWER_THAN_1_32.update(WORKLOAD_NEWER)
