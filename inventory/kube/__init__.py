"""The one gateway to Kubernetes API servers. No other module builds a client.

Everything the portal does to or reads from a cluster goes through ``KubeGateway``:
bulk reads as raw JSON pages (the typed client's model deserialisation is far too slow
for 100k objects, GPU-FACTS.md section 2), label/cordon patches, server-side apply.
Every failure surfaces as ``KubeError`` with ``permanent`` telling callers whether a
retry can help; transient failures are retried here a bounded number of times.

The class is assembled from one module per concern, so each stays small:
``base`` (clients, errors, retries, inventory reads, quota writes), ``workloads``
(the MIG coordinator's pods, evictions and ConfigMaps), ``namespaces`` (every quota and
LimitRange in a namespace) and ``cluster`` (access reviews, the GPU Operator's
ClusterPolicy), ``kueue`` (Kueue's flavors, queues and workloads), ``dra`` (Dynamic Resource
Allocation: ResourceSlices, ResourceClaims, DeviceClasses). Every call here must be allowed
by ``deploy/kubernetes/rbac.yaml``; the tests run the portal with exactly that RBAC.
"""

from .base import (
    APPLY_PATCH,
    FIELD_MANAGER,
    MERGE_PATCH,
    TRANSIENT_STATUS,
    GatewayCore,
    KubeError,
    ListPage,
    build_api_client,
    shared_api_client,
)
from .cluster import CLUSTER_POLICY, ClusterCalls
from .dra import DraCalls
from .kueue import KUEUE_API, KueueCalls
from .namespaces import NamespaceCalls
from .quota_admin import QuotaAdminCalls
from .workloads import WorkloadCalls


class KubeGateway(
    WorkloadCalls,
    NamespaceCalls,
    QuotaAdminCalls,
    ClusterCalls,
    KueueCalls,
    DraCalls,
    GatewayCore,
):
    """Typed-enough access to one cluster. Construct per task; cheap."""


__all__ = [
    "APPLY_PATCH",
    "CLUSTER_POLICY",
    "FIELD_MANAGER",
    "KUEUE_API",
    "MERGE_PATCH",
    "TRANSIENT_STATUS",
    "KubeError",
    "KubeGateway",
    "ListPage",
    "build_api_client",
    "shared_api_client",
]
