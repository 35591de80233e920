"""Pods: create, update (spec immutability) and status update, as the API server validates.

Follows ``pkg/apis/core/validation/validation.go`` (v1.32): ValidatePodCreate,
validatePodMetadataAndSpec, ValidatePodSpec (volumes by name and source count only,
containers, restartPolicy, dnsPolicy, nodeSelector, security-context id ranges,
imagePullSecrets, affinity, dnsConfig, readiness and scheduling gates, topology spread,
serviceAccountName, nodeName, activeDeadlineSeconds, hostname, tolerations, hostAliases,
priorityClassName, preemptionPolicy, overhead, os), ValidatePodSpecificAnnotations,
ValidatePodUpdate (the five updatable fields, InPlacePodVerticalScaling being off in v1.32)
and ValidatePodStatusUpdate; ``pkg/registry/core/pod/strategy.go`` for which of them run
and for the name warning of WarningsOnCreate.

``spec.nodeName`` can only be set at creation here: the real server sets it through the
``pods/binding`` subresource, which the simulator does not serve.

The ``pod updates may not change fields ...`` message ends, in Go, with a ``cmp.Diff`` of the
internal PodSpec structs; go-cmp deliberately randomizes its whitespace, so no client can
depend on it. The simulator prints a diff of the changed top-level fields in that style.
"""

from __future__ import annotations

import json
from fractions import Fraction
from typing import Any

from simcluster import fielderrors as fe
from simcluster import validation_containers as vc
from simcluster.fielderrors import FieldError, child, index, key
from simcluster.quantity import QuantityError, parse_quantity
from simcluster.validation_meta import validate_object_meta, validate_object_meta_update
from simcluster.validation_names import (
    inclusive_range_error,
    is_dns1123_label,
    is_qualified_name,
    name_is_dns_subdomain,
)
from simcluster.validation_podspec import (
    _APPARMOR_CTR,
    MAX_INT32,
    ip_errors,
    names_errors,
    pod_annotations,
    pod_spec,
)
from simcluster.validation_resources import QuantityLookup

_UPDATABLE = (
    "`spec.containers[*].image`",
    "`spec.initContainers[*].image`",
    "`spec.activeDeadlineSeconds`",
    "`spec.tolerations` (only additions to existing tolerations)",
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
)
# core.PodSpec field order, JSON name -> Go name (host* live in SecurityContext internally).
_GO_FIELDS = (
    ("volumes", "Volumes"), ("initContainers", "InitContainers"), ("containers", "Containers"),
    ("ephemeralContainers", "EphemeralContainers"), ("restartPolicy", "RestartPolicy"),
    ("terminationGracePeriodSeconds", "TerminationGracePeriodSeconds"),
    ("activeDeadlineSeconds", "ActiveDeadlineSeconds"), ("dnsPolicy", "DNSPolicy"),
    ("nodeSelector", "NodeSelector"), ("serviceAccountName", "ServiceAccountName"),
    ("automountServiceAccountToken", "AutomountServiceAccountToken"), ("nodeName", "NodeName"),
    ("securityContext", "SecurityContext"), ("imagePullSecrets", "ImagePullSecrets"),
    ("hostname", "Hostname"), ("subdomain", "Subdomain"),
    ("setHostnameAsFQDN", "SetHostnameAsFQDN"),
    ("affinity", "Affinity"), ("schedulerName", "SchedulerName"), ("tolerations", "Tolerations"),
    ("hostAliases", "HostAliases"), ("priorityClassName", "PriorityClassName"),
    ("priority", "Priority"), ("preemptionPolicy", "PreemptionPolicy"), ("dnsConfig", "DNSConfig"),
    ("readinessGates", "ReadinessGates"), ("runtimeClassName", "RuntimeClassName"),
    ("overhead", "Overhead"), ("enableServiceLinks", "EnableServiceLinks"),
    ("topologySpreadConstraints", "TopologySpreadConstraints"), ("os", "OS"),
    ("schedulingGates", "SchedulingGates"), ("resourceClaims", "ResourceClaims"),
    ("resources", "Resources"),
)  # fmt: skip
_HOST_NS = ("hostNetwork", "hostPID", "hostIPC", "hostUsers", "shareProcessNamespace")
_SYSTEM_CONDITIONS = frozenset({"PodScheduled", "Ready", "Initialized"})


