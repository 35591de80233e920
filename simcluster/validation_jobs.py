"""StatefulSets, Jobs and CronJobs, as validated in v1.32.

Follows ``pkg/apis/apps/validation/validation.go`` (ValidateStatefulSet[Spec|Update]) and
``pkg/apis/batch/validation/validation.go`` (ValidateJob, ValidateJobSpec, validateJobSpec
with its restartPolicy rule, ValidateJobSpecUpdate, ValidateCronJobCreate,
validateCronJobSpec), the shared template checks in :mod:`simcluster.validation_apps`.
"""

from __future__ import annotations

from typing import Any

from simcluster import fielderrors as fe
from simcluster.fielderrors import FieldError, GoStruct, child
from simcluster.validation_apps import (
    SELECTOR_MISMATCH,
    _d,
    _labels_value,
    _meta,
    _nonneg,
    _selector_empty,
    _selector_matches,
    pod_template,
    selector_value,
)
from simcluster.validation_meta import (
    FIELD_IMMUTABLE,
    validate_annotations,
    validate_label_selector,
    validate_labels,
)
from simcluster.validation_names import name_is_dns_label
from simcluster.validation_resources import QuantityLookup

_ALWAYS = ["Always"]


# ---------------------------------------------------------------- StatefulSet
def _statefulset_spec(spec: dict[str, Any], qty: QuantityLookup) -> list[FieldError]:
    errs: list[FieldError] = []
    pmp = spec.get("podManagementPolicy")
    if not pmp:
        errs.append(fe.required("spec.podManagementPolicy"))
    elif pmp not in ("OrderedReady", "Parallel"):
        errs.append(
            fe.invalid("spec.podManagementPolicy", pmp, "must be 'OrderedReady' or 'Parallel'")
        )
    st = _d(spec.get("updateStrategy"))
    typ = st.get("type")
    if not typ:
        errs.append(fe.required("spec.updateStrategy"))
    elif typ == "OnDelete" and st.get("rollingUpdate") is not None:
        errs.append(
            fe.invalid(
                "spec.updateStrategy.rollingUpdate",
                fe.GoPtr("apps.RollingUpdateStatefulSetStrategy", False),
                "only allowed for updateStrategy 'RollingUpdate'",
            )
        )
    elif typ == "RollingUpdate":
        errs += _nonneg(
            _d(st.get("rollingUpdate")), "partition", "spec.updateStrategy.rollingUpdate"
        )
    elif typ != "OnDelete":
        errs.append(
            fe.invalid(
                "spec.updateStrategy",
                GoStruct(
                    "apps.StatefulSetUpdateStrategy",
                    (
                        ("Type", str(typ)),
                        (
                            "RollingUpdate",
                            fe.GoPtr(
                                "apps.RollingUpdateStatefulSetStrategy",
                                st.get("rollingUpdate") is None,
                            ),
                        ),
                    ),
                ),
                "must be 'RollingUpdate' or 'OnDelete'",
            )
        )
    pol = _d(spec.get("persistentVolumeClaimRetentionPolicy"))
    for f in ("whenDeleted", "whenScaled"):
        if f in pol and pol[f] not in ("Retain", "Delete"):
            errs.append(
                fe.not_supported(
                    child("spec.persistentVolumeClaimRetentionPolicy", f),
                    str(pol[f]),
                    ["Retain", "Delete"],
                )
            )
    errs += _nonneg(spec, "replicas", "spec") + _nonneg(spec, "minReadySeconds", "spec")
    sel = spec.get("selector")
    if sel is None:
        errs.append(fe.required("spec.selector"))
    else:
        errs += validate_label_selector(sel, "spec.selector")
        if _selector_empty(sel):
            errs.append(
                fe.invalid(
                    "spec.selector",
                    selector_value(sel),
                    "empty selector is invalid for statefulset",
                )
            )
    tpl = _d(spec.get("template"))
    labels = _d(tpl.get("metadata")).get("labels")
    if sel is not None and not _selector_empty(sel) and not _selector_matches(sel, labels):
        errs.append(
            fe.invalid("spec.template.metadata.labels", _labels_value(labels), SELECTOR_MISMATCH)
        )
    # ValidatePodTemplateSpecForStatefulSet: labels and annotations only (no pod spec)
    tmeta = _d(tpl.get("metadata"))
    errs += validate_labels(tmeta.get("labels"), "spec.template.labels")
    errs += validate_annotations(tmeta.get("annotations"), "spec.template.annotations")
    tspec = _d(tpl.get("spec"))
    rp = tspec.get("restartPolicy")
    if rp != "Always":
        errs.append(fe.not_supported("spec.template.spec.restartPolicy", str(rp or ""), _ALWAYS))
    if tspec.get("activeDeadlineSeconds") is not None:
        errs.append(
            fe.forbidden(
                "spec.template.spec.activeDeadlineSeconds",
                "activeDeadlineSeconds in StatefulSet is not Supported",
            )
        )
    return errs


