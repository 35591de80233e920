"""Validation of Kueue's objects: the CRDs' structural schemas and CEL rules (422), then
Kueue's validating webhooks (403 ``admission webhook "…" denied the request: …``).

Sources: kubernetes-sigs/kueue ``config/components/crd/bases/kueue.x-k8s.io_*.yaml`` (enums,
patterns, min/max items, ``x-kubernetes-validations``), ``pkg/webhooks/clusterqueue_webhook.go``
(``validateResourceGroups``, ``validateFlavorQuotas``, ``validateLimit``,
``validateLendingLimit``), ``pkg/webhooks/cohort_webhook.go``,
``pkg/webhooks/resourceflavor_webhook.go`` (labels, taints), ``pkg/webhooks/common.go``
(``validateResourceName``); kubernetes ``staging/src/k8s.io/apiextensions-apiserver/pkg/
apiserver/schema/cel`` (a CEL failure is ``<path>: Invalid value: "object": <message>``) and
``.../schema/validation`` (``in body should match '<pattern>'``).

CEL failures follow apiextensions-apiserver v0.36 ``pkg/apiserver/schema/cel/validation.go``:
an object or array field's value is left out (``spec: Invalid value: <message>``), a scalar's
is its value; and ``pkg/registry/customresource/strategy.go`` (``hasBlockingErr``) skips every
CEL rule when the schema found an unsupported, required, too long, too many or wrongly typed
value, adding ``<nil>: Invalid value: null: some validation rules were not checked …``.
"""

from __future__ import annotations

import re
from typing import Any

from simcluster.errors import ApiError
from simcluster.fielderrors import (
    NOT_SUPPORTED,
    OMIT,
    REQUIRED,
    TOO_LONG,
    TOO_MANY,
    FieldError,
    GoValue,
    aggregate_message,
    duplicate,
    invalid,
    not_supported,
    required,
    too_long,
    too_many,
)
from simcluster.quantity import QuantityError, parse_go
from simcluster.validation_meta import validate_label_name, validate_label_selector, validate_labels
from simcluster.validation_names import is_qualified_name, is_valid_label_value

DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
QUANTITY = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?"
    r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
STRATEGIES = ("StrictFIFO", "BestEffortFIFO")
STOP_POLICIES = ("None", "Hold", "HoldAndDrain")
FUNGIBILITY = ("MayStopSearch", "TryNextFlavor")
PREFERENCES = ("BorrowingOverPreemption", "PreemptionOverBorrowing")
RECLAIM = ("Never", "LowerPriority", "Any")
WITHIN_CQ = ("Never", "LowerPriority", "LowerOrNewerEqualPriority")
BORROW_POLICY = ("Never", "LowerPriority")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
WEBHOOKS = {
    "clusterqueues": "vclusterqueue.kb.io",
    "cohorts": "vcohort.kb.io",
    "resourceflavors": "vresourceflavor.kb.io",
    "workloads": "vworkload.kb.io",
}