def _metadata_and_spec(pod: dict[str, Any], qty: QuantityLookup) -> list[FieldError]:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    errs = validate_object_meta(meta, True, name_is_dns_subdomain)
    errs += pod_annotations(meta, spec)
    errs += pod_spec(spec, qty)
    return errs + vc.only_for_pod(spec)


def validate_pod_create(pod: dict[str, Any], qty: QuantityLookup) -> list[FieldError]:
    """``ValidatePodCreate``."""
    errs = _metadata_and_spec(pod, qty)
    spec = pod.get("spec") or {}
    if spec.get("ephemeralContainers"):
        errs.append(fe.forbidden("spec.ephemeralContainers", "cannot be set on create"))
    if spec.get("nodeName") and spec.get("schedulingGates"):
        errs.append(
            fe.forbidden(
                "spec.nodeName", "cannot be set until all schedulingGates have been cleared"
            )
        )
    return errs


def pod_create_warnings(pod: dict[str, Any]) -> list[str]:
    """``podStrategy.WarningsOnCreate``: a pod name that is no DNS label."""
    name = str((pod.get("metadata") or {}).get("name") or "")
    msgs = is_dns1123_label(name)
    if msgs:
        return [
            "metadata.name: this is used in the Pod's hostname, which can result in surprising "
            f"behavior; a DNS label is recommended: [{' '.join(msgs)}]"
        ]
    return []


def _qty_value(v: Any) -> Any:
    try:
        return parse_quantity(v).value
    except (QuantityError, TypeError):
        return v


def semantic(v: Any, qmap: bool = False) -> Any:
    """Semantic equality form: nil == empty, zero strings/bools dropped, quantities by value."""
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if qmap:
                out[k] = _qty_value(x)
                continue
            s = semantic(x, k in ("requests", "limits", "overhead", "capacity", "allocatable"))
            if s not in (None, "", False, [], {}):
                out[k] = s
        return out
    if isinstance(v, list):
        return [semantic(x) for x in v]
    return v


def _go_json(v: Any) -> str:
    if isinstance(v, str):
        return fe.go_quote(v)
    if isinstance(v, Fraction):
        return str(v)
    return json.dumps(v, separators=(",", ":"), sort_keys=True, default=str)


def spec_diff(old: dict[str, Any], new: dict[str, Any]) -> str:
    """A ``cmp.Diff(oldPod.Spec, mungedPodSpec)``-style diff of the changed fields."""
    lines = ["  core.PodSpec{"]
    same = 0
    for json_name, go_name in _GO_FIELDS:
        o, n = old.get(json_name), new.get(json_name)
        if semantic(o) == semantic(n):
            same += 1
            continue
        if same:
            lines.append(f"  \t... // {same} identical field{'s' if same > 1 else ''}")
            same = 0
        if o not in (None, "", [], {}):
            lines.append(f"- \t{go_name}: {_go_json(o)},")
        if n not in (None, "", [], {}):
            lines.append(f"+ \t{go_name}: {_go_json(n)},")
    if same:
        lines.append(f"  \t... // {same} identical field{'s' if same > 1 else ''}")
    lines.append("  }")
    return "\n".join(lines) + "\n"


def _spec_fields(spec: dict[str, Any]) -> dict[str, Any]:
    """The internal PodSpec view: host namespace flags belong to the SecurityContext."""
    out = dict(spec)
    sc = dict(out.get("securityContext") or {})
    for f in _HOST_NS:
        if f in out:
            sc[f] = out.pop(f)
    if sc:
        out["securityContext"] = sc
    if out.get("serviceAccount") == out.get("serviceAccountName"):
        out.pop("serviceAccount", None)
    return out


