"""The preflight's checks as pure functions: what a cluster answered -> a :class:`Finding`.

``inventory/preflight.py`` asks the cluster and calls these; what each follows is listed
there. Each finding is ``ok`` | ``warning`` | ``error``, a one-line summary and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from .kube.permissions import Permission, rule_snippet

OK, WARNING, ERROR = "ok", "warning", "error"
LEVELS = (OK, WARNING, ERROR)
MIN_VERSION = (1, 28)
PORTAL_LABEL = ("app.kubernetes.io/managed-by", "gpu-quota-portal")
NAMES_SHOWN = 20
_VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)")


@dataclass(slots=True)
class Finding:
    check: str
    level: str
    summary: str
    fix: str = ""
    items: list[dict[str, Any]] = field(default_factory=list)


def worst(levels: Iterable[str]) -> str:
    found = set(levels)
    return next((level for level in reversed(LEVELS) if level in found), OK)


def missing_in(findings: Iterable[Finding]) -> list[str]:
    return [
        item["key"]
        for f in findings
        if f.check == "permissions"
        for item in f.items
        if not item.get("granted")
    ]


# -- 1. reachability, version, identity ----------------------------------------------------


def check_version(git_version: str) -> Finding:
    match = _VERSION_RE.match(git_version or "")
    if not match:
        return Finding(
            "version",
            WARNING,
            f"Unknown Kubernetes version {git_version!r}.",
            "Check that the URL is a Kubernetes API server.",
        )
    found = (int(match[1]), int(match[2]))
    need = ".".join(map(str, MIN_VERSION))
    if found < MIN_VERSION:
        return Finding(
            "version",
            ERROR,
            f"Kubernetes {git_version} is older than {need}.",
            f"Upgrade the cluster to Kubernetes {need} or newer.",
        )
    return Finding("version", OK, f"Kubernetes {git_version} reachable.")


def check_identity(user_info: dict[str, Any]) -> Finding:
    name = str(user_info.get("username") or "")
    if not name:
        return Finding(
            "identity",
            WARNING,
            "The API server did not say who we are.",
            "Check the credentials (SelfSubjectReview answered no username).",
        )
    groups = ", ".join(user_info.get("groups") or [])
    summary = f"Connected as {name}" + (f" (groups: {groups})." if groups else ".")
    return Finding("identity", OK, summary)


def unreachable(err: Exception) -> Finding:
    return Finding(
        "version",
        ERROR,
        f"Cannot connect: {err}",
        "Check the API URL, the credentials and the CA certificate.",
    )


# -- 2. permissions --------------------------------------------------------------------------


def review_namespace(permission: Permission, team_namespace: str) -> str:
    """Where to ask: the operator namespace, one managed team namespace, or cluster-wide
    (a ClusterRole grants a namespaced resource in every namespace)."""
    return permission.namespace(team_namespace)


def check_permissions(answers: list[tuple[Permission, str, bool, str]]) -> Finding:
    """``answers``: (permission, namespace asked, allowed, reason) for every row."""
    items = []
    for perm, namespace, allowed, reason in answers:
        items.append(
            {
                "key": perm.key,
                "verb": perm.verb,
                "resource": perm.resource_path,
                "group": perm.group,
                "namespace": namespace,
                "name": perm.name,
                "feature": perm.feature,
                "granted": allowed,
                "reason": reason,
                "rule": "" if allowed else rule_snippet(perm),
            }
        )
    missing = [i for i in items if not i["granted"]]
    if not missing:
        return Finding("permissions", OK, f"All {len(items)} permissions granted.", items=items)
    features = sorted({i["feature"].split(":")[0] for i in missing})
    return Finding(
        "permissions",
        ERROR,
        f"{len(missing)} of {len(items)} permissions missing ({'; '.join(features)}).",
        "Add the rules shown (deploy/kubernetes/rbac.yaml has them all) and run again.",
        items,
    )


# -- 3. the GPU Operator ---------------------------------------------------------------------


def active_policy(policies: list[dict[str, Any]]) -> dict[str, Any]:
    """The ClusterPolicy the operator reconciles (it marks any other ``ignored``)."""
    from mig.operator import _active_policy

    return _active_policy(policies)


def check_operator(policies: list[dict[str, Any]] | None) -> list[Finding]:
    """The operator and its MIG strategy; the config ConfigMap is :func:`check_mig_config`.

    ``status.state`` (ready|notReady|ignored) and ``status.namespace`` ("a namespace in
    which the operator is installed") are ClusterPolicyStatus in clusterpolicy_types.go;
    controllers/clusterpolicy_controller.go marks every ClusterPolicy but one ``ignored``.
    """
    if policies is None:
        return [
            Finding(
                "gpu-operator",
                WARNING,
                "GPU Operator not installed (clusterpolicies.nvidia.com not served): "
                "MIG changes will fail.",
                "Install the NVIDIA GPU Operator (docs/mig.md) to use MIG features.",
            )
        ]
    if not policies:
        return [
            Finding(
                "gpu-operator",
                WARNING,
                "The GPU Operator's CRD is served but there is no ClusterPolicy: "
                "MIG changes will fail.",
                "Create the ClusterPolicy (the operator's Helm chart does).",
            )
        ]
    policy = active_policy(policies)
    name = policy["metadata"]["name"]
    status = policy.get("status") or {}
    state = status.get("state") or "unknown"
    finding = Finding("gpu-operator", OK, f"GPU Operator ClusterPolicy {name}: {state}.")
    if state != "ready":
        finding.level = WARNING
        finding.fix = "Check the operator's pods; MIG changes wait until it is ready."
    if len(policies) > 1:
        finding.level = WARNING
        finding.summary += f" {len(policies)} ClusterPolicies: the operator ignores the others."
    ns = status.get("namespace")
    if ns and ns != settings.MIG_CONFIGMAP_NAMESPACE:
        finding.level = WARNING
        finding.summary += (
            f" It runs in {ns}, the portal writes MIG configs in "
            f"{settings.MIG_CONFIGMAP_NAMESPACE}."
        )
        finding.fix = (
            f"Set MIG_CONFIGMAP_NAMESPACE={ns} and move Role gpu-quota-portal-mig-config "
            "(deploy/kubernetes/rbac.yaml) to that namespace."
        )
    findings = [finding]
    strategy = ((policy.get("spec") or {}).get("mig") or {}).get("strategy") or ""
    if strategy in ("single", "mixed"):
        findings.append(Finding("mig-strategy", OK, f"MIG strategy {strategy}."))
    else:
        what = f"MIG strategy {strategy}" if strategy else "No MIG strategy set"
        findings.append(
            Finding(
                "mig-strategy",
                WARNING,
                f"{what}: MIG slices are not advertised.",
                f"Set spec.mig.strategy to mixed (or single) in ClusterPolicy {name}.",
            )
        )
    return findings


def mig_config_name(policies: list[dict[str, Any]] | None) -> str:
    """The ConfigMap the active ClusterPolicy names for mig-manager ("" when none)."""
    if not policies:
        return ""
    config = ((active_policy(policies).get("spec") or {}).get("migManager") or {}).get("config")
    return str((config or {}).get("name") or "")


def check_mig_config(policies: list[dict[str, Any]], exists: bool | None) -> Finding:
    """mig-manager reads the portal's ConfigMap (the rules of mig/operator.py
    ``check_policy``, which the MIG coordinator applies before a change); ``exists``:
    whether that ConfigMap is in the operator namespace (None: not asked)."""
    from mig.operator import OperatorProblem, check_policy

    try:
        name = check_policy(policies)
    except OperatorProblem as problem:
        return Finding(
            "mig-config",
            WARNING,
            "mig-manager will not read the portal's MIG layouts: MIG changes will fail.",
            str(problem),
        )
    ns = settings.MIG_CONFIGMAP_NAMESPACE
    if exists:
        return Finding("mig-config", OK, f"mig-manager reads ConfigMap {ns}/{name}.")
    return Finding(
        "mig-config",
        WARNING,
        f"ConfigMap {ns}/{name}, which the ClusterPolicy names, does not exist yet.",
        "The portal creates it (with the stock configs) on the first MIG change.",
    )


# -- 4. GFD labels ---------------------------------------------------------------------------


def _positive(value: Any) -> bool:
    try:
        return int(str(value)) > 0
    except ValueError:
        return False


def is_gpu_node(node: dict[str, Any]) -> bool:
    """Allocatable ``nvidia.com/gpu`` or ``nvidia.com/mig-*`` above zero."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return any(
        _positive(v)
        for k, v in allocatable.items()
        if k == "nvidia.com/gpu" or k.startswith("nvidia.com/mig-")
    )


