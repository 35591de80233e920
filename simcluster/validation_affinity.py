"""Node affinity, pod (anti-)affinity terms and node selector requirements of a PodSpec.

Follows ``pkg/apis/core/validation/validation.go`` (v1.32): validateAffinity,
validateNodeAffinity, ValidateNodeSelector, ValidateNodeSelectorTerm,
ValidateNodeSelectorRequirement, ValidateNodeFieldSelectorRequirement,
ValidatePreferredSchedulingTerms, validatePodAffinity/AntiAffinity,
validatePodAffinityTerm (label and namespace selectors, namespaces, topologyKey) and
validateWeightedPodAffinityTerms.
"""

from __future__ import annotations

from typing import Any

from simcluster import fielderrors as fe
from simcluster.fielderrors import FieldError, child, index
from simcluster.validation_meta import validate_label_name, validate_label_selector
from simcluster.validation_names import (
    is_valid_label_value,
    name_is_dns_label,
    name_is_dns_subdomain,
)


def _node_selector_req(req: dict[str, Any], path: str, check_values: bool) -> list[FieldError]:
    errs: list[FieldError] = []
    op, values = str(req.get("operator") or ""), [str(v) for v in req.get("values") or []]
    if op in ("In", "NotIn"):
        if not values:
            errs.append(
                fe.required(
                    child(path, "values"), "must be specified when `operator` is 'In' or 'NotIn'"
                )
            )
    elif op in ("Exists", "DoesNotExist"):
        if values:
            errs.append(
                fe.forbidden(
                    child(path, "values"),
                    "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                )
            )
    elif op in ("Gt", "Lt"):
        if len(values) != 1:
            errs.append(
                fe.required(
                    child(path, "values"),
                    "must be specified single value when `operator` is 'Lt' or 'Gt'",
                )
            )
    else:
        errs.append(fe.invalid(child(path, "operator"), op, "not a valid selector operator"))
    errs += validate_label_name(str(req.get("key") or ""), child(path, "key"))
    if check_values:
        for j, v in enumerate(values):
            errs += [
                fe.invalid(index(child(path, "values"), j), v, m) for m in is_valid_label_value(v)
            ]
    return errs


def _selector_term(term: Any, path: str, check_values: bool) -> list[FieldError]:
    errs: list[FieldError] = []
    term = term if isinstance(term, dict) else {}
    for j, req in enumerate(term.get("matchExpressions") or []):
        errs += _node_selector_req(
            req if isinstance(req, dict) else {},
            index(child(path, "matchExpressions"), j),
            check_values,
        )
    for j, req in enumerate(term.get("matchFields") or []):
        req = req if isinstance(req, dict) else {}
        p = index(child(path, "matchFields"), j)
        if req.get("operator") in ("In", "NotIn"):
            if len(req.get("values") or []) != 1:
                errs.append(
                    fe.required(
                        child(p, "values"),
                        "must be only one value when `operator` is 'In' or 'NotIn' for node field "
                        "selector",
                    )
                )
        else:
            errs.append(
                fe.invalid(
                    child(p, "operator"),
                    str(req.get("operator") or ""),
                    "not a valid selector operator",
                )
            )
        if req.get("key") != "metadata.name":
            errs.append(
                fe.invalid(
                    child(p, "key"), str(req.get("key") or ""), "not a valid field selector key"
                )
            )
        else:
            for k, v in enumerate(req.get("values") or []):
                errs += [
                    fe.invalid(index(child(p, "values"), k), str(v), m)
                    for m in name_is_dns_subdomain(str(v), False)
                ]
    return errs


def _pod_affinity_term(term: Any, path: str) -> list[FieldError]:
    term = term if isinstance(term, dict) else {}
    errs = validate_label_selector(term.get("labelSelector"), child(path, "labelSelector"))
    errs += validate_label_selector(term.get("namespaceSelector"), child(path, "namespaceSelector"))
    for ns in term.get("namespaces") or []:
        errs += [
            fe.invalid(child(path, "namespace"), str(ns), m)
            for m in name_is_dns_label(str(ns), False)
        ]
    tk = str(term.get("topologyKey") or "")
    if not tk:
        errs.append(fe.required(child(path, "topologyKey"), "can not be empty"))
    return errs + validate_label_name(tk, child(path, "topologyKey"))


def _weight(w: Any, path: str) -> list[FieldError]:
    if not isinstance(w, int) or w <= 0 or w > 100:
        return [fe.invalid(path, w if isinstance(w, int) else 0, "must be in the range 1-100")]
    return []


def affinity(aff: Any, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    if not isinstance(aff, dict):
        return errs
    na = aff.get("nodeAffinity")
    if isinstance(na, dict):
        np = child(path, "nodeAffinity")
        req = na.get("requiredDuringSchedulingIgnoredDuringExecution")
        if isinstance(req, dict):
            rp = child(np, "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
            terms = req.get("nodeSelectorTerms") or []
            if not terms:
                errs.append(fe.required(rp, "must have at least one node selector term"))
            for i, t in enumerate(terms):
                errs += _selector_term(t, index(rp, i), True)
        for i, pt in enumerate(na.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
            pt = pt if isinstance(pt, dict) else {}
            pp = index(child(np, "preferredDuringSchedulingIgnoredDuringExecution"), i)
            errs += _weight(pt.get("weight"), child(pp, "weight"))
            errs += _selector_term(pt.get("preference"), child(pp, "preference"), False)
    for kind in ("podAffinity", "podAntiAffinity"):
        pa = aff.get(kind)
        if not isinstance(pa, dict):
            continue
        kp = child(path, kind)
        for i, t in enumerate(pa.get("requiredDuringSchedulingIgnoredDuringExecution") or []):
            errs += _pod_affinity_term(
                t, index(child(kp, "requiredDuringSchedulingIgnoredDuringExecution"), i)
            )
        for i, wt in enumerate(pa.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
            wt = wt if isinstance(wt, dict) else {}
            wp = index(child(kp, "preferredDuringSchedulingIgnoredDuringExecution"), i)
            errs += _weight(wt.get("weight"), child(wp, "weight"))
            errs += _pod_affinity_term(wt.get("podAffinityTerm"), child(wp, "podAffinityTerm"))
    return errs
