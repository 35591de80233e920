"""The connection preflight: what the portal needs from a cluster, asked before it is used.

Each check turns what the cluster answered into a :class:`Finding` (``ok`` | ``warning``
| ``error``, a one-line summary and the fix); the check functions are pure
(``preflight_checks.py``), and :func:`run_preflight` is the one place that asks the
cluster, through ``KubeGateway``.
The connect form and API, ``manage.py check_cluster`` and the cluster page all show the
same :class:`Report`. What each check follows:

1. ``GET /version`` (Kubernetes 1.28 or newer: ``SelfSubjectReview``, which the portal
   uses to say who it is, is served as ``authentication.k8s.io/v1`` from 1.28 on).
2. Every row of ``inventory/kube/permissions.py``, asked with a SelfSubjectAccessReview.
3. The GPU Operator's ClusterPolicy (NVIDIA/gpu-operator api/nvidia/v1/
   clusterpolicy_types.go: ``spec.mig.strategy`` none|single|mixed,
   ``spec.migManager.config.name``, the mig-parted ConfigMap in the operator's namespace).
4. GFD labels on GPU nodes (``nvidia.com/gpu.product``, ``nvidia.com/gpu.count``).
5. ResourceQuotas and LimitRanges on GPU resources in the namespaces to manage that the
   portal does not own: Kubernetes enforces every quota in a namespace (docs/quotas.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from django.conf import settings
from django.utils import timezone

from .kube import KubeError, KubeGateway
from .kube.permissions import PERMISSIONS
from .models import Cluster
from .preflight_checks import (
    ERROR,
    OK,
    WARNING,
    Finding,
    check_dra,
    check_gfd,
    check_identity,
    check_kueue,
    check_limits,
    check_mig_config,
    check_operator,
    check_permissions,
    check_version,
    is_gpu_node,
    mig_config_name,
    missing_in,
    review_namespace,
    unlabelled_gpu_node,
    unreachable,
    worst,
)

__all__ = ["ERROR", "OK", "WARNING", "Finding", "Report", "report_from", "run_preflight", "store"]


@dataclass(slots=True)
class Report:
    findings: list[Finding]
    ran_at: str = ""
    server_version: str = ""
    identity: str = ""
    namespaces: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        return worst(f.level for f in self.findings)

    @property
    def missing_permissions(self) -> list[str]:
        return missing_in(self.findings)

    def as_dict(self) -> dict[str, Any]:
        body = asdict(self)
        body["status"] = self.status
        body["missing_permissions"] = self.missing_permissions
        return body


# -- running it ------------------------------------------------------------------------------


def namespaces_for(cluster: Cluster, extra: Iterable[str] = ()) -> list[str]:
    """The cluster's managed team namespaces plus the namespaces to check it was given."""
    from quotas.models import TeamNamespace

    names = set(extra) | set(cluster.preflight_namespaces or [])
    if cluster.pk and not cluster._state.adding:
        names |= set(TeamNamespace.objects.filter(cluster=cluster).values_list("name", flat=True))
    return sorted(names)


def gateway_for(cluster: Cluster) -> KubeGateway:
    """A gateway that gives up quickly: the preflight runs while an admin waits."""
    return KubeGateway(cluster, retries=0, timeout=settings.PREFLIGHT_REQUEST_TIMEOUT)


def ask_permissions(gw: KubeGateway, namespaces: list[str]) -> Finding:
    team_ns = namespaces[0] if namespaces else ""
    answers = []
    for perm in PERMISSIONS:
        ns = review_namespace(perm, team_ns)
        allowed, reason = gw.access_review(
            perm.verb,
            perm.resource,
            group=perm.group,
            namespace=ns,
            name=perm.name,
            subresource=perm.subresource,
        )
        answers.append((perm, ns, allowed, reason))
    return check_permissions(answers)


def _guarded(check: str, fn, *args) -> list[Finding]:
    try:
        result = fn(*args)
    except KubeError as err:
        return [Finding(check, ERROR, f"The check failed: {err}", "Run the preflight again.")]
    return result if isinstance(result, list) else [result]


def _operator_checks(gw: KubeGateway) -> list[Finding]:
    policies = gw.list_cluster_policies()
    findings = check_operator(policies)
    if policies:
        name, exists = mig_config_name(policies), None
        if name == settings.MIG_CONFIGMAP_NAME:  # the only name our RBAC may read
            exists = gw.get_config_map(settings.MIG_CONFIGMAP_NAMESPACE, name) is not None
        findings.append(check_mig_config(policies, exists))
    return findings


def _kueue_check(gw: KubeGateway, enforcement: str) -> Finding:
    flavors = gw.list_kueue_objects(
        "resourceflavors", label_selector="app.kubernetes.io/managed-by=gpu-quota-portal"
    )
    return check_kueue(enforcement, flavors)


