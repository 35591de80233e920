"""Workload types (apps/v1, batch/v1, networking.k8s.io/v1): defaulting and the strategies.

Defaulting runs in the decode step (:func:`simcluster.validation.normalize`), so a create,
an update and the merged result of a patch or apply are defaulted alike, as the real
server's decoder does:

- ``pkg/apis/apps/v1/defaults.go``: DaemonSet ``updateStrategy`` (RollingUpdate with
  ``maxUnavailable: 1``, ``maxSurge: 0``), ``revisionHistoryLimit: 10``; Deployment
  ``replicas: 1``, ``strategy`` (RollingUpdate, ``25%``/``25%``), ``revisionHistoryLimit:
  10``, ``progressDeadlineSeconds: 600``; StatefulSet ``replicas: 1``,
  ``podManagementPolicy: OrderedReady``, ``updateStrategy`` (RollingUpdate, ``partition:
  0``), ``revisionHistoryLimit: 10``, ``persistentVolumeClaimRetentionPolicy`` (Retain,
  Retain); ReplicaSet ``replicas: 1``.
- ``pkg/apis/batch/v1/defaults.go``: Job ``completions``/``parallelism`` 1, ``backoffLimit:
  6``, ``completionMode: NonIndexed``, ``suspend: false``, ``podReplacementPolicy``
  (``TerminatingOrFailed``, ``Failed`` with a pod failure policy), ``manualSelector``
  untouched, labels copied from the template when the Job has none; CronJob
  ``concurrencyPolicy: Allow``, ``suspend: false``, history limits 3 and 1.
- ``pkg/apis/core/v1/defaults.go`` ``SetDefaults_PodSpec`` for every pod template:
  ``restartPolicy: Always``, ``dnsPolicy: ClusterFirst``, ``terminationGracePeriodSeconds:
  30``, ``schedulerName: default-scheduler`` (not ``SetDefaults_Pod``'s requests from
  limits: that is for Pods only).

The strategies (``pkg/registry/apps/*/strategy.go``, ``pkg/registry/batch/*/strategy.go``,
``pkg/registry/networking/ingress*/strategy.go``): ``PrepareForCreate`` sets ``generation:
1`` and clears the status (to the JSON of the empty Go struct), Jobs get their generated
selector and template labels (``generateSelectorIfNeeded``); ``PrepareForUpdate`` keeps the
status on spec writes and bumps ``generation`` when the spec changes (Deployments: the
annotations too).
"""

from __future__ import annotations

import copy
from typing import Any

WORKLOADS = frozenset(
    {
        "daemonsets",
        "deployments",
        "replicasets",
        "statefulsets",
        "jobs",
        "cronjobs",
        "ingresses",
        "ingressclasses",
    }
)
# the empty status each type's Go struct serializes to (fields without omitempty)
_EMPTY_STATUS: dict[str, dict[str, Any]] = {
    "daemonsets": {
        "currentNumberScheduled": 0,
        "numberMisscheduled": 0,
        "desiredNumberScheduled": 0,
        "numberReady": 0,
    },
    "deployments": {},
    "replicasets": {"replicas": 0},
    "statefulsets": {"replicas": 0, "availableReplicas": 0},
    "jobs": {},
    "cronjobs": {},
    "ingresses": {"loadBalancer": {}},
}
TEMPLATE_GENERATION = "deprecated.daemonset.template.generation"
LEGACY_JOB_NAME, JOB_NAME = "job-name", "batch.kubernetes.io/job-name"
LEGACY_CONTROLLER_UID, CONTROLLER_UID = "controller-uid", "batch.kubernetes.io/controller-uid"