def unlabelled_gpu_node(node: dict[str, Any]) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    has_labels = "nvidia.com/gpu.product" in labels and "nvidia.com/gpu.count" in labels
    return is_gpu_node(node) and not has_labels


def check_kueue(enforcement: str, flavors: list[dict[str, Any]] | None) -> Finding:
    """Kueue's API served (``resourceflavors.kueue.x-k8s.io`` listed) where the cluster's
    backend needs it; where it does not, only a note."""
    if enforcement != "kueue":
        served = "served: the cluster can switch" if flavors is not None else "not installed"
        backend = "DRA" if enforcement == "dra" else "ResourceQuota"
        return Finding("kueue", OK, f"Enforcement is {backend} (Kueue {served}).")
    if flavors is None:
        return Finding(
            "kueue", ERROR,
            "Enforcement is Kueue, but the cluster does not serve kueue.x-k8s.io/v1beta2: "
            "grants cannot be applied.",
            "Install Kueue (v0.14 or later serves v1beta2), or switch the cluster's "
            "enforcement back to ResourceQuota.",
        )  # fmt: skip
    return Finding("kueue", OK, f"Kueue serves v1beta2; {len(flavors)} portal flavor(s).")


def check_dra(nodes: int | None, devices: int, both: list[str]) -> Finding:
    """The DRA driver's view: ``nodes`` publishing GPU devices (None: ``resource.k8s.io/v1``
    not served), and nodes that offer their GPUs through the device plugin as well."""
    if nodes is None:
        return Finding(
            "dra", ERROR, "The cluster does not serve resource.k8s.io/v1 (DRA).",
            "Kubernetes v1.34 or later serves it; or choose another enforcement.",
        )  # fmt: skip
    if not nodes:
        return Finding(
            "dra", WARNING, "No node publishes GPU devices (no ResourceSlice of gpu.nvidia.com).",
            "Install NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu) on the GPU nodes.",
        )  # fmt: skip
    if both:
        shown = ", ".join(both[:NAMES_SHOWN]) + (" …" if len(both) > NAMES_SHOWN else "")
        return Finding(
            "dra", WARNING,
            f"{len(both)} node(s) offer their GPUs through the device plugin too: {shown}.",
            "Turn the device plugin off on DRA nodes: a pod asking for nvidia.com/gpu would "
            "take devices the per-class quota does not count.",
        )  # fmt: skip
    return Finding("dra", OK, f"{nodes} GPU node(s) publish {devices} devices through DRA.")


