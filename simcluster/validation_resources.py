"""Resource names and quantities: containers, ResourceQuota, Node capacity, LimitRange.

Follows (v1.32) ``pkg/apis/core/helper/helpers.go`` (IsStandardResourceName,
IsStandardContainerResourceName, IsStandardQuotaResourceName, IsExtendedResourceName,
IsNativeResource, IsOvercommitAllowed, IsIntegerResourceName, IsHugePageResourceName,
IsStandardResourceQuotaScope, IsResourceQuotaScopeValidForResource) and
``pkg/apis/core/validation/validation.go`` (validateResourceName,
validateContainerResourceName, ValidateResourceQuotaResourceName,
ValidateResourceQuantityValue, ValidateNonnegativeQuantity, validateResourceRequirements,
validateResourceQuotaScopes, validateScopedResourceSelectorRequirement,
ValidateResourceQuota[Update|StatusUpdate], ValidateNodeResources, ValidateLimitRange).

Quantities come as :class:`~simcluster.quantity.GoQuantity` (see ``quantities``): the
"must be an integer" error passes the Quantity *value* as the bad value, which Go prints
with ``%#v`` as the struct (``resource.Quantity{i:resource.int64Amount{...}, ...}``).
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

from simcluster import fielderrors as fe
from simcluster.fielderrors import FieldError, GoSlice, GoStruct, child, index, key
from simcluster.quantity import GoQuantity, QuantityError, parse_go, quantity_input_text
from simcluster.validation_names import (
    is_qualified_name,
)

_STANDARD_RESOURCES = frozenset(
    {
        "cpu", "memory", "ephemeral-storage", "requests.cpu", "requests.memory",
        "requests.ephemeral-storage", "limits.cpu", "limits.memory", "limits.ephemeral-storage",
        "pods", "resourcequotas", "services", "replicationcontrollers", "secrets", "configmaps",
        "persistentvolumeclaims", "storage", "requests.storage", "services.nodeports",
        "services.loadbalancers",
    }
)  # fmt: skip
_STANDARD_QUOTA = (_STANDARD_RESOURCES - {"storage"}) | {"requests.storage"}
_STANDARD_CONTAINER = frozenset({"cpu", "memory", "ephemeral-storage"})
_INTEGER_RESOURCES = frozenset(
    {
        "pods", "resourcequotas", "services", "replicationcontrollers", "secrets", "configmaps",
        "persistentvolumeclaims", "services.nodeports", "services.loadbalancers",
    }
)  # fmt: skip
STANDARD_SCOPES = ("Terminating", "NotTerminating", "BestEffort", "NotBestEffort", "PriorityClass")
_POD_COMPUTE = frozenset(
    {"cpu", "memory", "limits.cpu", "limits.memory", "requests.cpu", "requests.memory"}
)


def is_huge_page(name: str) -> bool:
    return name.startswith("hugepages-")


def is_quota_huge_page(name: str) -> bool:
    return name.startswith(("hugepages-", "requests.hugepages-"))


def is_native(name: str) -> bool:
    return "/" not in name or "kubernetes.io/" in name


def is_extended(name: str) -> bool:
    if is_native(name) or name.startswith("requests."):
        return False
    return not is_qualified_name("requests." + name)


def is_overcommit_allowed(name: str) -> bool:
    return is_native(name) and not is_huge_page(name)


def is_integer_resource(name: str) -> bool:
    return name in _INTEGER_RESOURCES or is_extended(name)


def is_standard_resource(name: str) -> bool:
    return name in _STANDARD_RESOURCES or is_quota_huge_page(name)


def is_standard_quota_resource(name: str) -> bool:
    return name in _STANDARD_QUOTA or is_quota_huge_page(name)


def is_standard_container_resource(name: str) -> bool:
    return name in _STANDARD_CONTAINER or is_huge_page(name)


def is_standard_scope(scope: str) -> bool:
    return scope in STANDARD_SCOPES or scope == "CrossNamespacePodAffinity"


def scope_valid_for_resource(scope: str, resource: str) -> bool:
    if scope in ("Terminating", "NotTerminating", "NotBestEffort", "PriorityClass",
                 "CrossNamespacePodAffinity"):  # fmt: skip
        return resource == "pods" or resource in _POD_COMPUTE
    if scope == "BestEffort":
        return resource == "pods"
    return True


def validate_resource_name(name: str, path: str) -> list[FieldError]:
    errs = [fe.invalid(path, name, m) for m in is_qualified_name(name)]
    if errs:
        return errs
    if "/" not in name and not is_standard_resource(name):
        return [fe.invalid(path, name, "must be a standard resource type or fully qualified")]
    return []


def validate_container_resource_name(name: str, path: str) -> list[FieldError]:
    errs = validate_resource_name(name, path)
    if "/" not in name:
        if not is_standard_container_resource(name):
            return [*errs, fe.invalid(path, name, "must be a standard resource for containers")]
    elif not is_native(name) and not is_extended(name):
        return [*errs, fe.invalid(path, name, "doesn't follow extended resource name standard")]
    return errs


def validate_quota_resource_name(name: str, path: str) -> list[FieldError]:
    errs = validate_resource_name(name, path)
    if "/" not in name and not is_standard_quota_resource(name):
        return [*errs, fe.invalid(path, name, "must be a standard resource for quota")]
    return errs


class QuantityValue(fe.GoValue):
    """A ``resource.Quantity`` passed by value as a bad value: Go prints it with ``%#v``."""

    def __init__(self, q: GoQuantity) -> None:
        self.q = q

    def sharp(self) -> str:
        return self.q.go_repr()

    def json(self) -> str:  # Quantity.MarshalJSON: the kept text, else the canonical form
        return fe.go_json(self.q.text())


