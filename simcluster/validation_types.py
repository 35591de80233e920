"""Validation of Namespace, Node, ResourceQuota, ConfigMap, Secret, ServiceAccount, LimitRange.

Follows (v1.32) ``pkg/apis/core/validation/validation.go``: ValidateNamespace[Update|
StatusUpdate] (and ``validateFinalizerName``), ValidateNode[Update] with validateNodeTaints
(whose path really starts ``metadata.taints``), ValidateResourceQuota[Update|StatusUpdate],
ValidateConfigMap[Update], ValidateSecret[Update], ValidateServiceAccount[Update] and
ValidateLimitRange; the resource-name and quantity parts are in
:mod:`simcluster.validation_resources`. Each function returns the ``field.ErrorList`` of the
real one, in its order. Service, Event, PodDisruptionBudget and PriorityClass are in
:mod:`simcluster.validation_policy`.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
from typing import Any

from simcluster import fielderrors as fe
from simcluster import validation_resources as vr
from simcluster.fielderrors import FieldError, GoPtr, GoStruct, child, index, key
from simcluster.validation_containers import taint_effect
from simcluster.validation_meta import (
    GoTime,
    kube_finalizer_name,
    validate_label_name,
    validate_object_meta,
    validate_object_meta_update,
)
from simcluster.validation_names import (
    is_config_map_key,
    is_qualified_name,
    is_valid_label_value,
    name_is_dns_label,
    name_is_dns_subdomain,
)

MAX_SECRET_SIZE = 1024 * 1024


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def _meta_update(new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
    return validate_object_meta_update(_meta(new), _meta(old))


# -------------------------------------------------------------- namespaces
def _finalizer(value: str, path: str) -> list[FieldError]:
    """core ``validateFinalizerName``: qualified name, and standard when unqualified."""
    return [fe.invalid(path, value, m) for m in is_qualified_name(value)] + kube_finalizer_name(
        value, path
    )


def namespace_create(ns: dict[str, Any], qty: Any) -> list[FieldError]:
    errs = validate_object_meta(_meta(ns), False, name_is_dns_label)
    for f in (ns.get("spec") or {}).get("finalizers") or []:
        errs += _finalizer(str(f), "spec.finalizers")
    return errs


def namespace_update(new: dict[str, Any], old: dict[str, Any], qty: Any) -> list[FieldError]:
    return _meta_update(new, old)


def namespace_status(new: dict[str, Any], old: dict[str, Any], qty: Any) -> list[FieldError]:
    errs = _meta_update(new, old)
    phase = str((new.get("status") or {}).get("phase") or "")
    if not _meta(new).get("deletionTimestamp"):
        if phase != "Active":
            errs.append(
                fe.invalid(
                    "status.Phase", phase, "may only be 'Active' if `deletionTimestamp` is empty"
                )
            )
    elif phase != "Terminating":
        errs.append(
            fe.invalid(
                "status.Phase",
                phase,
                "may only be 'Terminating' if `deletionTimestamp` is not empty",
            )
        )
    return errs


# ------------------------------------------------------------------ nodes
def _taint_value(t: dict[str, Any]) -> GoStruct:
    return GoStruct(
        "core.Taint",
        (
            ("Key", str(t.get("key") or "")),
            ("Value", str(t.get("value") or "")),
            ("Effect", str(t.get("effect") or "")),
            (
                "TimeAdded",
                GoPtr("v1.Time", t.get("timeAdded") is None, GoTime(str(t.get("timeAdded")))),
            ),
        ),
    )


def _node_taints(taints: Any, path: str) -> list[FieldError]:
    """``validateNodeTaints`` (called with the ``metadata.taints`` path by the real code)."""
    errs: list[FieldError] = []
    seen: dict[str, set[str]] = {}
    for i, t in enumerate(taints or []):
        t = t if isinstance(t, dict) else {}
        p = index(path, i)
        tkey, effect = str(t.get("key") or ""), str(t.get("effect") or "")
        errs += validate_label_name(tkey, child(p, "key"))
        msgs = is_valid_label_value(str(t.get("value") or ""))
        if msgs:
            errs.append(fe.invalid(child(p, "value"), str(t.get("value") or ""), ";".join(msgs)))
        errs += taint_effect(effect, False, child(p, "effect"))
        if tkey in seen.get(effect, set()):
            dup = fe.duplicate(p, _taint_value(t))
            dup.detail = "taints must be unique by key and effect pair"
            errs.append(dup)
            continue
        seen.setdefault(effect, set()).add(tkey)
    return errs


def _cidrs(cidrs: list[str]) -> list[FieldError]:
    errs: list[FieldError] = []
    nets = []
    for i, c in enumerate(cidrs):
        try:
            nets.append(ipaddress.ip_network(c, strict=False))
        except ValueError:
            errs.append(
                fe.invalid(
                    index("spec.podCIDRs", i),
                    c,
                    "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
                )
            )
    if len(cidrs) > 1:
        families = {n.version for n in nets}
        if len(cidrs) > 2 or len(families) != 2 or len(nets) != len(cidrs):
            errs.append(
                fe.invalid(
                    "spec.podCIDRs",
                    fe.go_strings(cidrs),
                    "may specify no more than one CIDR for each IP family",
                )
            )
        for i, c in enumerate(cidrs):
            if c in cidrs[:i]:
                errs.append(fe.duplicate(index("spec.podCIDRs", i), c))
    return errs


def node_create(node: dict[str, Any], qty: Any) -> list[FieldError]:
    errs = validate_object_meta(_meta(node), False, name_is_dns_subdomain)
    spec = node.get("spec") or {}
    if spec.get("taints"):
        errs += _node_taints(spec["taints"], "metadata.taints")
    errs += vr.node_resources(node.get("status") or {}, qty)
    if spec.get("podCIDRs"):
        errs += _cidrs([str(c) for c in spec["podCIDRs"]])
    return errs


def node_update(new: dict[str, Any], old: dict[str, Any], qty: Any) -> list[FieldError]:
    """``nodeStrategy.ValidateUpdate``: ``ValidateNode`` then ``ValidateNodeUpdate``, so a bad
    label, taint or quantity is reported by both (pkg/registry/core/node/strategy.go)."""
    return node_create(new, qty) + node_status_update(new, old, qty)


def node_status_update(new: dict[str, Any], old: dict[str, Any], qty: Any) -> list[FieldError]:
    """``ValidateNodeUpdate`` alone (``nodeStatusStrategy.ValidateUpdate``)."""
    errs = _meta_update(new, old)
    errs += vr.node_resources(new.get("status") or {}, qty)
    seen = []
    for i, a in enumerate((new.get("status") or {}).get("addresses") or []):
        a = a if isinstance(a, dict) else {}
        pair = (str(a.get("type") or ""), str(a.get("address") or ""))
        if pair in seen:
            value = GoStruct("core.NodeAddress", (("Type", pair[0]), ("Address", pair[1])))
            errs.append(fe.duplicate(index("status.addresses", i), value))
        seen.append(pair)
    nspec, ospec = new.get("spec") or {}, old.get("spec") or {}
    ocidrs, ncidrs = ospec.get("podCIDRs") or [], nspec.get("podCIDRs") or []
    msg = 'node updates may not change podCIDR except from "" to valid'
    if ocidrs:
        if len(ocidrs) != len(ncidrs):
            errs.append(fe.forbidden("spec.podCIDRs", msg))
        else:
            errs += [
                fe.forbidden("spec.podCIDRs", msg)
                for a, b in zip(ocidrs, ncidrs, strict=True)
                if a != b
            ]
    if ospec.get("providerID") and ospec.get("providerID") != nspec.get("providerID"):
        errs.append(
            fe.forbidden(
                "spec.providerID", 'node updates may not change providerID except from "" to valid'
            )
        )
    if nspec.get("taints"):
        errs += _node_taints(nspec["taints"], "metadata.taints")
    if nspec.get("externalID") != ospec.get("externalID"):
        errs.append(fe.forbidden("spec.externalID", "may not be updated"))
    return errs


# ----------------------------------------------------------- resourcequotas
def quota_create(q: dict[str, Any], qty: Any) -> list[FieldError]:
    errs = validate_object_meta(_meta(q), True, name_is_dns_subdomain)
    errs += vr.quota_spec(q.get("spec") or {}, "spec", qty)
    return errs + vr.quota_status(q.get("status") or {}, "status", qty)


def quota_update(new: dict[str, Any], old: dict[str, Any], qty: Any) -> list[FieldError]:
    errs = _meta_update(new, old)
    errs += vr.quota_spec(new.get("spec") or {}, "spec", qty)
    return errs + vr.quota_scopes_update(new.get("spec") or {}, old.get("spec") or {})


def quota_status(new: dict[str, Any], old: dict[str, Any], qty: Any) -> list[FieldError]:
    errs = _meta_update(new, old)
    return errs + vr.quota_status(new.get("status") or {}, "status", qty)


# ----------------------------------------------------- configmaps / secrets
def _decoded_len(value: Any) -> int:
    try:
        return len(base64.b64decode(str(value or ""), validate=True))
    except (binascii.Error, ValueError):
        return len(str(value or ""))


def configmap_create(cm: dict[str, Any], qty: Any) -> list[FieldError]:
    errs = validate_object_meta(_meta(cm), True, name_is_dns_subdomain)
    total = 0
    binary = cm.get("binaryData") or {}
    for k, v in (cm.get("data") or {}).items():
        errs += [fe.invalid(key("data", k), k, m) for m in is_config_map_key(k)]
        if k in binary:
            errs.append(fe.invalid(key("data", k), k, "duplicate of key present in binaryData"))
        total += len(str(v).encode())
    for k, v in binary.items():
        errs += [fe.invalid(key("binaryData", k), k, m) for m in is_config_map_key(k)]
        total += _decoded_len(v)
    if total > MAX_SECRET_SIZE:
        errs.append(fe.too_long("[]", MAX_SECRET_SIZE))
    return errs


def _immutable_data(
    new: dict[str, Any], old: dict[str, Any], fields: tuple[str, ...]
) -> list[FieldError]:
    errs: list[FieldError] = []
    if old.get("immutable") is True:
        if new.get("immutable") is not True:
            errs.append(fe.forbidden("immutable", "field is immutable when `immutable` is set"))
        for f in fields:
            if (new.get(f) or {}) != (old.get(f) or {}):
                errs.append(fe.forbidden(f, "field is immutable when `immutable` is set"))
    return errs


def configmap_update(new: dict[str, Any], old: dict[str, Any], qty: Any) -> list[FieldError]:
    errs = _meta_update(new, old) + _immutable_data(new, old, ("data", "binaryData"))
    return errs + configmap_create(new, qty)


def secret_create(s: dict[str, Any], qty: Any) -> list[FieldError]:
    errs = validate_object_meta(_meta(s), True, name_is_dns_subdomain)
    data = s.get("data") or {}
    total = 0
    for k, v in data.items():
        errs += [fe.invalid(key("data", k), k, m) for m in is_config_map_key(k)]
        total += _decoded_len(v)
    if total > MAX_SECRET_SIZE:
        errs.append(fe.too_long("data", MAX_SECRET_SIZE))
    stype = str(s.get("type") or "")
    ann = _meta(s).get("annotations") or {}
    required_keys = {
        "kubernetes.io/dockercfg": (".dockercfg",),
        "kubernetes.io/dockerconfigjson": (".dockerconfigjson",),
        "kubernetes.io/ssh-auth": ("ssh-privatekey",),
    }
    if stype == "kubernetes.io/service-account-token" and not ann.get(
        "kubernetes.io/service-account.name"
    ):
        errs.append(fe.required(key("metadata.annotations", "kubernetes.io/service-account.name")))
    elif stype in required_keys:
        k = required_keys[stype][0]
        if not (data.get(k) if stype == "kubernetes.io/ssh-auth" else k in data):
            errs.append(fe.required(key("data", k)))
    elif stype == "kubernetes.io/basic-auth" and "username" not in data and "password" not in data:
        errs += [fe.required(key("data", "username")), fe.required(key("data", "password"))]
    elif stype == "kubernetes.io/tls":
        errs += [fe.required(key("data", k)) for k in ("tls.crt", "tls.key") if k not in data]
    return errs


def secret_update(new: dict[str, Any], old: dict[str, Any], qty: Any) -> list[FieldError]:
    errs = _meta_update(new, old)
    if (new.get("type") or "") != (old.get("type") or ""):
        errs.append(fe.invalid("type", str(new.get("type") or ""), "field is immutable"))
    errs += _immutable_data(new, old, ("data",))
    return errs + secret_create(new, qty)


# --------------------------------------------------- serviceaccounts / etc.
def serviceaccount_create(sa: dict[str, Any], qty: Any) -> list[FieldError]:
    return validate_object_meta(_meta(sa), True, name_is_dns_subdomain)


def serviceaccount_update(new: dict[str, Any], old: dict[str, Any], qty: Any) -> list[FieldError]:
    return _meta_update(new, old) + serviceaccount_create(new, qty)


def limitrange_create(lr: dict[str, Any], qty: Any) -> list[FieldError]:
    errs = validate_object_meta(_meta(lr), True, name_is_dns_subdomain)
    return errs + vr.limit_range_spec(lr.get("spec") or {}, qty)


def limitrange_update(new: dict[str, Any], old: dict[str, Any], qty: Any) -> list[FieldError]:
    return _meta_update(new, old) + limitrange_create(new, qty)
