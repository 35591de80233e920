"""ResourceQuota semantics: what a pod or object counts for, and when a create is refused.

Follows the real evaluators and the admission plugin:

- ``pkg/quota/v1/evaluator/core/pods.go``: extended resources (``nvidia.com/gpu``) are
  counted only under ``requests.``; ``limits.<ext>`` and bare ``<ext>`` keys are accepted in
  ``hard`` but never counted and never block. ``count/pods`` counts every pod in storage,
  ``pods`` and the compute resources only pods that ``QuotaV1Pod`` charges: not terminal
  and not past ``deletionTimestamp + deletionGracePeriodSeconds``. Scopes as
  ``podMatchesScopeFunc`` (``CrossNamespacePodAffinity`` only for pods whose affinity terms
  use ``namespaces`` or ``namespaceSelector``; an unknown scope matches nothing).
- ``staging/src/k8s.io/apiserver/pkg/quota/v1/generic/evaluator.go``: object counts
  (``count/configmaps``, legacy ``configmaps``) match no scoped quota.
- ``staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/controller.go``
  (``CheckRequest``): admission reads ``status.hard`` and ``status.used`` (never
  ``spec.hard``), refuses with ``status unknown for quota`` when the quota controller has
  not recorded usage for a tracked resource yet, and returns the new ``status.used`` of
  every quota it charges (the caller writes it, as the plugin does).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from typing import Any

from simcluster.quantity import ZERO, Quantity, format_quantity, parse_quantity

__all__ = [
    "PodQuotaInfo",
    "QuotaDenied",
    "check_request",
    "format_quantity",
    "is_native",
    "parse_quantity",
    "pod_quota_info",
]

_NATIVE_COMPUTE = ("cpu", "memory", "ephemeral-storage")
POD_RESOURCES = frozenset(
    {
        "count/pods",
        "pods",
        "cpu",
        "memory",
        "ephemeral-storage",
        "requests.cpu",
        "requests.memory",
        "requests.ephemeral-storage",
        "limits.cpu",
        "limits.memory",
        "limits.ephemeral-storage",
    }
)
# If a quota tracks one of these, every container must set it (a historical API quirk).
VALIDATION_SET = frozenset(
    {"cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu", "limits.memory"}
)
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
# Legacy object-count names that equal count/<resource> (pkg/quota/v1/evaluator/core).
LEGACY_COUNT = {
    "configmaps": "configmaps",
    "secrets": "secrets",
    "services": "services",
    "persistentvolumeclaims": "persistentvolumeclaims",
    "resourcequotas": "resourcequotas",
    "replicationcontrollers": "replicationcontrollers",
}
# Resources quota never evaluates (quota/v1/install DefaultIgnoredResources).
IGNORED = frozenset({("events", ""), ("events", "events.k8s.io")})


def is_native(name: str) -> bool:
    """Native resources have no domain or live under ``kubernetes.io/``."""
    return "/" not in name or "kubernetes.io/" in name


def is_pod_quota_key(key: str) -> bool:
    """Whether the pod evaluator maintains ``status.used[key]`` (MatchingResources)."""
    if key in POD_RESOURCES:
        return True
    if key.startswith(("hugepages-", "requests.hugepages-")):
        return True
    return key.startswith("requests.") and not is_native(key)


def parse_time(ts: str | None) -> float | None:
    """RFC 3339 (``2025-01-01T00:00:00Z``) to epoch seconds."""
    if not ts:
        return None
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class PodQuotaInfo:
    """Everything quota, eviction and the controllers need from one pod, computed per write."""

    usage: dict[str, Quantity]  # what the pod is charged while QuotaV1Pod holds
    terminal: bool
    priority_class: str
    best_effort: bool
    terminating: bool  # activeDeadlineSeconds >= 0 (the Terminating quota scope)
    container_resources: tuple[tuple[str, frozenset[str], frozenset[str]], ...]
    cross_ns_affinity: bool = False
    phase: str = "Pending"
    ready: bool = False
    deleting: bool = False  # metadata.deletionTimestamp is set
    deletion_deadline: float | None = None  # deletionTimestamp + deletionGracePeriodSeconds

    def counted(self, now: float | None = None) -> bool:
        """``QuotaV1Pod``: terminal pods and pods stuck past their grace period are free."""
        if self.terminal:
            return False
        if self.deletion_deadline is not None:
            return (time.time() if now is None else now) <= self.deletion_deadline
        return True

    def usage_at(self, now: float | None = None) -> dict[str, Quantity]:
        """``PodUsageFunc``: object count always, compute only while :meth:`counted`."""
        if self.terminal or self.counted(now):
            return self.usage
        return _COUNT_ONLY


_ONE = Quantity(Fraction(1))
_COUNT_ONLY: dict[str, Quantity] = {"count/pods": _ONE}


def qadd(a: Quantity, b: Quantity) -> Quantity:
    """``resource.Quantity.Add``: a zero takes the other side's format."""
    return Quantity(a.value + b.value, b.binary if a.value == 0 else a.binary)