def quantity_value(name: str, q: GoQuantity, path: str) -> list[FieldError]:
    """``ValidateResourceQuantityValue``: non-negative; whole for integer resources."""
    errs = []
    if q.value < 0:
        errs.append(fe.invalid(path, q.text(), "must be greater than or equal to 0"))
    if is_integer_resource(name) and q.milli_value() % 1000 != 0:
        errs.append(fe.invalid(path, QuantityValue(q), "must be an integer"))
    return errs


def _huge_page_divisible(name: str, q: GoQuantity) -> bool:
    """``IsHugePageResourceValueDivisible``: ``Value() % pageSize.Value() == 0``."""
    try:
        page = parse_go(name[len("hugepages-") :])
    except QuantityError:
        return False
    if page.value <= 0 or page.milli_value() % 1000 != 0:
        return False
    return _go_value(q.value) % _go_value(page.value) == 0


def _go_value(v: Fraction) -> int:
    """``Value()``: rounded up away from zero to a whole number."""
    mag = -(-abs(v.numerator) // v.denominator)
    return mag if v >= 0 else -mag


QuantityLookup = Callable[[str, Any], GoQuantity]


def resource_requirements(
    res: dict[str, Any], path: str, qty: QuantityLookup, name_fn: Callable[..., list[FieldError]]
) -> list[FieldError]:
    """``validateResourceRequirements`` with the given resource-name validator."""
    errs: list[FieldError] = []
    lim_path, req_path = child(path, "limits"), child(path, "requests")
    limits = res.get("limits") or {}
    requests = res.get("requests") or {}
    lim_cpu_mem = req_cpu_mem = lim_huge = req_huge = False
    parsed_limits: dict[str, GoQuantity] = {}
    for name, raw in limits.items():
        p = key(lim_path, name)
        q = qty(p, raw)
        parsed_limits[name] = q
        errs += name_fn(name, p)
        errs += quantity_value(name, q, p)
        if is_huge_page(name):
            lim_huge = True
            if not _huge_page_divisible(name, q):
                errs.append(
                    fe.invalid(
                        p, q.text(), f"{q.text()} is not positive integer multiple of {name}"
                    )
                )
        if name in ("cpu", "memory"):
            lim_cpu_mem = True
    for name, raw in requests.items():
        p = key(req_path, name)
        q = qty(p, raw)
        errs += name_fn(name, p)
        errs += quantity_value(name, q, p)
        lim = parsed_limits.get(name)
        if lim is not None:
            if q.value != lim.value and not is_overcommit_allowed(name):
                errs.append(
                    fe.invalid(req_path, q.text(), f"must be equal to {name} limit of {lim.text()}")
                )
            elif q.value > lim.value:
                errs.append(
                    fe.invalid(
                        req_path,
                        q.text(),
                        f"must be less than or equal to {name} limit of {lim.text()}",
                    )
                )
        elif not is_overcommit_allowed(name):
            errs.append(fe.required(lim_path, "Limit must be set for non overcommitable resources"))
        if is_huge_page(name):
            req_huge = True
            if not _huge_page_divisible(name, q):
                errs.append(
                    fe.invalid(
                        p, q.text(), f"{q.text()} is not positive integer multiple of {name}"
                    )
                )
        if name in ("cpu", "memory"):
            req_cpu_mem = True
    if not lim_cpu_mem and not req_cpu_mem and (req_huge or lim_huge):
        errs.append(fe.forbidden(path, "HugePages require cpu or memory"))
    return errs


# ------------------------------------------------------------------ quota
def _scopes_value(scopes: Any) -> GoSlice:
    return GoSlice(
        "[]core.ResourceQuotaScope",
        None if scopes is None else tuple(str(s) for s in scopes),
    )


def _selector_value(sel: dict[str, Any]) -> GoStruct:
    exprs = []
    for e in sel.get("matchExpressions") or []:
        e = e if isinstance(e, dict) else {}
        vals = e.get("values")
        exprs.append(
            GoStruct(
                "core.ScopedResourceSelectorRequirement",
                (
                    ("ScopeName", str(e.get("scopeName") or "")),
                    ("Operator", str(e.get("operator") or "")),
                    ("Values", fe.go_strings(None if vals is None else list(vals))),
                ),
            )
        )
    items = None if sel.get("matchExpressions") is None else tuple(exprs)
    return GoStruct(
        "core.ScopeSelector",
        (("MatchExpressions", GoSlice("[]core.ScopedResourceSelectorRequirement", items)),),
    )


_CONFLICTS = ({"BestEffort", "NotBestEffort"}, {"Terminating", "NotTerminating"})
_EXISTS_ONLY_MSG = (
    "must be 'Exists' when scope is any of ResourceQuotaScopeTerminating, "
    "ResourceQuotaScopeNotTerminating, ResourceQuotaScopeBestEffort, "
    "ResourceQuotaScopeNotBestEffort or ResourceQuotaScopeCrossNamespacePodAffinity"
)


def quota_spec(spec: dict[str, Any], path: str, qty: QuantityLookup) -> list[FieldError]:
    """``ValidateResourceQuotaSpec``: hard names and values, scopes, scope selector."""
    errs: list[FieldError] = []
    hard = spec.get("hard") or {}
    for name, raw in hard.items():
        p = key(child(path, "hard"), name)
        errs += validate_quota_resource_name(name, p)
        errs += quantity_value(name, qty(p, raw), p)
    hard_sorted = sorted(hard)
    scopes = spec.get("scopes")
    if scopes:
        sp = child(path, "scopes")
        seen = set()
        for scope in scopes:
            scope = str(scope)
            if not is_standard_scope(scope):
                errs.append(fe.invalid(sp, _scopes_value(scopes), "unsupported scope"))
            for k in hard_sorted:
                if is_standard_quota_resource(k) and not scope_valid_for_resource(scope, k):
                    errs.append(
                        fe.invalid(
                            sp, _scopes_value(scopes), "unsupported scope applied to resource"
                        )
                    )
            seen.add(scope)
        for pair in _CONFLICTS:
            if pair <= seen:
                errs.append(fe.invalid(sp, _scopes_value(scopes), "conflicting scopes"))
    sel = spec.get("scopeSelector")
    if isinstance(sel, dict):
        mp = child(path, "scopeSelector", "matchExpressions")
        seen = set()
        for req in sel.get("matchExpressions") or []:
            req = req if isinstance(req, dict) else {}
            name, op = str(req.get("scopeName") or ""), str(req.get("operator") or "")
            values = req.get("values") or []
            if not is_standard_scope(name):
                errs.append(fe.invalid(child(mp, "scopeName"), name, "unsupported scope"))
            for k in hard_sorted:
                if is_standard_quota_resource(k) and not scope_valid_for_resource(name, k):
                    errs.append(
                        fe.invalid(
                            mp, _selector_value(sel), "unsupported scope applied to resource"
                        )
                    )
            if name in ("BestEffort", "NotBestEffort", "Terminating", "NotTerminating",
                        "CrossNamespacePodAffinity") and op != "Exists":  # fmt: skip
                errs.append(fe.invalid(child(mp, "operator"), op, _EXISTS_ONLY_MSG))
            if op in ("In", "NotIn"):
                if not values:
                    errs.append(
                        fe.required(
                            child(mp, "values"),
                            "must be at least one value when `operator` is 'In' or 'NotIn' for "
                            "scope selector",
                        )
                    )
            elif op in ("Exists", "DoesNotExist"):
                if values:
                    errs.append(
                        fe.invalid(
                            child(mp, "values"),
                            fe.go_strings([str(v) for v in values]),
                            "must be no value when `operator` is 'Exist' or 'DoesNotExist' for "
                            "scope selector",
                        )
                    )
            else:
                errs.append(fe.invalid(child(mp, "operator"), op, "not a valid selector operator"))
            seen.add(name)
        for pair in _CONFLICTS:
            if pair <= seen:
                errs.append(fe.invalid(mp, _scopes_value(spec.get("scopes")), "conflicting scopes"))
    return errs


def quota_status(status: dict[str, Any], path: str, qty: QuantityLookup) -> list[FieldError]:
    """``ValidateResourceQuotaStatus``: status.hard and status.used like spec.hard."""
    errs: list[FieldError] = []
    for part in ("hard", "used"):
        for name, raw in (status.get(part) or {}).items():
            p = key(child(path, part), name)
            errs += validate_quota_resource_name(name, p)
            errs += quantity_value(name, qty(p, raw), p)
    return errs


def quota_scopes_update(new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
    """``ValidateResourceQuotaUpdate``: the scope set is immutable."""
    ns, os_ = new.get("scopes"), old.get("scopes")
    if set(ns or []) != set(os_ or []):
        return [fe.invalid("spec.scopes", _scopes_value(ns), "field is immutable")]
    return []


# ------------------------------------------------------------------ nodes
def node_resources(status: dict[str, Any], qty: QuantityLookup) -> list[FieldError]:
    """``ValidateNodeResources``: note the path is ``status.capacity.<name>`` (Child, not Key)."""
    errs: list[FieldError] = []
    for part in ("capacity", "allocatable"):
        for name, raw in (status.get(part) or {}).items():
            p = child("status", part, name)
            errs += quantity_value(name, qty(key(child("status", part), name), raw), p)
    return errs


# -------------------------------------------------------------- LimitRange
_LIMIT_TYPES = ("Pod", "Container", "PersistentVolumeClaim")


def limit_range_spec(spec: dict[str, Any], qty: QuantityLookup) -> list[FieldError]:
    """``ValidateLimitRange`` (type names, resource names, min <= default <= max, ...)."""
    errs: list[FieldError] = []
    seen_types = set()
    for i, limit in enumerate(spec.get("limits") or []):
        limit = limit if isinstance(limit, dict) else {}
        ip = index(child("spec", "limits"), i)
        ltype = str(limit.get("type") or "")
        tp = child(ip, "type")
        name_errs = [fe.invalid(tp, ltype, m) for m in is_qualified_name(ltype)]
        if not name_errs and "/" not in ltype and ltype not in _LIMIT_TYPES:
            name_errs = [fe.invalid(tp, ltype, "must be a standard limit type or fully qualified")]
        errs += name_errs
        if ltype in seen_types:
            errs.append(fe.duplicate(tp, ltype))
        seen_types.add(ltype)
        fn = (
            validate_container_resource_name
            if ltype in ("Pod", "Container")
            else validate_resource_name
        )
        vals: dict[str, dict[str, GoQuantity]] = {}
        parts = ["max", "min"]
        if ltype == "Pod":
            for part in ("default", "defaultRequest"):
                if limit.get(part):
                    errs.append(
                        fe.forbidden(child(ip, part), "may not be specified when `type` is 'Pod'")
                    )
        else:
            parts += ["default", "defaultRequest"]
        parts.append("maxLimitRequestRatio")
        keys: list[str] = []
        for part in parts:
            for name, raw in (limit.get(part) or {}).items():
                p = key(child(ip, part), name)
                errs += fn(name, p)
                vals.setdefault(part, {})[name] = qty(p, raw)
                if name not in keys:
                    keys.append(name)
        if (
            ltype == "PersistentVolumeClaim"
            and "storage" not in (limit.get("min") or {})
            and ("storage" not in (limit.get("max") or {}))
        ):
            errs.append(
                fe.required(
                    child(ip, "limits"),
                    "either minimum or maximum storage value is required, but neither was provided",
                )
            )
        errs += _limit_relations(ip, keys, vals)
    return errs


# (value that is too big, the bound, field the error is on, bad value shown, message).
_LIMIT_ORDER = (
    ("min", "max", "min", "min", "min value {a} is greater than max value {b}"),
    ("min", "defaultRequest", "defaultRequest", "defaultRequest",
     "min value {a} is greater than default request value {b}"),
    ("defaultRequest", "max", "defaultRequest", "defaultRequest",
     "default request value {a} is greater than max value {b}"),
    ("defaultRequest", "default", "defaultRequest", "defaultRequest",
     "default request value {a} is greater than default limit value {b}"),
    ("min", "default", "default", "min", "min value {a} is greater than default value {b}"),
    ("default", "max", "default", "max", "default value {a} is greater than max value {b}"),
)  # fmt: skip


def _limit_relations(
    ip: str, keys: list[str], vals: dict[str, dict[str, GoQuantity]]
) -> list[FieldError]:
    """The order checks of ``ValidateLimitRange`` (the real code shows these bad values)."""
    errs: list[FieldError] = []
    for k in keys:
        got = {part: vals.get(part, {}).get(k) for part in _LIMIT_PARTS_ALL}
        for big, small, on, shown, msg in _LIMIT_ORDER:
            a, b = got[big], got[small]
            if a is not None and b is not None and a.value > b.value:
                text = msg.format(a=a.text(), b=b.text())
                errs.append(fe.invalid(key(child(ip, on), k), QuantityValue(got[shown]), text))
        ratio, mn, mx = got["maxLimitRequestRatio"], got["min"], got["max"]
        rp = key(child(ip, "maxLimitRequestRatio"), k)
        if ratio is not None and ratio.value < 1:
            errs.append(
                fe.invalid(rp, QuantityValue(ratio), f"ratio {ratio.text()} is less than 1")
            )
        if ratio is not None and mn is not None and mx is not None and mn.value > 0:
            limit = float(mx.value) / float(mn.value)
            if float(ratio.value) > limit:
                msg = f"ratio {ratio.text()} is greater than max/min = {limit:f}"
                errs.append(fe.invalid(rp, QuantityValue(ratio), msg))
        df, dr = got["default"], got["defaultRequest"]
        if not is_overcommit_allowed(k) and df and dr and df.value != dr.value:
            msg = f"default value {df.text()} must equal to defaultRequest value {dr.text()} in {k}"
            errs.append(fe.invalid(key(child(ip, "defaultRequest"), k), QuantityValue(dr), msg))
    return errs


_LIMIT_PARTS_ALL = ("max", "min", "default", "defaultRequest", "maxLimitRequestRatio")


def plain_qty(path: str, raw: Any) -> GoQuantity:
    """Parse a stored quantity (already decoded once) for validation."""
    return parse_go(quantity_input_text(raw))
