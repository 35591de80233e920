"""Validation of Service, Event, PodDisruptionBudget and PriorityClass.

Follows (v1.32) ``pkg/apis/core/validation/validation.go`` (ValidateService: names, ports,
type, selector, session affinity, ExternalName, duplicate ports; the checks that need IP
allocation or defaulting are left out), ``pkg/apis/core/validation/events.go``
(legacyValidateEvent, the only check for core/v1 Events), ``pkg/apis/policy/validation/
validation.go`` (ValidatePodDisruptionBudget[Spec|StatusUpdate]),
``pkg/apis/apps/validation/validation.go`` (ValidatePositiveIntOrPercent,
IsNotMoreThan100Percent), ``apimachinery/pkg/apis/meta/v1/validation`` (ValidateConditions)
and ``pkg/apis/scheduling/validation/validation.go`` (ValidatePriorityClass[Update], with the
``system-`` classes of ``pkg/apis/scheduling/helpers.go``).
"""

from __future__ import annotations

import re
from typing import Any

from simcluster import fielderrors as fe
from simcluster.fielderrors import FieldError, GoPtr, GoStruct, child, index
from simcluster.validation_meta import (
    IS_NEGATIVE,
    validate_label_name,
    validate_label_selector,
    validate_labels,
    validate_object_meta,
    validate_object_meta_update,
)
from simcluster.validation_names import (
    is_dns1123_label,
    is_dns1123_subdomain,
    is_qualified_name,
    is_valid_percent,
    is_valid_port_name,
    is_valid_port_num,
    name_is_dns_label,
    name_is_dns_subdomain,
    regex_error,
)

