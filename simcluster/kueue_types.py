"""``kueue.x-k8s.io/v1beta2``: Kueue's CRDs as the simulator serves them (schemas and types).

Transcribed from kubernetes-sigs/kueue ``config/components/crd/bases/kueue.x-k8s.io_*.yaml``
(the ``v1beta2`` storage version, generated from ``apis/kueue/v1beta2/*_types.go``): the
fields of ResourceFlavor, ClusterQueue, LocalQueue, Cohort and Workload that this simulator
models, with their JSON types; fields the CRDs declare but the simulator does not model
(``admissionChecksStrategy``, ``fairSharing`` status, ``requeueState`` ...) are opaque
objects; undeclared fields are pruned as apiextensions does (as for
:mod:`simcluster.clusterpolicy`). Quantities are ``x-kubernetes-int-or-string`` in the CRDs
and stored as sent (a custom resource is not canonicalised), so they are ``intstr`` here.

The classes look like the official client's generated models, so :mod:`simcluster.schema`
builds the definitions ``io.x-k8s.kueue.v1beta2.ClusterQueue`` ... from them (decoding,
merge/apply patches, OpenAPI v3 at ``/openapi/v3/apis/kueue.x-k8s.io/v1beta2``).
"""

from __future__ import annotations

from typing import Any

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
API_VERSION = f"{GROUP}/{VERSION}"
PACKAGE = "io.x-k8s.kueue.v1beta2"  # kube-openapi's name for a CRD of kueue.x-k8s.io
CAMEL = "KueueV1beta2"
KINDS = {
    "resourceflavors": "ResourceFlavor",
    "clusterqueues": "ClusterQueue",
    "localqueues": "LocalQueue",
    "cohorts": "Cohort",
    "workloads": "Workload",
}
RESOURCES = frozenset(KINDS)

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # constants.QueueLabel
GATE = "kueue.x-k8s.io/admission"  # pod/constants: SchedulingGateName
MANAGED_LABEL = "kueue.x-k8s.io/managed"  # pod/constants: ManagedLabelKey
POD_FINALIZER = "kueue.x-k8s.io/managed"  # pod/constants: PodFinalizer
RESOURCE_IN_USE = "kueue.x-k8s.io/resource-in-use"  # constants.ResourceInUseFinalizerName
MANAGER = "kueue-controller-manager"  # the field manager of its writes here

_STR, _INT, _BOOL, _OBJ = "str", "int", "bool", "object"


def _model(name: str, fields: dict[str, str]) -> type:
    """A class shaped like a generated client model: ``{json: client type}``."""
    ns: dict[str, Any] = {
        "openapi_types": dict(sorted(fields.items())),
        "attribute_map": {k: k for k in sorted(fields)},
    }
    for k in fields:
        doc = f"Gets the {k} of this {name}.  # noqa: E501\n\n{k} (see the Kueue CRD)\n\n:return:"
        ns[k] = property(lambda self: None, doc=doc)
    return type(CAMEL + name, (), ns)


def _c(n: str) -> str:
    return CAMEL + n


def _top(kind: str, status: bool = True) -> dict[str, str]:
    out = {"apiVersion": _STR, "kind": _STR, "metadata": "V1ObjectMeta", "spec": _c(kind + "Spec")}
    if status:
        out["status"] = _c(kind + "Status")
    return out


def _list(kind: str) -> dict[str, str]:
    return {
        "apiVersion": _STR,
        "items": f"list[{_c(kind)}]",
        "kind": _STR,
        "metadata": "V1ListMeta",
    }