def _d(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj.get("spec")
    if spec is None:
        spec = obj["spec"] = {}
    return _d(spec)


def default_pod_spec(spec: Any) -> None:
    """``SetDefaults_PodSpec`` (what the simulator defaults for pods too, see pods.py)."""
    if not isinstance(spec, dict):
        return
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    if spec.get("serviceAccount") and not spec.get("serviceAccountName"):
        spec["serviceAccountName"] = spec["serviceAccount"]  # v1 conversion
    if spec.get("serviceAccountName"):
        spec["serviceAccount"] = spec["serviceAccountName"]


def _template(spec: dict[str, Any]) -> dict[str, Any]:
    tpl = spec.get("template")
    if not isinstance(tpl, dict):
        return {}
    if isinstance(tpl.get("spec"), dict):
        default_pod_spec(tpl["spec"])
    return tpl


def _rolling(strategy: dict[str, Any], type_name: str) -> dict[str, Any] | None:
    if not strategy.get("type"):
        strategy["type"] = type_name
    if strategy["type"] != type_name:
        return None
    ru = strategy.get("rollingUpdate")
    if not isinstance(ru, dict):
        ru = strategy["rollingUpdate"] = {}
    return ru


def default(resource: str, obj: dict[str, Any]) -> None:
    """Apply the v1 defaults of ``resource`` to a decoded object (in place)."""
    if resource in ("ingresses", "ingressclasses"):
        return
    spec = _spec(obj)
    if resource == "daemonsets":
        _template(spec)
        st = spec.setdefault("updateStrategy", {})
        ru = _rolling(st, "RollingUpdate") if isinstance(st, dict) else None
        if ru is not None:
            ru.setdefault("maxUnavailable", 1)
            ru.setdefault("maxSurge", 0)
        spec.setdefault("revisionHistoryLimit", 10)
    elif resource == "deployments":
        _template(spec)
        spec.setdefault("replicas", 1)
        st = spec.setdefault("strategy", {})
        ru = _rolling(st, "RollingUpdate") if isinstance(st, dict) else None
        if ru is not None:
            ru.setdefault("maxUnavailable", "25%")
            ru.setdefault("maxSurge", "25%")
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
    elif resource == "replicasets":
        _template(spec)
        spec.setdefault("replicas", 1)
    elif resource == "statefulsets":
        _template(spec)
        spec.setdefault("podManagementPolicy", "OrderedReady")
        st = spec.setdefault("updateStrategy", {})
        if isinstance(st, dict) and not st.get("type"):
            st["type"] = "RollingUpdate"
            if not isinstance(st.get("rollingUpdate"), dict):
                st["rollingUpdate"] = {}
        if (
            isinstance(st, dict)
            and st.get("type") == "RollingUpdate"
            and isinstance(st.get("rollingUpdate"), dict)
        ):
            st["rollingUpdate"].setdefault("partition", 0)
        spec.setdefault("replicas", 1)
        spec.setdefault("revisionHistoryLimit", 10)
        pol = spec.setdefault("persistentVolumeClaimRetentionPolicy", {})
        if isinstance(pol, dict):
            pol.setdefault("whenDeleted", "Retain")
            pol.setdefault("whenScaled", "Retain")
    elif resource == "jobs":
        _default_job_spec(spec)
        labels = _d(_d(spec.get("template")).get("metadata")).get("labels")
        meta = _d(obj.get("metadata"))
        if labels and not meta.get("labels"):
            meta["labels"] = dict(labels)
    elif resource == "cronjobs":
        spec.setdefault("concurrencyPolicy", "Allow")
        spec.setdefault("suspend", False)
        spec.setdefault("successfulJobsHistoryLimit", 3)
        spec.setdefault("failedJobsHistoryLimit", 1)
        jt = spec.get("jobTemplate")
        if isinstance(jt, dict) and isinstance(jt.get("spec"), dict):
            _template(jt["spec"])  # SetDefaults_Job is for Jobs, not templates


def _default_job_spec(spec: dict[str, Any]) -> None:
    _template(spec)
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
        spec["parallelism"] = 1
    spec.setdefault("parallelism", 1)
    if spec.get("backoffLimit") is None:
        spec["backoffLimit"] = 2147483647 if spec.get("backoffLimitPerIndex") is not None else 6
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    pfp = spec.get("podFailurePolicy")
    for rule in _d(pfp).get("rules") or []:
        for pat in _d(rule).get("onPodConditions") or []:
            if isinstance(pat, dict) and not pat.get("status"):
                pat["status"] = "True"
    if spec.get("podReplacementPolicy") is None:
        spec["podReplacementPolicy"] = "Failed" if pfp is not None else "TerminatingOrFailed"


# ---------------------------------------------------------------- strategies
def prepare_create(resource: str, obj: dict[str, Any]) -> None:
    """``PrepareForCreate``: generation 1, empty status, a Job's generated selector."""
    obj["metadata"]["generation"] = 1
    if resource in _EMPTY_STATUS:
        obj["status"] = copy.deepcopy(_EMPTY_STATUS[resource])
    if resource == "daemonsets":  # Spec.TemplateGeneration, as apps/v1 converts it
        obj["metadata"].setdefault("annotations", {})[TEMPLATE_GENERATION] = "1"
    if resource == "jobs":
        _generate_selector(obj)
        # the stored object is read back through the decoder, whose SetDefaults_Job now
        # sees the generated template labels: a Job without labels answers with them
        labels = _d(_d(_d(obj["spec"].get("template")).get("metadata")).get("labels"))
        if labels and not obj["metadata"].get("labels"):
            obj["metadata"]["labels"] = dict(labels)


def _generate_selector(job: dict[str, Any]) -> None:
    """``generateSelectorIfNeeded`` (pkg/registry/batch/job/strategy.go)."""
    spec = _spec(job)
    if spec.get("manualSelector") is True:
        return
    meta = job["metadata"]
    tpl = spec.get("template")
    if not isinstance(tpl, dict):
        return
    if not isinstance(tpl.get("metadata"), dict):
        spec["template"] = tpl = {
            "metadata": {},
            **{k: v for k, v in tpl.items() if k != "metadata"},
        }
    tmeta = tpl["metadata"]
    labels = tmeta.get("labels")
    if not isinstance(labels, dict):
        labels = tmeta["labels"] = {}
    for k in (LEGACY_JOB_NAME, JOB_NAME):
        labels.setdefault(k, str(meta.get("name") or ""))
    for k in (LEGACY_CONTROLLER_UID, CONTROLLER_UID):
        labels.setdefault(k, meta["uid"])
    sel = spec.get("selector")
    if not isinstance(sel, dict):
        sel = spec["selector"] = {}
    ml = sel.get("matchLabels")
    if not isinstance(ml, dict):
        ml = sel["matchLabels"] = {}
    ml.setdefault(CONTROLLER_UID, meta["uid"])


def prepare_update(resource: str, old: dict[str, Any], new: dict[str, Any]) -> None:
    """``PrepareForUpdate`` of a spec write: bump ``generation`` when the spec changed."""
    gen = int(old["metadata"].get("generation") or 0)
    changed = (new.get("spec") or {}) != (old.get("spec") or {})
    if resource == "deployments":
        changed = changed or (new["metadata"].get("annotations") or {}) != (
            old["metadata"].get("annotations") or {}
        )
    new["metadata"]["generation"] = gen + 1 if changed else gen
    if resource == "daemonsets":
        # "update is not allowed to set TemplateGeneration": the old one, +1 on a new template
        ann = old["metadata"].get("annotations") or {}
        tg = int(ann.get(TEMPLATE_GENERATION) or 1)
        if _d(new.get("spec")).get("template") != _d(old.get("spec")).get("template"):
            tg += 1
        new["metadata"].setdefault("annotations", {})[TEMPLATE_GENERATION] = str(tg)