def annotation_updates(new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
    """``ValidatePodSpecificAnnotationUpdates``: mirror-pod and AppArmor annotations are fixed."""
    errs: list[FieldError] = []
    path = "metadata.annotations"
    na = (new.get("metadata") or {}).get("annotations") or {}
    oa = (old.get("metadata") or {}).get("annotations") or {}
    mirror = "kubernetes.io/config.mirror"
    for k, v in oa.items():
        if k in na and na[k] == v:
            continue
        if k.startswith(_APPARMOR_CTR):
            errs.append(fe.forbidden(key(path, k), "may not remove or update AppArmor annotations"))
        if k == mirror:
            errs.append(
                fe.forbidden(key(path, k), "may not remove or update mirror pod annotation")
            )
    for k in na:
        if k in oa:
            continue
        if k.startswith(_APPARMOR_CTR):
            errs.append(fe.forbidden(key(path, k), "may not add AppArmor annotations"))
        if k == mirror:
            errs.append(fe.forbidden(key(path, k), "may not add mirror pod annotation"))
    return errs + pod_annotations(new.get("metadata") or {}, new.get("spec") or {})


def validate_pod_update(
    new: dict[str, Any], old: dict[str, Any], qty: QuantityLookup
) -> list[FieldError]:
    """``ValidatePodUpdate``: only images, activeDeadlineSeconds, tolerations, TGPS, gates."""
    errs = validate_object_meta_update(new.get("metadata") or {}, old.get("metadata") or {})
    errs += _metadata_and_spec(new, qty)
    errs += annotation_updates(new, old)
    nspec, ospec = new.get("spec") or {}, old.get("spec") or {}
    for field in ("containers", "initContainers"):
        nc, oc = nspec.get(field) or [], ospec.get(field) or []
        fp = child("spec", field)
        if len(nc) != len(oc):
            return [*errs, fe.forbidden(fp, "pod updates may not add or remove containers")]
        for i, c in enumerate(nc):
            image = str((c or {}).get("image") or "")
            if not image:
                errs.append(fe.required(child(index(fp, i), "image")))
            if image.strip() != image:
                errs.append(
                    fe.invalid(
                        child(index(fp, i), "image"),
                        image,
                        "must not have leading or trailing whitespace",
                    )
                )
    n_ads, o_ads = nspec.get("activeDeadlineSeconds"), ospec.get("activeDeadlineSeconds")
    if n_ads is not None:
        if isinstance(n_ads, int) and not 0 <= n_ads <= MAX_INT32:
            return [
                *errs,
                fe.invalid(
                    "spec.activeDeadlineSeconds", n_ads, inclusive_range_error(0, MAX_INT32)
                ),
            ]
        if o_ads is not None and isinstance(n_ads, int) and o_ads < n_ads:
            return [
                *errs,
                fe.invalid(
                    "spec.activeDeadlineSeconds",
                    n_ads,
                    "must be less than or equal to previous value",
                ),
            ]
    elif o_ads is not None:
        errs.append(
            fe.invalid(
                "spec.activeDeadlineSeconds",
                None,
                "must not update from a positive integer to nil value",
            )
        )
    errs += vc.only_added_tolerations(
        nspec.get("tolerations"), ospec.get("tolerations"), "spec.tolerations"
    )
    old_gates = {str((g or {}).get("name")) for g in ospec.get("schedulingGates") or []}
    for i, g in enumerate(nspec.get("schedulingGates") or []):
        name = str((g or {}).get("name"))
        if name not in old_gates:
            errs.append(
                fe.forbidden(
                    child(index("spec.schedulingGates", i), "name"),
                    f"only deletion is allowed, but found new scheduling gate '{name}'",
                )
            )
    n_view, o_view = _spec_fields(nspec), _spec_fields(ospec)
    if ospec.get("schedulingGates") and nspec.get("nodeSelector") != ospec.get("nodeSelector"):
        # a gated pod's nodeSelector takes additions only (validateNodeSelectorMutation)
        new_sel = nspec.get("nodeSelector") or {}
        for k, v in (ospec.get("nodeSelector") or {}).items():
            if new_sel.get(k) != v:
                errs.append(
                    fe.invalid(
                        f"spec.nodeSelector[{k}]",
                        new_sel.get(k, ""),
                        "only additions to spec.nodeSelector are allowed (no mutations or "
                        "deletions)",
                    )
                )
        o_view = {**o_view, "nodeSelector": nspec.get("nodeSelector")}
    if semantic(n_view) == semantic(o_view):
        return errs
    munged = dict(n_view)
    for field in ("containers", "initContainers"):
        if munged.get(field):
            munged[field] = [
                {**(c or {}), "image": (ospec[field][i] or {}).get("image")}
                for i, c in enumerate(munged[field])
            ]
    for f in ("activeDeadlineSeconds", "schedulingGates", "tolerations"):
        if f in o_view:
            munged[f] = o_view[f]
        else:
            munged.pop(f, None)
    o_tgps = o_view.get("terminationGracePeriodSeconds")
    if isinstance(o_tgps, int) and o_tgps < 0 and munged.get("terminationGracePeriodSeconds") == 1:
        munged["terminationGracePeriodSeconds"] = o_tgps
    if semantic(munged) != semantic(o_view):
        fields = ",".join(_UPDATABLE)
        diff = spec_diff(o_view, munged)
        msg = f"pod updates may not change fields other than {fields}\n{diff}"
        errs.append(fe.forbidden("spec", msg))
    return errs


def validate_pod_status_update(new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
    """``ValidatePodStatusUpdate`` (the strategy has already kept the old spec)."""
    errs = validate_object_meta_update(new.get("metadata") or {}, old.get("metadata") or {})
    errs += annotation_updates(new, old)
    status = new.get("status") if isinstance(new.get("status"), dict) else {}
    ostatus = old.get("status") if isinstance(old.get("status"), dict) else {}
    for i, cond in enumerate(status.get("conditions") or []):
        ctype = str((cond or {}).get("type") or "")
        if ctype not in _SYSTEM_CONDITIONS:
            # The real code builds this path from "metadata" (a quirk kept here).
            errs += [
                fe.invalid(child(index("metadata.conditions", i), "Type"), ctype, m)
                for m in is_qualified_name(ctype)
            ]
    nnn = status.get("nominatedNodeName") or ""
    if nnn and nnn != (ostatus.get("nominatedNodeName") or ""):
        errs += names_errors(str(nnn), "status.nominatedNodeName", name_is_dns_subdomain)
    if (status.get("qosClass") or "") != (ostatus.get("qosClass") or ""):
        errs.append(
            fe.invalid("status.qosClass", str(status.get("qosClass") or ""), "field is immutable")
        )
    restart = (old.get("spec") or {}).get("restartPolicy")
    errs += _state_transitions(status, ostatus, "containerStatuses", restart, set())
    sidecars = {
        str((c or {}).get("name")) for c in (old.get("spec") or {}).get("initContainers") or []
        if (c or {}).get("restartPolicy") == "Always"
    }  # fmt: skip
    errs += _state_transitions(status, ostatus, "initContainerStatuses", restart, sidecars)
    errs += _state_transitions(status, ostatus, "ephemeralContainerStatuses", "Never", set())
    errs += _ips(status, "podIPs", "status.podIPs")
    host_ips = status.get("hostIPs") or []
    if host_ips and (status.get("hostIP") or "") != ((host_ips[0] or {}).get("ip") or ""):
        errs.append(
            fe.invalid(
                "status.hostIPs[0].ip",
                str((host_ips[0] or {}).get("ip") or ""),
                "must be equal to `hostIP`",
            )
        )
    errs += _ips(status, "hostIPs", "status.hostIPs")
    return errs


def _state_transitions(
    status: dict[str, Any], ostatus: dict[str, Any], field: str, restart: Any, sidecars: set[str]
) -> list[FieldError]:
    """``ValidateContainerStateTransition``: terminated containers stay terminated."""
    if restart == "Always":
        return []
    errs: list[FieldError] = []
    new_by_name = {str((s or {}).get("name")): s or {} for s in status.get(field) or []}
    for i, o in enumerate(ostatus.get(field) or []):
        term = ((o or {}).get("state") or {}).get("terminated")
        if not term:
            continue
        if term.get("exitCode", 0) != 0 and restart == "OnFailure":
            continue
        name = str(o.get("name"))
        if name in sidecars:
            continue
        n = new_by_name.get(name)
        if n is not None and not (n.get("state") or {}).get("terminated"):
            errs.append(
                fe.forbidden(
                    child(index(child("status", field), i), "state"),
                    "may not be transitioned to non-terminated state",
                )
            )
    return errs


def _ips(status: dict[str, Any], field: str, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    ips = [str((x or {}).get("ip") or "") for x in status.get(field) or []]
    for i, ip in enumerate(ips):
        errs += ip_errors(ip, index(path, i))
    seen: set[str] = set()
    for i, ip in enumerate(ips):
        if ip in seen:
            errs.append(fe.duplicate(index(path, i), fe.GoStruct("core.PodIP", (("IP", ip),))))
        seen.add(ip)
    return errs