def check_gfd(gpu_nodes: int, unlabelled: list[str]) -> Finding:
    if not unlabelled:
        return Finding(
            "gfd",
            OK if gpu_nodes else WARNING,
            f"{gpu_nodes} GPU nodes, all with GFD labels."
            if gpu_nodes
            else "No GPU nodes (no allocatable nvidia.com/gpu or nvidia.com/mig-*).",
            "" if gpu_nodes else "Check the device plugin (GPU Operator).",
        )
    shown = ", ".join(unlabelled[:NAMES_SHOWN]) + (" …" if len(unlabelled) > NAMES_SHOWN else "")
    return Finding(
        "gfd",
        WARNING,
        f"{len(unlabelled)} of {gpu_nodes} GPU nodes lack nvidia.com/gpu.product or "
        f"gpu.count: {shown}.",
        "Run GPU Feature Discovery (the GPU Operator's gfd operand) on these nodes; "
        "without the labels the portal cannot tell their GPU model.",
        [{"node": n} for n in unlabelled],
    )


# -- 5. existing limits ----------------------------------------------------------------------


def _gpu_keys(mapping: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (mapping or {}).items() if "nvidia.com/" in k}


def portal_owns(quota: dict[str, Any]) -> bool:
    meta = quota.get("metadata") or {}
    label, value = PORTAL_LABEL
    return meta.get("name") == settings.QUOTA_NAME or (meta.get("labels") or {}).get(label) == value


def check_limits(
    quotas: dict[str, list[dict]],
    limit_ranges: dict[str, list[dict]],
    decisions: dict[tuple[str, str], str] | None = None,
) -> Finding:
    """Foreign GPU quotas and LimitRanges per namespace (``{namespace: [objects]}``).

    ``decisions`` maps (namespace, quota name) to an admin's recorded decision on it
    (``adopted``/``kept``, quotas.adoption): decided quotas are listed but only undecided
    ones, and LimitRanges (which have no decision), make the check a warning."""
    decisions = decisions or {}
    items = []
    for ns, objs in sorted(quotas.items()):
        for quota in objs:
            keys = _gpu_keys((quota.get("spec") or {}).get("hard"))
            if keys and not portal_owns(quota):
                items.append(
                    {
                        "namespace": ns,
                        "kind": "ResourceQuota",
                        "name": quota["metadata"]["name"],
                        "limits": keys,
                        "decision": decisions.get((ns, quota["metadata"]["name"]), "undecided"),
                    }
                )
    for ns, objs in sorted(limit_ranges.items()):
        for lr in objs:
            keys: dict[str, Any] = {}
            for limit in (lr.get("spec") or {}).get("limits") or []:
                for part in ("max", "min", "default", "defaultRequest", "maxLimitRequestRatio"):
                    keys.update({f"{part}.{k}": v for k, v in _gpu_keys(limit.get(part)).items()})
            if keys:
                items.append(
                    {
                        "namespace": ns,
                        "kind": "LimitRange",
                        "name": lr["metadata"]["name"],
                        "limits": keys,
                    }
                )
    if not quotas:
        return Finding("limits", OK, "No namespaces to manage yet: no existing limits checked.")
    if not items:
        return Finding("limits", OK, f"No other GPU limits in {len(quotas)} namespaces.")
    open_items = [i for i in items if i.get("decision", "undecided") == "undecided"]
    if not open_items:
        return Finding(
            "limits",
            OK,
            f"{len(items)} GPU quotas the portal does not own, each adopted or kept as an "
            "outside limit by an admin.",
            "",
            items,
        )
    names = ", ".join(f"{i['namespace']}/{i['name']}" for i in open_items[:NAMES_SHOWN])
    decided = len(items) - len(open_items)
    return Finding(
        "limits",
        WARNING,
        f"{len(open_items)} GPU limits the portal does not own and no admin has decided on "
        f"(outside limits): {names}." + (f" {decided} more decided." if decided else ""),
        "Kubernetes enforces these too: adopt them or keep them as outside "
        "limits (docs/quotas.md).",
        items,
    )