def _add(into: dict[str, Quantity], res: dict[str, Quantity]) -> None:
    for k, q in res.items():
        into[k] = qadd(into[k], q) if k in into else q


def _max(into: dict[str, Quantity], res: dict[str, Quantity]) -> None:
    for k, q in res.items():
        if k not in into or q.value > into[k].value:
            into[k] = q


def _parse_list(rl: dict[str, Any] | None) -> dict[str, Quantity]:
    return {k: parse_quantity(v) for k, v in (rl or {}).items()}


def effective(spec: dict[str, Any], which: str) -> dict[str, Quantity]:
    """Effective pod requests or limits: max(init containers, sum of containers) + overhead.

    Restartable (sidecar) init containers add to the sum, as in k8s resourcehelper.PodRequests.
    """
    total: dict[str, Quantity] = {}
    for c in spec.get("containers") or []:
        _add(total, _parse_list((c.get("resources") or {}).get(which)))
    sidecars: dict[str, Quantity] = {}
    init_max: dict[str, Quantity] = {}
    for c in spec.get("initContainers") or []:
        res = _parse_list((c.get("resources") or {}).get(which))
        if c.get("restartPolicy") == "Always":
            _add(sidecars, res)
            _max(init_max, sidecars)
        else:
            tmp = dict(res)
            _add(tmp, sidecars)
            _max(init_max, tmp)
    _add(total, sidecars)
    _max(total, init_max)
    _add(total, _parse_list(spec.get("overhead")))
    return total


def _cross_ns_terms(terms: Any, weighted: bool) -> bool:
    for t in terms or []:
        term = (t.get("podAffinityTerm") or {}) if weighted else t
        if term.get("namespaces") or term.get("namespaceSelector") is not None:
            return True
    return False


def uses_cross_namespace_affinity(spec: dict[str, Any]) -> bool:
    """``usesCrossNamespacePodAffinity`` of pods.go."""
    aff = spec.get("affinity") or {}
    for kind in ("podAffinity", "podAntiAffinity"):
        a = aff.get(kind) or {}
        if _cross_ns_terms(a.get("requiredDuringSchedulingIgnoredDuringExecution"), False):
            return True
        if _cross_ns_terms(a.get("preferredDuringSchedulingIgnoredDuringExecution"), True):
            return True
    return False


def _is_ready(status: dict[str, Any]) -> bool:
    for c in status.get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


_INFO_CACHE: dict[str, PodQuotaInfo] = {}