def _dra_check(gw: KubeGateway) -> Finding:
    """On a DRA cluster: the driver's slices (nodes and devices), and no node that also
    offers its GPUs through the device plugin."""
    from .dra import DRIVER

    slices = gw.list_resource_slices()
    if slices is None:
        return check_dra(None, 0, [])
    mine = [s for s in slices if (s.get("spec") or {}).get("driver") == DRIVER]
    nodes = {(s.get("spec") or {}).get("nodeName") for s in mine} - {None, ""}
    devices = sum(len((s.get("spec") or {}).get("devices") or []) for s in mine)
    both = [
        node["metadata"]["name"]
        for page in gw.list_pages("nodes", limit=500)
        for node in page.items
        if node["metadata"]["name"] in nodes and is_gpu_node(node)
    ]
    return check_dra(len(nodes), devices, both)


def _gfd_check(gw: KubeGateway) -> Finding:
    gpu_nodes, unlabelled = 0, []
    for page in gw.list_pages("nodes", limit=500):
        for node in page.items:
            gpu_nodes += is_gpu_node(node)
            if unlabelled_gpu_node(node):
                unlabelled.append(node["metadata"]["name"])
    return check_gfd(gpu_nodes, unlabelled)


def _limits_check(gw: KubeGateway, namespaces: list[str]) -> Finding:
    quotas = {ns: gw.list_resource_quotas(ns) for ns in namespaces}
    ranges = {ns: gw.list_limit_ranges(ns) for ns in namespaces}
    from quotas.models import ForeignQuota

    decisions = {
        (ns, name): decision
        for ns, name, decision in ForeignQuota.objects.filter(
            namespace__cluster=gw.cluster, gone_at__isnull=True
        ).values_list("namespace__name", "name", "decision")
    }
    return check_limits(quotas, ranges, decisions)


def run_preflight(cluster: Cluster, namespaces: Iterable[str] = ()) -> Report:
    """Ask the cluster everything above (the cluster need not be saved)."""
    names = namespaces_for(cluster, namespaces)
    report = Report(findings=[], ran_at=timezone.now().isoformat(), namespaces=names)
    try:
        gw = gateway_for(cluster)
        report.server_version = gw.version()
    except KubeError as err:
        report.findings.append(unreachable(err))
        return report
    report.findings.append(check_version(report.server_version))
    report.findings += _guarded("identity", lambda: check_identity(gw.whoami()))
    report.identity = next(
        (f.summary for f in report.findings if f.check == "identity" and f.level == OK), ""
    )
    report.findings += _guarded("permissions", ask_permissions, gw, names)
    report.findings += _guarded("gpu-operator", _operator_checks, gw)
    if cluster.is_dra:
        report.findings += _guarded("dra", _dra_check, gw)
    else:
        report.findings += _guarded("gfd", _gfd_check, gw)
    report.findings += _guarded("kueue", _kueue_check, gw, cluster.enforcement)
    report.findings += _guarded("limits", _limits_check, gw, names)
    return report


def recheck_permissions(cluster: Cluster) -> list[str]:
    """Ask the permissions only (the periodic re-check); store and return what is missing."""
    try:
        finding = ask_permissions(gateway_for(cluster), namespaces_for(cluster))
    except KubeError:
        return list(cluster.missing_permissions)  # unreachable: the sync reports that
    missing = missing_in([finding])
    Cluster.objects.filter(pk=cluster.pk).update(
        missing_permissions=missing, permissions_checked_at=timezone.now()
    )
    return missing


def store(cluster: Cluster, report: Report) -> None:
    """Keep the report on the cluster (the caller saves or updates the row)."""
    cluster.preflight = report.as_dict()
    cluster.preflight_status = report.status
    cluster.preflight_at = timezone.now()
    cluster.missing_permissions = report.missing_permissions
    cluster.permissions_checked_at = cluster.preflight_at


STORED_FIELDS = [
    "preflight",
    "preflight_status",
    "preflight_at",
    "missing_permissions",
    "permissions_checked_at",
]


def report_from(data: dict[str, Any]) -> Report | None:
    """A stored report back as a :class:`Report` (None when there is none)."""
    if not data:
        return None
    fields = {k: data.get(k) for k in ("ran_at", "server_version", "identity")}
    findings = [
        Finding(**{k: f.get(k) for k in ("check", "level", "summary", "fix", "items")})
        for f in data.get("findings") or []
    ]
    return Report(
        findings=findings,
        namespaces=data.get("namespaces") or [],
        **{k: v or "" for k, v in fields.items()},
    )
