"""DaemonSets, Deployments, ReplicaSets, StatefulSets, Jobs and CronJobs, as validated in v1.32.

Follows ``pkg/apis/apps/validation/validation.go`` (ValidateDaemonSet[Update],
ValidateDaemonSetUpdateStrategy, ValidateRollingUpdateDaemonSet, ValidateDeployment[Spec],
ValidateDeploymentStrategy, ValidateRollingUpdateDeployment, ValidateReplicaSet[Spec],
ValidatePodTemplateSpecForReplicaSet, ValidateStatefulSet[Spec|Update]), the strategies'
``ValidateUpdate`` in ``pkg/registry/apps/*/strategy.go`` (``spec.selector`` immutable in
apps/v1), ``pkg/apis/batch/validation/validation.go`` (validateJobSpec,
validateGeneratedSelector, ValidateJobSpecUpdate, ValidateCronJobSpec) and
``pkg/apis/core/validation/validation.go`` ``ValidatePodTemplateSpec`` (template labels at
``spec.template.labels``, as the real path says, then ValidatePodSpec through the
simulator's pod validation, :func:`simcluster.validation_podspec.pod_spec`).

Not checked: cron syntax and time zones, pod failure / success policy rules, indexed-job
limits, the statefulset volume claim templates' own validation.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from simcluster import fielderrors as fe
from simcluster.disruption import selector_matcher
from simcluster.fielderrors import FieldError, GoMap, GoSlice, GoStruct, child
from simcluster.validation_meta import (
    FIELD_IMMUTABLE,
    IS_NEGATIVE,
    validate_annotations,
    validate_label_selector,
    validate_labels,
    validate_object_meta,
)
from simcluster.validation_names import (
    is_valid_percent,
    name_is_dns_subdomain,
)
from simcluster.validation_podspec import pod_annotations, pod_spec
from simcluster.validation_resources import QuantityLookup

_ALWAYS = ["Always"]
SELECTOR_MISMATCH = "`selector` does not match template `labels`"


def _d(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _rebase(errs: list[FieldError], old: str, new: str) -> list[FieldError]:
    out = []
    for e in errs:
        f = e.field
        if f == old or f.startswith(old + ".") or f.startswith(old + "["):
            e = dataclasses.replace(e, field=new + f[len(old) :])
        out.append(e)
    return out


def _labels_value(labels: Any) -> GoMap:
    items = None if labels is None else tuple((str(k), str(v)) for k, v in _d(labels).items())
    return GoMap("map[string]string", items)


def selector_value(sel: Any) -> GoStruct:
    """``v1.LabelSelector`` as ``%#v`` prints it (a field error's value)."""
    sel = _d(sel)
    ml = sel.get("matchLabels")
    exprs = sel.get("matchExpressions")
    return GoStruct(
        "v1.LabelSelector",
        (
            ("MatchLabels", _labels_value(ml)),
            (
                "MatchExpressions",
                GoSlice("[]v1.LabelSelectorRequirement", None if exprs is None else tuple(exprs)),
            ),
        ),
    )


def _nonneg(spec: dict[str, Any], name: str, path: str) -> list[FieldError]:
    v = spec.get(name)
    if isinstance(v, int) and not isinstance(v, bool) and v < 0:
        return [fe.invalid(child(path, name), v, IS_NEGATIVE)]
    return []


def pod_template(tpl: Any, path: str, qty: QuantityLookup) -> list[FieldError]:
    """``ValidatePodTemplateSpec``: labels, annotations, the pod spec, no ephemeral containers."""
    tpl = _d(tpl)
    meta = _d(tpl.get("metadata"))
    spec = _d(tpl.get("spec"))
    errs = validate_labels(meta.get("labels"), child(path, "labels"))
    errs += validate_annotations(meta.get("annotations"), child(path, "annotations"))
    errs += _rebase(pod_annotations(meta, spec), "metadata.annotations", child(path, "annotations"))
    spec_path = child(path, "spec")
    errs += _rebase(
        pod_spec(spec, lambda p, raw: qty(spec_path + p[len("spec") :], raw)), "spec", spec_path
    )
    if spec.get("ephemeralContainers"):
        errs.append(
            fe.forbidden(
                child(spec_path, "ephemeralContainers"),
                "ephemeral containers not allowed in pod template",
            )
        )
    return errs