_HIGHEST_USER_PRIORITY = 1_000_000_000
_SYSTEM_CLASSES = {"system-node-critical": 2_000_001_000, "system-cluster-critical": 2_000_000_000}


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def _meta_update(new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
    return validate_object_meta_update(_meta(new), _meta(old))


_SERVICE_TYPES = ("ClusterIP", "ExternalName", "LoadBalancer", "NodePort")


def _service_port_value(port: dict[str, Any]) -> GoStruct:
    return GoStruct(
        "core.ServicePort",
        (
            ("Name", ""),
            ("Protocol", str(port.get("protocol") or "TCP")),
            ("AppProtocol", GoPtr("string", True)),
            ("Port", int(port.get("port") or 0)),
            (
                "TargetPort",
                GoStruct("intstr.IntOrString", (("Type", 0), ("IntVal", 0), ("StrVal", ""))),
            ),
            ("NodePort", 0),
        ),
    )


def service_create(svc: dict[str, Any], qty: Any) -> list[FieldError]:
    """``ValidateService``: the checks that do not depend on IP allocation or defaulting.
    The name is a DNS-1123 label: RelaxedServiceNameValidation is on by default since v1.36
    (pkg/features/kube_features.go; pkg/apis/core/validation/validation.go ``ValidateService``
    takes ``NameIsDNSLabel`` then)."""
    errs = validate_object_meta(_meta(svc), True, name_is_dns_label)
    spec = svc.get("spec") or {}
    stype = spec.get("type")
    headless = spec.get("clusterIP") == "None" or spec.get("clusterIPs") == ["None"]
    ports = [p if isinstance(p, dict) else {} for p in spec.get("ports") or []]
    if not ports and not headless and stype != "ExternalName":
        errs.append(fe.required("spec.ports"))
    if stype == "ExternalName":
        cname = str(spec.get("externalName") or "").removesuffix(".")
        if cname:
            errs += [fe.invalid("spec.externalName", cname, m) for m in is_dns1123_subdomain(cname)]
        else:
            errs.append(fe.required("spec.externalName"))
    names: set[str] = set()
    for i, port in enumerate(ports):
        pp = index("spec.ports", i)
        name = str(port.get("name") or "")
        if len(ports) > 1 and not name:
            errs.append(fe.required(child(pp, "name")))
        elif name:
            errs += [fe.invalid(child(pp, "name"), name, m) for m in is_dns1123_label(name)]
            if name in names:
                errs.append(fe.duplicate(child(pp, "name"), name))
            names.add(name)
        num = port.get("port") or 0
        if isinstance(num, int):
            errs += [fe.invalid(child(pp, "port"), num, m) for m in is_valid_port_num(num)]
        proto = port.get("protocol")
        if proto is not None and proto not in ("SCTP", "TCP", "UDP"):
            errs.append(
                fe.required(child(pp, "protocol")) if not proto
                else fe.not_supported(child(pp, "protocol"), proto, ["SCTP", "TCP", "UDP"])
            )  # fmt: skip
        target = port.get("targetPort")
        if isinstance(target, int) and not isinstance(target, bool):
            errs += [
                fe.invalid(child(pp, "targetPort"), target, m) for m in is_valid_port_num(target)
            ]
        elif isinstance(target, str):
            errs += [
                fe.invalid(child(pp, "targetPort"), target, m) for m in is_valid_port_name(target)
            ]
    if spec.get("selector") is not None:
        errs += validate_labels(spec.get("selector"), "spec.selector")
    sa = spec.get("sessionAffinity")
    if sa is not None and sa not in ("ClientIP", "None"):
        errs.append(
            fe.required("spec.sessionAffinity")
            if not sa
            else fe.not_supported("spec.sessionAffinity", sa, ["ClientIP", "None"])
        )
    if stype is not None and stype not in _SERVICE_TYPES:
        errs.append(
            fe.required("spec.type")
            if not stype
            else fe.not_supported("spec.type", stype, _SERVICE_TYPES)
        )
    if stype in (None, "ClusterIP"):
        for i, port in enumerate(ports):
            if port.get("nodePort"):
                errs.append(
                    fe.forbidden(
                        child(index("spec.ports", i), "nodePort"),
                        "may not be used when `type` is 'ClusterIP'",
                    )
                )
    seen = []
    for i, port in enumerate(ports):
        pair = (port.get("protocol") or "TCP", port.get("port"))
        if pair in seen:
            errs.append(fe.duplicate(index("spec.ports", i), _service_port_value(port)))
        seen.append(pair)
    return errs


def service_update(new: dict[str, Any], old: dict[str, Any], qty: Any) -> list[FieldError]:
    return _meta_update(new, old) + service_create(new, qty)


def event_create(ev: dict[str, Any], qty: Any) -> list[FieldError]:
    """``legacyValidateEvent``: all a core/v1 Event gets (plus the generic ObjectMeta step)."""
    errs: list[FieldError] = []
    ns = str(_meta(ev).get("namespace") or "")
    inv = ev.get("involvedObject") or {}
    ins = str(inv.get("namespace") or "")
    if not ev.get("eventTime"):
        if (not ins and ns not in ("", "default")) or (ins and ns != ins):
            errs.append(
                fe.invalid("involvedObject.namespace", ins, "does not match event.namespace")
            )
    else:
        if not ins and ns not in ("default", "kube-system"):
            errs.append(
                fe.invalid("involvedObject.namespace", ins, "does not match event.namespace")
            )
        rc = str(ev.get("reportingComponent") or "")
        if not rc:
            errs.append(fe.required("reportingController"))
        errs += [fe.invalid("reportingController", rc, m) for m in is_qualified_name(rc)]
        for f in ("reportingInstance", "action", "reason"):
            v = str(ev.get(f) or "")
            if not v:
                errs.append(fe.required(f))
            if len(v) > 128:
                errs.append(fe.invalid(f, "", "can have at most 128 characters"))
        if len(str(ev.get("message") or "")) > 1024:
            errs.append(fe.invalid("message", "", "can have at most 1024 characters"))
    errs += [fe.invalid("namespace", ns, m) for m in is_dns1123_subdomain(ns)]
    return errs


def event_update(new: dict[str, Any], old: dict[str, Any], qty: Any) -> list[FieldError]:
    return event_create(new, qty)


# --------------------------------------------------------------- policy/v1
def _int_or_string(v: Any) -> GoStruct:
    if isinstance(v, str):
        return GoStruct("intstr.IntOrString", (("Type", 1), ("IntVal", 0), ("StrVal", v)))
    return GoStruct("intstr.IntOrString", (("Type", 0), ("IntVal", int(v or 0)), ("StrVal", "")))


def _positive_int_or_percent(v: Any, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    if isinstance(v, str):
        errs += [fe.invalid(path, _int_or_string(v), m) for m in is_valid_percent(v)]
        if not is_valid_percent(v) and int(v[:-1]) > 100:
            errs.append(fe.invalid(path, _int_or_string(v), "must not be greater than 100%"))
    elif isinstance(v, int) and v < 0:
        errs.append(fe.invalid(path, v, IS_NEGATIVE))
    return errs


def _pdb_spec(spec: dict[str, Any]) -> list[FieldError]:
    errs: list[FieldError] = []
    has_min, has_max = spec.get("minAvailable") is not None, spec.get("maxUnavailable") is not None
    if has_min and has_max:
        from simcluster.validation_apps import selector_value

        value = GoStruct(
            "policy.PodDisruptionBudgetSpec",
            (
                (
                    "MinAvailable",
                    GoPtr("intstr.IntOrString", False, _int_or_string(spec["minAvailable"])),
                ),
                (
                    "Selector",
                    GoPtr(
                        "v1.LabelSelector",
                        spec.get("selector") is None,
                        selector_value(spec.get("selector")),
                    ),
                ),
                (
                    "MaxUnavailable",
                    GoPtr("intstr.IntOrString", False, _int_or_string(spec["maxUnavailable"])),
                ),
                (
                    "UnhealthyPodEvictionPolicy",
                    GoPtr(
                        "policy.UnhealthyPodEvictionPolicyType",
                        spec.get("unhealthyPodEvictionPolicy") is None,
                        spec.get("unhealthyPodEvictionPolicy"),
                    ),
                ),
            ),
        )
        errs.append(fe.invalid("spec", value, "minAvailable and maxUnavailable cannot be both set"))
    for f in ("minAvailable", "maxUnavailable"):
        if spec.get(f) is not None:
            errs += _positive_int_or_percent(spec[f], child("spec", f))
    errs += validate_label_selector(spec.get("selector"), "spec.selector")
    policy = spec.get("unhealthyPodEvictionPolicy")
    if policy is not None and policy not in ("AlwaysAllow", "IfHealthyBudget"):
        errs.append(
            fe.not_supported(
                "spec.unhealthyPodEvictionPolicy", policy, ["AlwaysAllow", "IfHealthyBudget"]
            )
        )
    return errs


def pdb_create(pdb: dict[str, Any], qty: Any) -> list[FieldError]:
    """``ValidatePodDisruptionBudget``: no ObjectMeta check of its own (only the generic one)."""
    return _pdb_spec(pdb.get("spec") or {})


def pdb_update(new: dict[str, Any], old: dict[str, Any], qty: Any) -> list[FieldError]:
    return _pdb_spec(new.get("spec") or {})


def pdb_status(new: dict[str, Any], old: dict[str, Any], qty: Any) -> list[FieldError]:
    status = new.get("status") or {}
    errs = conditions(status.get("conditions"), "status.conditions")
    for f in ("disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods"):
        v = status.get(f)
        if isinstance(v, int) and v < 0:
            errs.append(fe.invalid(child("status", f), v, IS_NEGATIVE))
    return errs


_REASON_FMT = "[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?"
_REASON_MSG = (
    "a condition reason must start with alphabetic character, optionally followed by a string "
    "of alphanumeric characters or '_,:', and must end with an alphanumeric character or '_'"
)
_REASON_EXAMPLES = ("my_name", "MY_NAME", "MyName", "ReasonA,ReasonB", "ReasonA:ReasonB")


def conditions(conds: Any, path: str) -> list[FieldError]:
    """meta/v1 ``ValidateConditions``."""
    errs: list[FieldError] = []
    seen: set[str] = set()
    for i, c in enumerate(conds or []):
        c = c if isinstance(c, dict) else {}
        p = index(path, i)
        ctype = str(c.get("type") or "")
        if ctype in seen:
            errs.append(fe.duplicate(child(p, "type"), ctype))
        seen.add(ctype)
        errs += validate_label_name(ctype, child(p, "type"))
        status = str(c.get("status") or "")
        if status not in ("False", "True", "Unknown"):
            errs.append(fe.not_supported(child(p, "status"), status, ["False", "True", "Unknown"]))
        og = c.get("observedGeneration")
        if isinstance(og, int) and og < 0:
            errs.append(
                fe.invalid(
                    child(p, "observedGeneration"), og, "must be greater than or equal to zero"
                )
            )
        if not c.get("lastTransitionTime"):
            errs.append(fe.required(child(p, "lastTransitionTime"), "must be set"))
        reason = str(c.get("reason") or "")
        if not reason:
            errs.append(fe.required(child(p, "reason"), "must be set"))
        else:
            if not re.fullmatch(_REASON_FMT, reason):
                msg = regex_error(_REASON_MSG, _REASON_FMT, *_REASON_EXAMPLES)
                errs.append(fe.invalid(child(p, "reason"), reason, msg))
            if len(reason) > 1024:
                errs.append(fe.too_long(child(p, "reason"), 1024))
        if len(str(c.get("message") or "")) > 32 * 1024:
            errs.append(fe.too_long(child(p, "message"), 32 * 1024))
    return errs


# -------------------------------------------------------- scheduling.k8s.io
def priorityclass_create(pc: dict[str, Any], qty: Any) -> list[FieldError]:
    meta = _meta(pc)
    errs = validate_object_meta(meta, False, name_is_dns_subdomain)
    name, value = str(meta.get("name") or ""), pc.get("value") or 0
    if name.startswith("system-"):
        reason = ""
        if name not in _SYSTEM_CLASSES:
            reason = f"{name} is not a known system priority class"
        elif value != _SYSTEM_CLASSES[name]:
            reason = f"value of {name} PriorityClass must be {_SYSTEM_CLASSES[name]}"
        elif pc.get("globalDefault"):
            reason = f"globalDefault of {name} PriorityClass must be false"
        if reason:
            errs.append(
                fe.forbidden(
                    "metadata.name",
                    "priority class names with 'system-' prefix are reserved for system use only. "
                    f"error: {reason}",
                )
            )
    elif isinstance(value, int) and value > _HIGHEST_USER_PRIORITY:
        errs.append(
            fe.forbidden(
                "value",
                f"maximum allowed value of a user defined priority is {_HIGHEST_USER_PRIORITY}",
            )
        )
    policy = pc.get("preemptionPolicy")
    if policy is not None and policy not in ("PreemptLowerPriority", "Never"):
        errs.append(
            fe.required("preemptionPolicy") if not policy
            else fe.not_supported("preemptionPolicy", policy, ["PreemptLowerPriority", "Never"])
        )  # fmt: skip
    return errs


def priorityclass_update(new: dict[str, Any], old: dict[str, Any], qty: Any) -> list[FieldError]:
    errs = validate_object_meta_update(_meta(new), _meta(old))
    if (new.get("value") or 0) != (old.get("value") or 0):
        errs.append(fe.forbidden("value", "may not be changed in an update."))
    if new.get("preemptionPolicy") != old.get("preemptionPolicy"):
        errs.append(
            fe.invalid("preemptionPolicy", new.get("preemptionPolicy"), "field is immutable")
        )
    return errs