_CONDITIONS = "list[V1Condition]"
_SPECS: dict[str, dict[str, str]] = {
    "ResourceFlavor": _top("ResourceFlavor", status=False),
    "ResourceFlavorSpec": {
        "nodeLabels": "dict(str, str)",
        "nodeTaints": "list[V1Taint]",
        "tolerations": "list[V1Toleration]",
        "topologyName": _STR,
    },
    "ClusterQueue": _top("ClusterQueue"),
    "ClusterQueueSpec": {
        "admissionChecksStrategy": _OBJ,
        "admissionScope": _OBJ,
        "cohortName": _STR,
        "concurrentAdmissionPolicy": _OBJ,
        "fairSharing": _c("FairSharing"),
        "flavorFungibility": _c("FlavorFungibility"),
        "namespaceSelector": "V1LabelSelector",
        "preemption": _c("ClusterQueuePreemption"),
        "queueingStrategy": _STR,
        "resourceGroups": f"list[{_c('ResourceGroup')}]",
        "stopPolicy": _STR,
    },
    "ResourceGroup": {"coveredResources": "list[str]", "flavors": f"list[{_c('FlavorQuotas')}]"},
    "FlavorQuotas": {"name": _STR, "resources": f"list[{_c('ResourceQuota')}]"},
    "ResourceQuota": {
        "borrowingLimit": _STR,
        "lendingLimit": _STR,
        "name": _STR,
        "nominalQuota": _STR,
    },
    "FairSharing": {"weight": _STR},
    "FlavorFungibility": {"preference": _STR, "whenCanBorrow": _STR, "whenCanPreempt": _STR},
    "ClusterQueuePreemption": {
        "borrowWithinCohort": _c("BorrowWithinCohort"),
        "reclaimWithinCohort": _STR,
        "withinClusterQueue": _STR,
    },
    "BorrowWithinCohort": {"maxPriorityThreshold": _INT, "policy": _STR},
    "ClusterQueueStatus": {
        "admittedWorkloads": _INT,
        "conditions": _CONDITIONS,
        "fairSharing": _OBJ,
        "flavorsReservation": f"list[{_c('FlavorUsage')}]",
        "flavorsUsage": f"list[{_c('FlavorUsage')}]",
        "pendingWorkloads": _INT,
        "reservingWorkloads": _INT,
    },
    "FlavorUsage": {"name": _STR, "resources": f"list[{_c('ResourceUsage')}]"},
    "ResourceUsage": {"borrowed": _STR, "name": _STR, "total": _STR},
    "LocalQueue": _top("LocalQueue"),
    "LocalQueueSpec": {"clusterQueue": _STR, "fairSharing": _c("FairSharing"), "stopPolicy": _STR},
    "LocalQueueStatus": {
        "admittedWorkloads": _INT,
        "conditions": _CONDITIONS,
        "fairSharing": _OBJ,
        "flavorsReservation": f"list[{_c('LocalQueueFlavorUsage')}]",
        "flavorsUsage": f"list[{_c('LocalQueueFlavorUsage')}]",
        "pendingWorkloads": _INT,
        "reservingWorkloads": _INT,
    },
    "LocalQueueFlavorUsage": {"name": _STR, "resources": f"list[{_c('LocalQueueResourceUsage')}]"},
    "LocalQueueResourceUsage": {"name": _STR, "total": _STR},
    "Cohort": _top("Cohort"),
    "CohortSpec": {
        "fairSharing": _c("FairSharing"),
        "parentName": _STR,
        "resourceGroups": f"list[{_c('ResourceGroup')}]",
    },
    "CohortStatus": {"fairSharing": _OBJ},
    "Workload": _top("Workload"),
    "WorkloadSpec": {
        "active": _BOOL,
        "maximumExecutionTimeSeconds": _INT,
        "podSets": f"list[{_c('PodSet')}]",
        "preemptionGates": "list[object]",
        "priority": _INT,
        "priorityClassRef": _c("PriorityClassRef"),
        "queueName": _STR,
    },
    "PodSet": {
        "count": _INT,
        "minCount": _INT,
        "name": _STR,
        "template": "V1PodTemplateSpec",
        "topologyRequest": _OBJ,
    },
    "PriorityClassRef": {"group": _STR, "kind": _STR, "name": _STR},
    "WorkloadStatus": {
        "accumulatedPastExecutionTimeSeconds": _INT,
        "admission": _c("Admission"),
        "admissionChecks": "list[object]",
        "clusterName": _STR,
        "conditions": _CONDITIONS,
        "nominatedClusterNames": "list[str]",
        "preemptionGates": "list[object]",
        "reclaimablePods": "list[object]",
        "requeueState": _OBJ,
        "resourceRequests": f"list[{_c('PodSetRequest')}]",
        "schedulingStats": _OBJ,
        "unhealthyNodes": "list[object]",
    },
    "Admission": {"clusterQueue": _STR, "podSetAssignments": f"list[{_c('PodSetAssignment')}]"},
    "PodSetAssignment": {
        "count": _INT,
        "flavors": "dict(str, str)",
        "name": _STR,
        "resourceUsage": "dict(str, str)",
    },
    "PodSetRequest": {"name": _STR, "resources": "dict(str, str)"},
}
for _k in KINDS.values():
    _SPECS[_k + "List"] = _list(_k)
MODELS: dict[str, type] = {CAMEL + n: _model(n, f) for n, f in _SPECS.items()}