def _d(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _l(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


class CelError(FieldError):
    """A failed ``x-kubernetes-validations`` rule (skipped after a blocking schema error)."""


def _cel(path: str, message: str, value: Any = OMIT) -> FieldError:
    """A CEL rule's error: the value of a scalar field, none for an object or array."""
    return CelError(INVALID_TYPE, path, value, message)


class _GoNil(GoValue):
    """A nil ``BadValue``: ``json.Marshal`` prints ``null``."""

    def sharp(self) -> str:
        return "null"


INVALID_TYPE = invalid("", "", "").type
# hasBlockingErr: NotSupported, Required, TooLong, TooMany, TypeInvalid
_BLOCKING = frozenset({NOT_SUPPORTED, REQUIRED, TOO_LONG, TOO_MANY})
_NOT_CHECKED = (
    "some validation rules were not checked because the object was invalid; correct the "
    "existing errors to complete validation"
)


def _gate(errs: list[FieldError]) -> list[FieldError]:
    """Drop the CEL errors after a blocking schema error, noting that they were skipped."""
    schema = [e for e in errs if not isinstance(e, CelError)]
    if any(e.type in _BLOCKING for e in schema):
        return [*schema, invalid("<nil>", _GoNil(), _NOT_CHECKED)]
    return errs


def gated(fn):
    """The structural schema's errors then its CEL rules', as the CRD strategy runs them."""

    def validate(*args: Any) -> list[FieldError]:
        return _gate(fn(*args))

    validate.__name__ = fn.__name__
    validate.__doc__ = fn.__doc__
    return validate


def _pattern(path: str, value: Any, pattern: str) -> list[FieldError]:
    if isinstance(value, str) and not re.match(pattern, value):
        return [invalid(path, value, f"{path} in body should match '{pattern}'")]
    return []


def _max_len(path: str, value: Any, n: int) -> list[FieldError]:
    if isinstance(value, str) and len(value) > n:
        return [too_long(path, n)]
    return []


def _enum(path: str, value: Any, allowed: tuple[str, ...]) -> list[FieldError]:
    if value is None or value in allowed:
        return []
    return [not_supported(path, value, allowed)]


def _items(path: str, value: Any, lo: int, hi: int) -> list[FieldError]:
    n = len(_l(value))
    if n > hi:
        return [too_many(path, n, hi)]
    if n < lo:
        return [invalid(path, n, f"{path} in body should have at least {lo} items")]
    return []


def _quantity(path: str, value: Any) -> list[FieldError]:
    if value is None or isinstance(value, int):
        return []
    return _pattern(path, str(value), QUANTITY)


def qty(value: Any) -> Any:
    """A quantity's exact value (a Fraction-like number from the real grammar); 0 if unset."""
    if value is None:
        return 0
    try:
        return parse_go(str(value)).value
    except QuantityError:
        return 0


# ------------------------------------------------------------ CRD schemas (422)
def _resource_groups(path: str, groups: Any) -> list[FieldError]:
    errs = _items(path, groups, 0, 16)
    for i, rg in enumerate(_l(groups)):
        p = f"{path}[{i}]"
        rg = _d(rg)
        if "coveredResources" not in rg:
            errs.append(required(f"{p}.coveredResources", ""))
        else:
            errs += _items(f"{p}.coveredResources", rg["coveredResources"], 1, 64)
        if "flavors" not in rg:
            errs.append(required(f"{p}.flavors", ""))
            continue
        errs += _items(f"{p}.flavors", rg["flavors"], 1, 64)
        for j, fq in enumerate(_l(rg["flavors"])):
            fp = f"{p}.flavors[{j}]"
            fq = _d(fq)
            if "name" not in fq:
                errs.append(required(f"{fp}.name", ""))
            errs += _max_len(f"{fp}.name", fq.get("name"), 253)
            errs += _pattern(f"{fp}.name", fq.get("name"), DNS_SUBDOMAIN)
            if "resources" not in fq:
                errs.append(required(f"{fp}.resources", ""))
                continue
            errs += _items(f"{fp}.resources", fq["resources"], 1, 64)
            for k, rq in enumerate(_l(fq["resources"])):
                rp = f"{fp}.resources[{k}]"
                rq = _d(rq)
                if "name" not in rq:
                    errs.append(required(f"{rp}.name", ""))
                if "nominalQuota" not in rq:
                    errs.append(required(f"{rp}.nominalQuota", ""))
                for q in ("borrowingLimit", "lendingLimit", "nominalQuota"):
                    errs += _quantity(f"{rp}.{q}", rq.get(q))
        if "coveredResources" in rg and any(
            len(_l(_d(f).get("resources"))) != len(_l(rg["coveredResources"]))
            for f in _l(rg["flavors"])
        ):
            errs.append(
                _cel(p, "flavors must have the same number of resources as the coveredResources")
            )
    return errs


def cluster_queue(obj: dict[str, Any], _qty: Any = None) -> list[FieldError]:
    spec = _d(obj.get("spec"))
    errs = _max_len("spec.cohortName", spec.get("cohortName"), 253)
    errs += _pattern("spec.cohortName", spec.get("cohortName"), DNS_SUBDOMAIN)
    errs += _enum("spec.queueingStrategy", spec.get("queueingStrategy"), STRATEGIES)
    errs += _enum("spec.stopPolicy", spec.get("stopPolicy"), STOP_POLICIES)
    errs += _resource_groups("spec.resourceGroups", spec.get("resourceGroups"))
    fung = _d(spec.get("flavorFungibility"))
    for k in ("whenCanBorrow", "whenCanPreempt"):
        errs += _enum(f"spec.flavorFungibility.{k}", fung.get(k), FUNGIBILITY)
    errs += _enum("spec.flavorFungibility.preference", fung.get("preference"), PREFERENCES)
    if "preference" in fung and not (
        fung.get("whenCanBorrow") == "TryNextFlavor"
        and fung.get("whenCanPreempt") == "TryNextFlavor"
    ):
        errs.append(
            _cel(
                "spec.flavorFungibility",
                "preference can only be set when both whenCanBorrow and whenCanPreempt are "
                "TryNextFlavor",
            )
        )
    pre = _d(spec.get("preemption"))
    bwc = _d(pre.get("borrowWithinCohort"))
    errs += _enum("spec.preemption.borrowWithinCohort.policy", bwc.get("policy"), BORROW_POLICY)
    errs += _enum("spec.preemption.reclaimWithinCohort", pre.get("reclaimWithinCohort"), RECLAIM)
    errs += _enum("spec.preemption.withinClusterQueue", pre.get("withinClusterQueue"), WITHIN_CQ)
    if pre.get("reclaimWithinCohort") == "Never" and bwc and bwc.get("policy") != "Never":
        errs.append(
            _cel(
                "spec.preemption", "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never"
            )
        )
    if not spec.get("cohortName") and any(
        "borrowingLimit" in _d(r)
        for rg in _l(spec.get("resourceGroups"))
        for f in _l(_d(rg).get("flavors"))
        for r in _l(_d(f).get("resources"))
    ):
        errs.append(_cel("spec", "borrowingLimit must be nil when cohort is empty"))
    return errs


def cluster_queue_update(new: dict[str, Any], _old: dict[str, Any], q: Any = None) -> list:
    return cluster_queue(new, q)


def local_queue(obj: dict[str, Any], _qty: Any = None) -> list[FieldError]:
    spec = _d(obj.get("spec"))
    errs = _max_len("spec.clusterQueue", spec.get("clusterQueue"), 253)
    errs += _pattern("spec.clusterQueue", spec.get("clusterQueue"), DNS_SUBDOMAIN)
    errs += _enum("spec.stopPolicy", spec.get("stopPolicy"), STOP_POLICIES)
    return errs


def local_queue_update(new: dict[str, Any], old: dict[str, Any], q: Any = None) -> list:
    errs = local_queue(new, q)
    # CEL ``self == oldSelf`` on spec.clusterQueue (a transition rule: both set)
    a, b = _d(new.get("spec")).get("clusterQueue"), _d(old.get("spec")).get("clusterQueue")
    if a is not None and b is not None and a != b:
        errs.append(_cel("spec.clusterQueue", "field is immutable", a))
    return errs


def resource_flavor(obj: dict[str, Any], _qty: Any = None) -> list[FieldError]:
    spec = _d(obj.get("spec"))
    labels = spec.get("nodeLabels")
    errs: list[FieldError] = []
    if isinstance(labels, dict) and len(labels) > 8:
        errs.append(too_many("spec.nodeLabels", len(labels), 8))
    taints = _l(spec.get("nodeTaints"))
    errs += _items("spec.nodeTaints", taints, 0, 8)
    for i, t in enumerate(taints):
        for k in ("effect", "key"):
            if k not in _d(t):
                errs.append(required(f"spec.nodeTaints[{i}].{k}", ""))
    if any(_d(t).get("effect") not in EFFECTS for t in taints if "effect" in _d(t)):
        errs.append(
            _cel(
                "spec.nodeTaints",
                "supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'",
            )
        )
    tols = [_d(t) for t in _l(spec.get("tolerations"))]
    errs += _items("spec.tolerations", tols, 0, 8)
    rules = (
        (
            lambda x: "key" in x or x.get("operator") == "Exists",
            "operator must be Exists when 'key' is empty, which means 'match all values and all "
            "keys'",
        ),
        (
            lambda x: "tolerationSeconds" not in x or x.get("effect") == "NoExecute",
            "effect must be 'NoExecute' when 'tolerationSeconds' is set",
        ),
        (
            lambda x: "operator" not in x or x["operator"] in ("Equal", "Exists"),
            "supported toleration values: 'Equal'(default), 'Exists'",
        ),
        (
            lambda x: not (x.get("operator") == "Exists" and "value" in x),
            "a value must be empty when 'operator' is 'Exists'",
        ),
        (
            lambda x: "effect" not in x or x["effect"] in EFFECTS,
            "supported taint effect values: 'NoSchedule', 'PreferNoSchedule', 'NoExecute'",
        ),
    )
    for ok, msg in rules:
        if not all(ok(t) for t in tols):
            errs.append(_cel("spec.tolerations", msg))
    if "topologyName" in spec and not labels:
        errs.append(_cel("spec", "at least one nodeLabel is required when topology is set"))
    return errs


def resource_flavor_update(new: dict[str, Any], old: dict[str, Any], q: Any = None) -> list:
    errs = resource_flavor(new, q)
    ot = _d(old.get("spec")).get("topologyName")
    if ot is not None and _d(new.get("spec")).get("topologyName") != ot:
        errs.append(_cel("spec", "topologyName is immutable when topologyName is set"))
    return errs


def cohort(obj: dict[str, Any], _qty: Any = None) -> list[FieldError]:
    spec = _d(obj.get("spec"))
    errs = _max_len("spec.parentName", spec.get("parentName"), 253)
    errs += _pattern("spec.parentName", spec.get("parentName"), DNS_SUBDOMAIN)
    return errs + _resource_groups("spec.resourceGroups", spec.get("resourceGroups"))


def cohort_update(new: dict[str, Any], _old: dict[str, Any], q: Any = None) -> list:
    return cohort(new, q)


def _reserved(obj: dict[str, Any]) -> bool:
    return any(
        _d(c).get("type") == "QuotaReserved" and _d(c).get("status") == "True"
        for c in _l(_d(obj.get("status")).get("conditions"))
    )


def workload(obj: dict[str, Any], _qty: Any = None) -> list[FieldError]:
    spec = _d(obj.get("spec"))
    errs: list[FieldError] = []
    if "podSets" not in spec:
        errs.append(required("spec.podSets", ""))
    else:
        errs += _items("spec.podSets", spec["podSets"], 1, 18)
    for i, ps in enumerate(_l(spec.get("podSets"))):
        ps, p = _d(ps), f"spec.podSets[{i}]"
        if "template" not in ps:
            errs.append(required(f"{p}.template", ""))
        errs += _max_len(f"{p}.name", ps.get("name"), 63)
        errs += _pattern(f"{p}.name", ps.get("name"), DNS_LABEL)
        if isinstance(ps.get("count"), int) and ps["count"] < 0:
            errs.append(
                invalid(
                    f"{p}.count",
                    ps["count"],
                    f"{p}.count in body should be greater than or equal to 0",
                )
            )
        if "minCount" in ps and isinstance(ps.get("count"), int) and ps["minCount"] > ps["count"]:
            errs.append(_cel(p, "minCount should be positive and less or equal to count"))
    errs += _pattern("spec.queueName", spec.get("queueName"), DNS_SUBDOMAIN)
    if "priorityClassRef" in spec and "priority" not in spec:
        errs.append(_cel("spec", "priority should not be nil when priorityClassRef is set"))
    status = _d(obj.get("status"))
    adm = _d(status.get("admission"))
    if (
        _reserved(obj)
        and adm
        and len(_l(adm.get("podSetAssignments"))) != len(_l(spec.get("podSets")))
    ):
        errs.append(
            _cel("<nil>", "podSetAssignments must have the same number of podSets as the spec")
        )
    return errs


def workload_update(new: dict[str, Any], old: dict[str, Any], q: Any = None) -> list:
    errs = workload(new, q)
    if _reserved(old) and _reserved(new):
        a, b = _d(new.get("spec")).get("queueName"), _d(old.get("spec")).get("queueName")
        if a != b:
            errs.append(_cel("<nil>", "queueName is immutable while workload quota reserved"))
    return errs


# ------------------------------------------------------------ webhooks (403)
def _limit_errors(
    rq: dict[str, Any], p: str, has_parent: bool, parent_word: str, enforce_lending: bool
) -> list[FieldError]:
    errs: list[FieldError] = []
    nominal = qty(rq.get("nominalQuota"))
    if nominal < 0:
        errs.append(
            invalid(
                f"{p}.nominalQuota",
                str(rq.get("nominalQuota")),
                "must be greater than or equal to 0",
            )
        )
    for k in ("borrowingLimit", "lendingLimit"):
        if k not in rq:
            continue
        v = rq[k]
        checks = []
        if not has_parent:
            checks.append(invalid(f"{p}.{k}", str(v), f"must be nil when {parent_word} is empty"))
        if qty(v) < 0:
            checks.append(invalid(f"{p}.{k}", str(v), "must be greater than or equal to 0"))
        if k == "lendingLimit":  # validateFlavorQuotas: quantity, limit, then lending order
            checks.reverse()
            if enforce_lending and qty(v) > nominal:
                checks.append(
                    invalid(f"{p}.{k}", str(v), "must be less than or equal to the nominalQuota")
                )
        errs += checks
    return errs


def webhook_resource_groups(
    path: str, groups: Any, has_parent: bool, is_cohort: bool
) -> list[FieldError]:
    """``validateResourceGroups`` (clusterqueue_webhook.go)."""
    errs: list[FieldError] = []
    seen_res: set[str] = set()
    seen_fl: set[str] = set()
    word = "parent" if is_cohort else "cohort"
    for i, rg in enumerate(_l(groups)):
        rg, p = _d(rg), f"{path}[{i}]"
        covered = [str(c) for c in _l(rg.get("coveredResources"))]
        for j, name in enumerate(covered):
            cp = f"{p}.coveredResources[{j}]"
            errs += [invalid(cp, name, m) for m in is_qualified_name(name)]
            if name in seen_res:
                errs.append(duplicate(cp, name))
            seen_res.add(name)
        for j, fq in enumerate(_l(rg.get("flavors"))):
            fq, fp = _d(fq), f"{p}.flavors[{j}]"
            for k, rq in enumerate(_l(fq.get("resources"))):
                if k >= len(covered):
                    break
                rq, rp = _d(rq), f"{fp}.resources[{k}]"
                if rq.get("name") != covered[k]:
                    errs.append(
                        invalid(
                            f"{rp}.name", rq.get("name"), "must match the name in coveredResources"
                        )
                    )
                errs += _limit_errors(rq, rp, has_parent, word, not is_cohort)
            name = str(fq.get("name") or "")
            if name in seen_fl:
                errs.append(duplicate(f"{fp}.name", name))
            seen_fl.add(name)
    return errs


def webhook_errors(resource: str, obj: dict[str, Any]) -> list[FieldError]:
    spec = _d(obj.get("spec"))
    if resource == "clusterqueues":
        errs = webhook_resource_groups(
            "spec.resourceGroups", spec.get("resourceGroups"), bool(spec.get("cohortName")), False
        )
        if spec.get("namespaceSelector") is not None:
            errs += validate_label_selector(spec["namespaceSelector"], "spec.namespaceSelector")
        return errs
    if resource == "cohorts":
        return webhook_resource_groups(
            "spec.resourceGroups", spec.get("resourceGroups"), bool(spec.get("parentName")), True
        )
    if resource == "resourceflavors":
        errs = validate_labels(spec.get("nodeLabels") or {}, "spec.nodeLabels")
        seen: dict[str, set[str]] = {}
        for i, t in enumerate(_l(spec.get("nodeTaints"))):
            t, p = _d(t), f"spec.nodeTaints[{i}]"
            errs += validate_label_name(str(t.get("key") or ""), f"{p}.key")
            msgs = is_valid_label_value(str(t.get("value") or ""))
            if msgs:
                errs.append(invalid(f"{p}.value", t.get("value") or "", ";".join(msgs)))
            keys = seen.setdefault(str(t.get("effect")), set())
            if t.get("key") in keys:
                e = duplicate(p, t)
                e.detail = "taints must be unique by key and effect pair"
                errs.append(e)
                continue
            keys.add(str(t.get("key")))
        return errs
    return []


def check_webhook(resource: str, obj: dict[str, Any]) -> None:
    """403 as the API server answers a denying validating webhook (controller-runtime
    ``admission.Denied(err.Error())``; apiserver ``webhookerrors.ToStatusErr``)."""
    errs = webhook_errors(resource, obj)
    if errs:
        raise ApiError(
            403,
            f'admission webhook "{WEBHOOKS[resource]}" denied the request: '
            + aggregate_message(errs),
            "Forbidden",
        )