def _selector_matches(sel: Any, labels: Any) -> bool:
    return bool(selector_matcher(sel if isinstance(sel, dict) else None)(_d(labels)))


def _selector_empty(sel: Any) -> bool:
    sel = _d(sel)
    return not sel.get("matchLabels") and not sel.get("matchExpressions")


def _strict_selector(spec: dict[str, Any], kind: str) -> list[FieldError]:
    """The Deployment/ReplicaSet/StatefulSet selector: required, valid, non-empty."""
    sel = spec.get("selector")
    if sel is None:
        return [fe.required("spec.selector")]
    errs = validate_label_selector(sel, "spec.selector")
    if _selector_empty(sel):
        errs.append(
            fe.invalid(
                "spec.selector", selector_value(sel), f"empty selector is invalid for {kind}"
            )
        )
    return errs


def _replica_template(spec: dict[str, Any], kind: str, qty: QuantityLookup) -> list[FieldError]:
    """``ValidatePodTemplateSpecForReplicaSet``."""
    tpl = _d(spec.get("template"))
    labels = _d(tpl.get("metadata")).get("labels")
    errs: list[FieldError] = []
    sel = spec.get("selector")
    if sel is not None and not _selector_empty(sel) and not _selector_matches(sel, labels):
        errs.append(
            fe.invalid("spec.template.metadata.labels", _labels_value(labels), SELECTOR_MISMATCH)
        )
    errs += pod_template(tpl, "spec.template", qty)
    errs += _always_restart(tpl, "spec.template.spec", kind)
    return errs


def _always_restart(tpl: dict[str, Any], path: str, kind: str) -> list[FieldError]:
    tspec = _d(tpl.get("spec"))
    errs: list[FieldError] = []
    rp = tspec.get("restartPolicy")
    if rp != "Always":  # after ValidatePodSpec's own check, so a bad value gets both
        errs.append(fe.not_supported(child(path, "restartPolicy"), str(rp or ""), _ALWAYS))
    if tspec.get("activeDeadlineSeconds") is not None:
        errs.append(
            fe.forbidden(
                child(path, "activeDeadlineSeconds"),
                f"activeDeadlineSeconds in {kind} is not Supported",
            )
        )
    return errs


def _int_or_string(v: Any) -> GoStruct:
    if isinstance(v, str):
        return GoStruct("intstr.IntOrString", (("Type", 1), ("IntVal", 0), ("StrVal", v)))
    return GoStruct("intstr.IntOrString", (("Type", 0), ("IntVal", int(v or 0)), ("StrVal", "")))


def _percent(v: Any) -> int | None:
    if isinstance(v, str) and not is_valid_percent(v):
        return int(v[:-1])
    return None


def _int_or_percent_value(v: Any) -> int:
    p = _percent(v)
    if p is not None:
        return p
    return v if isinstance(v, int) else 0


def _positive_int_or_percent(v: Any, path: str) -> list[FieldError]:
    """``ValidatePositiveIntOrPercent`` plus ``IsNotMoreThan100Percent``."""
    errs: list[FieldError] = []
    if isinstance(v, str):
        errs += [fe.invalid(path, _int_or_string(v), m) for m in is_valid_percent(v)]
        p = _percent(v)
        if p is not None and p > 100:
            errs.append(fe.invalid(path, _int_or_string(v), "must not be greater than 100%"))
    elif isinstance(v, int) and v < 0:
        errs.append(fe.invalid(path, v, IS_NEGATIVE))
    return errs


def _immutable_selector(new: dict[str, Any], old: dict[str, Any]) -> list[FieldError]:
    ns, os_ = _d(new.get("spec")).get("selector"), _d(old.get("spec")).get("selector")
    if ns != os_:
        return [fe.invalid("spec.selector", selector_value(ns), FIELD_IMMUTABLE)]
    return []