# typedefs.FIELDS facts (``x-kubernetes-*`` of the CRDs; required fields; int-or-string)
_Q = "t=intstr"
_MAP = "lt=map lk=name"
_P = PACKAGE
CRD_FIELDS: dict[str, dict[str, str]] = {
    f"{_P}.ResourceFlavorSpec": {
        "nodeLabels": "mt=atomic",
        "nodeTaints": "lt=atomic",
        "tolerations": "lt=atomic",
    },
    f"{_P}.ClusterQueueSpec": {"resourceGroups": "lt=atomic"},
    f"{_P}.ResourceGroup": {"coveredResources": "req lt=atomic", "flavors": "req " + _MAP},
    f"{_P}.FlavorQuotas": {"name": "req", "resources": "req " + _MAP},
    f"{_P}.ResourceQuota": {
        "name": "req",
        "nominalQuota": "req " + _Q,
        "borrowingLimit": _Q,
        "lendingLimit": _Q,
    },
    f"{_P}.FairSharing": {"weight": _Q},
    f"{_P}.ClusterQueueStatus": {
        "conditions": "lt=map lk=type",
        "flavorsReservation": _MAP,
        "flavorsUsage": _MAP,
    },
    f"{_P}.LocalQueueStatus": {
        "conditions": "lt=map lk=type",
        "flavorsReservation": _MAP,
        "flavorsUsage": _MAP,
    },
    f"{_P}.FlavorUsage": {"name": "req", "resources": "req " + _MAP},
    f"{_P}.ResourceUsage": {"name": "req", "total": _Q, "borrowed": _Q},
    f"{_P}.LocalQueueFlavorUsage": {"name": "req", "resources": "req " + _MAP},
    f"{_P}.LocalQueueResourceUsage": {"name": "req", "total": _Q},
    f"{_P}.CohortSpec": {"resourceGroups": "lt=atomic"},
    f"{_P}.WorkloadSpec": {"podSets": "req " + _MAP},
    f"{_P}.PodSet": {"count": "req"},
    f"{_P}.PriorityClassRef": {"group": "req", "kind": "req", "name": "req"},
    f"{_P}.WorkloadStatus": {"conditions": "lt=map lk=type", "resourceRequests": _MAP},
    f"{_P}.Admission": {"clusterQueue": "req", "podSetAssignments": "req " + _MAP},
    f"{_P}.PodSetAssignment": {"name": "req", "resourceUsage": _Q},
    f"{_P}.PodSetRequest": {"name": "req", "resources": _Q},
}
DESCRIPTIONS = {
    "ResourceFlavor": "ResourceFlavor is the Schema for the resourceflavors API.",
    "ClusterQueue": "ClusterQueue is the Schema for the clusterQueue API.",
    "LocalQueue": "LocalQueue is the Schema for the localQueues API",
    "Cohort": "Cohort defines the Cohorts API.",
    "Workload": "Workload is the Schema for the workloads API",
}


# ------------------------------------------------------------ strategy (CRD registry)
def _d(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def default(resource: str, obj: dict[str, Any]) -> None:
    """The CRDs' structural defaults (``default:`` in the schemas), applied on decode."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    if resource == "clusterqueues":
        spec.setdefault("queueingStrategy", "BestEffortFIFO")
        spec.setdefault("stopPolicy", "None")
        fung = spec.setdefault("flavorFungibility", {})
        if isinstance(fung, dict):
            fung.setdefault("whenCanBorrow", "MayStopSearch")
            fung.setdefault("whenCanPreempt", "TryNextFlavor")
        pre = spec.setdefault("preemption", {})
        if isinstance(pre, dict):
            bwc = pre.setdefault("borrowWithinCohort", {})
            if isinstance(bwc, dict):
                bwc.setdefault("policy", "Never")
            pre.setdefault("reclaimWithinCohort", "Never")
            pre.setdefault("withinClusterQueue", "Never")
        if isinstance(spec.get("fairSharing"), dict):
            spec["fairSharing"].setdefault("weight", 1)
    elif resource == "localqueues":
        spec.setdefault("stopPolicy", "None")
    elif resource == "workloads":
        spec.setdefault("active", True)
        for ps in spec.get("podSets") or []:
            if isinstance(ps, dict):
                ps.setdefault("name", "main")
                ps.setdefault("count", 1)


def prepare_create(resource: str, obj: dict[str, Any]) -> None:
    """customResourceStrategy.PrepareForCreate: generation 1, status dropped (subresource)."""
    obj["metadata"]["generation"] = 1
    if resource != "resourceflavors":
        obj.pop("status", None)


def prepare_update(resource: str, old: dict[str, Any], new: dict[str, Any]) -> None:
    """customResourceStrategy.PrepareForUpdate: generation +1 when anything but metadata and
    status changed."""
    gen = int(_d(old.get("metadata")).get("generation") or 1)
    strip = ("metadata", "status") if resource != "resourceflavors" else ("metadata",)
    changed = {k: v for k, v in old.items() if k not in strip} != {
        k: v for k, v in new.items() if k not in strip
    }
    new["metadata"]["generation"] = gen + 1 if changed else gen