def pod_quota_info(pod: dict[str, Any]) -> PodQuotaInfo:
    """Quota-relevant summary of a pod (memoized: large fleets share a few shapes)."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    meta = pod.get("metadata") or {}
    phase = status.get("phase") or "Pending"
    deletion = meta.get("deletionTimestamp")
    grace = meta.get("deletionGracePeriodSeconds")
    key_src = (
        [(c.get("name"), c.get("resources")) for c in spec.get("containers") or []],
        [
            (c.get("name"), c.get("resources"), c.get("restartPolicy"))
            for c in spec.get("initContainers") or []
        ],
        spec.get("overhead"),
        phase,
        spec.get("priorityClassName") or "",
        spec.get("activeDeadlineSeconds"),
        bool(spec.get("affinity")) and uses_cross_namespace_affinity(spec),
        _is_ready(status),
        deletion,
        grace,
    )
    key = repr(key_src)
    hit = _INFO_CACHE.get(key)
    if hit is not None:
        return hit
    info = _compute_info(spec, phase, key_src[6], key_src[7], deletion, grace)
    if len(_INFO_CACHE) < 100_000:
        _INFO_CACHE[key] = info
    return info


def _compute_info(
    spec: dict[str, Any],
    phase: str,
    cross_ns: bool,
    ready: bool,
    deletion: str | None,
    grace: Any,
) -> PodQuotaInfo:
    terminal = phase in TERMINAL_PHASES
    usage: dict[str, Quantity] = {"count/pods": _ONE}
    requests = effective(spec, "requests")
    limits = effective(spec, "limits")
    if not terminal:
        usage["pods"] = _ONE
        for r, q in requests.items():
            if r in _NATIVE_COMPUTE or r.startswith("hugepages-"):
                usage[r] = q
                usage[f"requests.{r}"] = q
            elif not is_native(r) and not r.startswith("requests."):
                usage[f"requests.{r}"] = q
        for r, q in limits.items():
            if r in _NATIVE_COMPUTE:
                usage[f"limits.{r}"] = q
    best_effort = True
    containers = []
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        res = c.get("resources") or {}
        req = frozenset(res.get("requests") or {})
        lim = frozenset(res.get("limits") or {})
        if {"cpu", "memory"} & (req | lim):
            best_effort = False
        containers.append((str(c.get("name") or ""), req, lim))
    deadline_s = spec.get("activeDeadlineSeconds")
    deletion_at = parse_time(deletion)
    deadline = None
    if deletion_at is not None and grace is not None:
        deadline = deletion_at + int(grace)
    return PodQuotaInfo(
        usage=usage,
        terminal=terminal,
        priority_class=spec.get("priorityClassName") or "",
        best_effort=best_effort,
        terminating=deadline_s is not None and int(deadline_s) >= 0,
        container_resources=tuple(containers),
        cross_ns_affinity=cross_ns,
        phase=phase,
        ready=ready,
        deleting=deletion is not None,
        deletion_deadline=deadline,
    )


def scope_selectors(quota: dict[str, Any]) -> list[tuple[str, str, list[str]]]:
    """``getScopeSelectorsFromQuota``: ``spec.scopes`` as Exists, then ``scopeSelector``."""
    spec = quota.get("spec") or {}
    out = [(s, "Exists", []) for s in spec.get("scopes") or []]
    for e in (spec.get("scopeSelector") or {}).get("matchExpressions") or []:
        out.append((e.get("scopeName", ""), e.get("operator", ""), e.get("values") or []))
    return out


def quota_matches_pod(quota: dict[str, Any], info: PodQuotaInfo) -> bool:
    """Whether every scope of a (possibly scoped) quota selects this pod."""
    return all(_scope_matches(s, op, vals, info) for s, op, vals in scope_selectors(quota))


def _scope_matches(scope: str, op: str, values: list[str], info: PodQuotaInfo) -> bool:
    if scope == "Terminating":
        return info.terminating
    if scope == "NotTerminating":
        return not info.terminating
    if scope == "BestEffort":
        return info.best_effort
    if scope == "NotBestEffort":
        return not info.best_effort
    if scope == "CrossNamespacePodAffinity":
        return info.cross_ns_affinity
    if scope == "PriorityClass":
        pc = info.priority_class
        if op == "Exists":
            return pc != ""
        # a label selector over {"PriorityClass": pc} (no label when pc is empty)
        if op == "In":
            return pc != "" and pc in values
        if op == "NotIn":
            return pc == "" or pc not in values
        if op == "DoesNotExist":
            return pc == ""
        return False
    return False


def count_key(resource: str, group: str, hard_key: str) -> bool:
    """Whether ``hard_key`` is the object-count key for ``resource``."""
    full = f"count/{resource}" + (f".{group}" if group else "")
    return hard_key == full or (not group and LEGACY_COUNT.get(hard_key) == resource)


def pod_keys(hard: dict[str, Any]) -> list[str]:
    """Keys of a ``hard`` list that the pod evaluator maintains."""
    return [k for k in hard if is_pod_quota_key(k)]


def calculate_pod_usage(
    quota: dict[str, Any], infos: list[PodQuotaInfo], now: float | None = None
) -> dict[str, Quantity]:
    """``CalculateUsageStats`` of the pod evaluator for the pod keys of ``spec.hard``."""
    keys = pod_keys((quota.get("spec") or {}).get("hard") or {})
    totals: dict[str, Quantity] = {k: ZERO for k in keys}
    if not keys:
        return totals
    sels = scope_selectors(quota)
    now = time.time() if now is None else now
    for info in infos:
        if not all(_scope_matches(s, op, vals, info) for s, op, vals in sels):
            continue
        usage = info.usage_at(now)
        for k in keys:
            q = usage.get(k)
            if q is not None:
                totals[k] = qadd(totals[k], q)
    return totals


def equal_lists(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """``quota.Equals`` on two ResourceLists given as strings."""
    if set(a) != set(b):
        return False
    try:
        return all(parse_quantity(a[k]).value == parse_quantity(b[k]).value for k in a)
    except ValueError:
        return a == b


class QuotaDenied(Exception):
    """Admission refused the create; ``str(exc)`` is the reason after ``is forbidden:``."""


def _pretty(d: dict[str, Quantity]) -> str:
    return ",".join(f"{k}={d[k]}" for k in sorted(d))


def _q(v: Any) -> Quantity:
    try:
        return parse_quantity(v)
    except ValueError:
        return ZERO


def check_request(
    resource: str,
    group: str,
    quotas: list[dict[str, Any]],
    info: PodQuotaInfo | None,
    now: float | None = None,
) -> list[tuple[int, dict[str, str]]]:
    """``CheckRequest`` for a create; returns ``(index, new status.used)`` per charged quota.

    ``info`` is the incoming pod for ``pods``; other resources are object counts. Raises
    :class:`QuotaDenied` with the plugin's error text.
    """
    if (resource, group) in IGNORED:
        return []
    if info is not None:

        def matching(k: str) -> bool:
            return is_pod_quota_key(k)

        def scope_ok(q: dict[str, Any]) -> bool:
            return quota_matches_pod(q, info)

        usage = info.usage_at(now)
    else:

        def matching(k: str) -> bool:
            return count_key(resource, group, k)

        def scope_ok(q: dict[str, Any]) -> bool:
            return not scope_selectors(q)  # MatchesNoScopeFunc

        usage = {f"count/{resource}" + (f".{group}" if group else ""): _ONE}
        if not group and resource in LEGACY_COUNT.values():
            usage[resource] = _ONE
    interesting: list[int] = []
    for i, quota in enumerate(quotas):
        status = quota.get("status") or {}
        hard = status.get("hard") or {}
        restricted = [k for k in hard if matching(k)]
        if not restricted or not scope_ok(quota):
            continue
        name = quota["metadata"]["name"]
        if info is not None:
            missing = _missing_constraints(set(restricted) & VALIDATION_SET, info)
            if missing:
                raise QuotaDenied(f"failed quota: {name}: {missing}")
        used = status.get("used") or {}
        if any(k not in used for k in restricted):
            raise QuotaDenied(
                f"status unknown for quota: {name}, resources: {','.join(sorted(restricted))}"
            )
        interesting.append(i)
    delta = {k: v for k, v in usage.items() if v.value != 0}
    if not interesting or not delta:
        return []
    out: list[tuple[int, dict[str, str]]] = []
    for i in interesting:
        quota = quotas[i]
        status = quota.get("status") or {}
        hard = status.get("hard") or {}
        used_s = dict(status.get("used") or {})
        requested = {k: v for k, v in delta.items() if k in hard}
        if not requested:
            continue
        new_used = {k: _q(v) for k, v in used_s.items()}
        for k, v in requested.items():
            new_used[k] = qadd(new_used[k], v) if k in new_used else v
        exceeded = [k for k in requested if new_used[k].value > _q(hard[k]).value]
        if exceeded:
            failed_req = {k: requested[k] for k in exceeded}
            failed_used = {k: _q(used_s[k]) for k in exceeded if k in used_s}
            failed_hard = {k: _q(hard[k]) for k in exceeded}
            raise QuotaDenied(
                f"exceeded quota: {quota['metadata']['name']}, "
                f"requested: {_pretty(failed_req)}, used: {_pretty(failed_used)}, "
                f"limited: {_pretty(failed_hard)}"
            )
        new_s = {k: str(v) for k, v in new_used.items()}
        for k, v in used_s.items():
            if k not in requested:
                new_s[k] = v  # untouched entries keep their text
        if not equal_lists(new_s, used_s):
            out.append((i, new_s))
    return out


def _missing_constraints(required: set[str], info: PodQuotaInfo) -> str:
    """``podEvaluator.Constraints``: cpu/memory quotas need them set on every container."""
    if not required:
        return ""
    missing: dict[str, set[str]] = {}
    for cname, req, lim in info.container_resources:
        have = set()
        for r in req:
            if r in ("cpu", "memory"):
                have |= {r, f"requests.{r}"}
        for r in lim:
            if r in ("cpu", "memory"):
                have.add(f"limits.{r}")
        for r in required - have:
            missing.setdefault(r, set()).add(cname)
    if not missing:
        return ""
    parts = [f"{r} for: {','.join(sorted(missing[r]))}" for r in sorted(missing)]
    return "must specify " + "; ".join(parts)