# ------------------------------------------------------------------ DaemonSet
def _daemonset_spec(spec: dict[str, Any], qty: QuantityLookup) -> list[FieldError]:
    sel = spec.get("selector")
    errs = validate_label_selector(sel, "spec.selector")
    tpl = _d(spec.get("template"))
    labels = _d(tpl.get("metadata")).get("labels")
    if not _selector_matches(sel, labels):  # a nil selector matches nothing
        errs.append(
            fe.invalid("spec.template.metadata.labels", _labels_value(labels), SELECTOR_MISMATCH)
        )
    if sel is not None and _selector_empty(sel):
        errs.append(
            fe.invalid(
                "spec.selector", selector_value(sel), "empty selector is invalid for daemonset"
            )
        )
    errs += pod_template(tpl, "spec.template", qty)
    errs += _always_restart(tpl, "spec.template.spec", "DaemonSet")
    errs += _nonneg(spec, "minReadySeconds", "spec")
    errs += _daemonset_strategy(_d(spec.get("updateStrategy")))
    errs += _nonneg(spec, "revisionHistoryLimit", "spec")
    return errs


def _daemonset_strategy(st: dict[str, Any]) -> list[FieldError]:
    """``ValidateDaemonSetUpdateStrategy`` and ``ValidateRollingUpdateDaemonSet``."""
    p = "spec.updateStrategy"
    typ = st.get("type")
    if typ == "OnDelete":
        return []
    if typ != "RollingUpdate":
        ru = st.get("rollingUpdate")
        value = GoStruct(
            "apps.DaemonSetUpdateStrategy",
            (
                ("Type", str(typ or "")),
                ("RollingUpdate", fe.GoPtr("apps.RollingUpdateDaemonSet", ru is None)),
            ),
        )
        return [fe.not_supported(p, value, ["RollingUpdate", "OnDelete"])]
    ru = st.get("rollingUpdate")
    if not isinstance(ru, dict):
        return [fe.required(child(p, "rollingUpdate"))]
    rp = child(p, "rollingUpdate")
    mu, ms = ru.get("maxUnavailable"), ru.get("maxSurge")
    errs = _positive_int_or_percent(mu, child(rp, "maxUnavailable"))
    errs += _positive_int_or_percent(ms, child(rp, "maxSurge"))
    has_u, has_s = _int_or_percent_value(mu) != 0, _int_or_percent_value(ms) != 0
    if has_u and has_s:
        errs.append(
            fe.invalid(
                child(rp, "maxSurge"),
                _int_or_string(ms),
                "may not be set when maxUnavailable is non-zero",
            )
        )
    elif not has_u and not has_s:
        errs.append(fe.required(child(rp, "maxUnavailable"), "cannot be 0 when maxSurge is 0"))
    return errs


def _meta(obj: dict[str, Any], name_fn: Any = name_is_dns_subdomain) -> list[FieldError]:
    return validate_object_meta(_d(obj.get("metadata")), True, name_fn)


def daemonset_create(ds: dict[str, Any], qty: QuantityLookup) -> list[FieldError]:
    return _meta(ds) + _daemonset_spec(_d(ds.get("spec")), qty)


def daemonset_update(
    new: dict[str, Any], old: dict[str, Any], qty: QuantityLookup
) -> list[FieldError]:
    """``ValidateDaemonSet`` then ``ValidateDaemonSetUpdate``: the spec is checked twice (a
    spec error is listed twice in the causes, once in the message), then the selector."""
    once = _daemonset_spec(_d(new.get("spec")), qty)
    return once + once + _immutable_selector(new, old)


def daemonset_status(new: dict[str, Any], old: dict[str, Any], qty: Any) -> list[FieldError]:
    st = _d(new.get("status"))
    errs: list[FieldError] = []
    for f in (
        "currentNumberScheduled",
        "numberMisscheduled",
        "desiredNumberScheduled",
        "numberReady",
        "observedGeneration",
        "updatedNumberScheduled",
        "numberAvailable",
        "numberUnavailable",
        "collisionCount",
    ):
        errs += _nonneg(st, f, "status")
    return errs