def statefulset_create(ss: dict[str, Any], qty: QuantityLookup) -> list[FieldError]:
    return _meta(ss, name_is_dns_label) + _statefulset_spec(_d(ss.get("spec")), qty)


_STS_MUTABLE = (
    "replicas",
    "template",
    "updateStrategy",
    "minReadySeconds",
    "ordinals",
    "persistentVolumeClaimRetentionPolicy",
)


def statefulset_update(
    new: dict[str, Any], old: dict[str, Any], qty: QuantityLookup
) -> list[FieldError]:
    """``ValidateStatefulSet`` then ``ValidateStatefulSetUpdate`` (the spec twice)."""
    ns, os_ = _d(new.get("spec")), _d(old.get("spec"))
    once = _statefulset_spec(ns, qty)
    errs = once + once
    rest_new = {k: v for k, v in ns.items() if k not in _STS_MUTABLE}
    rest_old = {k: v for k, v in os_.items() if k not in _STS_MUTABLE}
    if rest_new != rest_old:
        errs.append(
            fe.forbidden(
                "spec",
                "updates to statefulset spec for fields other than 'replicas', 'ordinals', "
                "'template', "
                "'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' "
                "are forbidden",
            )
        )
    return errs


# ------------------------------------------------------------------------ Job
def _job_spec(spec: dict[str, Any], path: str, qty: QuantityLookup) -> list[FieldError]:
    """``validateJobSpec`` (the part a CronJob's jobTemplate shares)."""
    errs: list[FieldError] = []
    for f in ("parallelism", "completions", "activeDeadlineSeconds", "backoffLimit"):
        errs += _nonneg(spec, f, path)
    errs += _nonneg(spec, "ttlSecondsAfterFinished", path)
    mode = spec.get("completionMode")
    if mode is not None and mode not in ("NonIndexed", "Indexed"):
        errs.append(
            fe.not_supported(child(path, "completionMode"), str(mode), ["NonIndexed", "Indexed"])
        )
    if mode == "Indexed" and spec.get("completions") is None:
        errs.append(fe.required(child(path, "completions"), "when completion mode is Indexed"))
    prp = spec.get("podReplacementPolicy")
    if prp is not None and prp not in ("TerminatingOrFailed", "Failed"):
        errs.append(
            fe.not_supported(
                child(path, "podReplacementPolicy"), str(prp), ["Failed", "TerminatingOrFailed"]
            )
        )
    tpl = _d(spec.get("template"))
    tp = child(path, "template")
    errs += pod_template(tpl, tp, qty)
    rp = _d(tpl.get("spec")).get("restartPolicy")
    rpp = child(tp, "spec", "restartPolicy")
    if rp in ("Always", "", None):
        errs.append(fe.required(rpp, 'valid values: "OnFailure", "Never"'))
    elif rp not in ("OnFailure", "Never"):
        errs.append(fe.not_supported(rpp, str(rp), ["OnFailure", "Never"]))
    elif spec.get("podFailurePolicy") is not None and rp != "Never":
        errs.append(
            fe.invalid(rpp, rp, 'only "Never" is supported when podFailurePolicy is specified')
        )
    return errs


def _job_selector(spec: dict[str, Any]) -> list[FieldError]:
    """``ValidateJobSpec``'s selector part: required, valid, matching the template."""
    sel = spec.get("selector")
    if sel is None:
        errs = [fe.required("spec.selector")]
    else:
        errs = validate_label_selector(sel, "spec.selector")
    labels = _d(_d(_d(spec.get("template")).get("metadata"))).get("labels")
    if sel is not None and not _selector_matches(sel, labels):
        errs.append(
            fe.invalid("spec.template.metadata.labels", _labels_value(labels), SELECTOR_MISMATCH)
        )
    return errs


def job_create(job: dict[str, Any], qty: QuantityLookup) -> list[FieldError]:
    spec = _d(job.get("spec"))
    return _meta(job) + _job_spec(spec, "spec", qty) + _job_selector(spec)


_JOB_IMMUTABLE = (
    "selector",
    "template",
    "completionMode",
    "podFailurePolicy",
    "backoffLimitPerIndex",
    "managedBy",
)