# ------------------------------------------------------- Deployment, ReplicaSet
def _deployment_spec(spec: dict[str, Any], qty: QuantityLookup) -> list[FieldError]:
    errs = _nonneg(spec, "replicas", "spec")
    errs += _strict_selector(spec, "deployment")
    errs += _replica_template(spec, "Deployment", qty)
    st = _d(spec.get("strategy"))
    typ = st.get("type")
    sp = "spec.strategy"
    if typ == "Recreate":
        if st.get("rollingUpdate") is not None:
            errs.append(
                fe.forbidden(
                    child(sp, "rollingUpdate"),
                    "may not be specified when strategy `type` is 'Recreate'",
                )
            )
    elif typ == "RollingUpdate":
        ru = st.get("rollingUpdate")
        if not isinstance(ru, dict):
            errs.append(
                fe.required(child(sp, "rollingUpdate"), "this should be defaulted and never be nil")
            )
        else:
            rp = child(sp, "rollingUpdate")
            mu, ms = ru.get("maxUnavailable"), ru.get("maxSurge")
            errs += _positive_int_or_percent(mu, child(rp, "maxUnavailable"))
            errs += _positive_int_or_percent(ms, child(rp, "maxSurge"))
            if _int_or_percent_value(mu) == 0 and _int_or_percent_value(ms) == 0:
                errs.append(
                    fe.invalid(
                        child(rp, "maxUnavailable"),
                        _int_or_string(mu),
                        "may not be 0 when `maxSurge` is 0",
                    )
                )
    else:
        value = GoStruct(
            "apps.DeploymentStrategy",
            (
                ("Type", str(typ or "")),
                (
                    "RollingUpdate",
                    fe.GoPtr("apps.RollingUpdateDeployment", st.get("rollingUpdate") is None),
                ),
            ),
        )
        errs.append(fe.not_supported(sp, value, ["Recreate", "RollingUpdate"]))
    errs += _nonneg(spec, "minReadySeconds", "spec")
    errs += _nonneg(spec, "revisionHistoryLimit", "spec")
    pds = spec.get("progressDeadlineSeconds")
    if isinstance(pds, int):
        errs += _nonneg(spec, "progressDeadlineSeconds", "spec")
        if pds <= int(spec.get("minReadySeconds") or 0):
            errs.append(
                fe.invalid(
                    "spec.progressDeadlineSeconds", pds, "must be greater than minReadySeconds"
                )
            )
    return errs


def deployment_create(d: dict[str, Any], qty: QuantityLookup) -> list[FieldError]:
    return _meta(d) + _deployment_spec(_d(d.get("spec")), qty)


def deployment_update(
    new: dict[str, Any], old: dict[str, Any], qty: QuantityLookup
) -> list[FieldError]:
    return _deployment_spec(_d(new.get("spec")), qty) + _immutable_selector(new, old)


def _replicas_status(new: dict[str, Any], old: dict[str, Any], qty: Any) -> list[FieldError]:
    st = _d(new.get("status"))
    errs: list[FieldError] = []
    for f in (
        "replicas",
        "updatedReplicas",
        "readyReplicas",
        "availableReplicas",
        "unavailableReplicas",
        "fullyLabeledReplicas",
        "currentReplicas",
        "observedGeneration",
        "collisionCount",
    ):
        errs += _nonneg(st, f, "status")
    n = int(st.get("replicas") or 0)
    for f in (
        "updatedReplicas",
        "readyReplicas",
        "availableReplicas",
        "fullyLabeledReplicas",
        "currentReplicas",
    ):
        v = st.get(f)
        if isinstance(v, int) and v > n:
            errs.append(fe.invalid(child("status", f), v, "cannot be greater than status.replicas"))
    return errs


deployment_status = _replicas_status
replicaset_status = _replicas_status
statefulset_status = _replicas_status


def _replicaset_spec(spec: dict[str, Any], qty: QuantityLookup) -> list[FieldError]:
    errs = _nonneg(spec, "replicas", "spec") + _nonneg(spec, "minReadySeconds", "spec")
    errs += _strict_selector(spec, "deployment")  # sic: the real message says deployment
    return errs + _replica_template(spec, "ReplicaSet", qty)


def replicaset_create(rs: dict[str, Any], qty: QuantityLookup) -> list[FieldError]:
    return _meta(rs) + _replicaset_spec(_d(rs.get("spec")), qty)


def replicaset_update(
    new: dict[str, Any], old: dict[str, Any], qty: QuantityLookup
) -> list[FieldError]:
    """``ValidateReplicaSet`` then ``ValidateReplicaSetUpdate`` (the spec twice), the selector."""
    once = _replicaset_spec(_d(new.get("spec")), qty)
    return once + once + _immutable_selector(new, old)