def job_update(new: dict[str, Any], old: dict[str, Any], qty: QuantityLookup) -> list[FieldError]:
    """The strategy's ``ValidateJob`` plus ``ValidateJobUpdate``, whose
    ``ValidateJobSpecUpdate`` runs ``ValidateJobSpec`` again (a spec error is listed twice in
    the causes, once in the message), then the immutable fields in its order."""
    ns, os_ = _d(new.get("spec")), _d(old.get("spec"))
    once = _job_spec(ns, "spec", qty) + _job_selector(ns)
    errs = once + once
    if ns.get("completions") != os_.get("completions"):  # validateCompletions
        indexed = ns.get("completionMode") == "Indexed"
        if not indexed:
            errs.append(fe.invalid("spec.completions", ns.get("completions"), FIELD_IMMUTABLE))
        elif ns.get("completions") is not None and ns["completions"] != ns.get("parallelism"):
            errs.append(
                fe.invalid(
                    "spec.completions",
                    ns["completions"],
                    "can only be modified in tandem with spec.parallelism",
                )
            )
    for f in _JOB_IMMUTABLE:
        if f == "template" and _scheduling_directives_only(new, old):
            continue
        if ns.get(f) != os_.get(f):
            value: Any = ns.get(f)
            if f == "selector":
                value = selector_value(value)
            elif f == "template":  # the real message prints the whole internal struct
                value = GoStruct("core.PodTemplateSpec", ())
            errs.append(fe.invalid(child("spec", f), value, FIELD_IMMUTABLE))
    return errs


def _scheduling_directives_only(new: dict[str, Any], old: dict[str, Any]) -> bool:
    """``AllowMutableSchedulingDirectives`` (pkg/registry/batch/job/strategy.go: the old Job is
    suspended and never started): the template's node affinity, nodeSelector, tolerations,
    labels, annotations and schedulingGates may change (ValidateJobSpecUpdate)."""
    if not (_d(old.get("spec")).get("suspend") and not _d(old.get("status")).get("startTime")):
        return False

    def masked(job: dict[str, Any]) -> dict[str, Any]:
        t = dict(_d(_d(job.get("spec")).get("template")))
        t["metadata"] = {
            k: v for k, v in _d(t.get("metadata")).items() if k not in ("labels", "annotations")
        }
        drop = ("affinity", "nodeSelector", "tolerations", "schedulingGates")
        t["spec"] = {k: v for k, v in _d(t.get("spec")).items() if k not in drop}
        return t

    return masked(new) == masked(old)


def job_status(new: dict[str, Any], old: dict[str, Any], qty: Any) -> list[FieldError]:
    st = _d(new.get("status"))
    errs: list[FieldError] = []
    for f in ("active", "succeeded", "failed", "ready", "terminating"):
        errs += _nonneg(st, f, "status")
    return errs


# -------------------------------------------------------------------- CronJob
def _cronjob_spec(spec: dict[str, Any], qty: QuantityLookup) -> list[FieldError]:
    errs: list[FieldError] = []
    if not spec.get("schedule"):
        errs.append(fe.required("spec.schedule"))
    cp = spec.get("concurrencyPolicy")
    if cp not in ("Allow", "Forbid", "Replace"):
        p = "spec.concurrencyPolicy"
        errs.append(
            fe.required(p)
            if not cp
            else fe.not_supported(p, str(cp), ["Allow", "Forbid", "Replace"])
        )
    for f in ("startingDeadlineSeconds", "successfulJobsHistoryLimit", "failedJobsHistoryLimit"):
        errs += _nonneg(spec, f, "spec")
    jt = _d(spec.get("jobTemplate"))
    jmeta = _d(jt.get("metadata"))
    errs += validate_labels(jmeta.get("labels"), "spec.jobTemplate.labels")
    errs += validate_annotations(jmeta.get("annotations"), "spec.jobTemplate.annotations")
    errs += _job_spec(_d(jt.get("spec")), "spec.jobTemplate.spec", qty)
    return errs


def cronjob_create(cj: dict[str, Any], qty: QuantityLookup) -> list[FieldError]:
    errs = _meta(cj)
    name = str(_d(cj.get("metadata")).get("name") or "")
    if len(name) > 52:  # DNS1035LabelMaxLength - 11: the Jobs get a time suffix
        errs.append(fe.invalid("metadata.name", name, "must be no more than 52 characters"))
    return errs + _cronjob_spec(_d(cj.get("spec")), qty)


def cronjob_update(
    new: dict[str, Any], old: dict[str, Any], qty: QuantityLookup
) -> list[FieldError]:
    return _cronjob_spec(_d(new.get("spec")), qty)
