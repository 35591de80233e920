"""ResourceQuota semantics: what a pod counts for, and when a create is refused.

Mirrors kubernetes/pkg/quota/v1/evaluator/core/pods.go: extended resources (``nvidia.com/gpu``,
``nvidia.com/mig-1g.10gb``) are counted only under the ``requests.`` prefix; ``limits.<ext>``
and bare ``<ext>`` keys are accepted in ``spec.hard`` but never counted and never block.
``count/pods`` counts every pod in storage, ``pods`` only non-terminal ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from simcluster.quantity import ZERO, Quantity, format_quantity, parse_quantity

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
# Legacy object-count names that equal count/<resource>.
LEGACY_COUNT = {
    "configmaps": "configmaps",
    "secrets": "secrets",
    "services": "services",
    "persistentvolumeclaims": "persistentvolumeclaims",
    "resourcequotas": "resourcequotas",
    "replicationcontrollers": "replicationcontrollers",
}


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


@dataclass(frozen=True, slots=True)
class PodQuotaInfo:
    """Everything quota needs from one pod, computed once per pod write."""

    usage: dict[str, Quantity]
    terminal: bool
    priority_class: str
    best_effort: bool
    terminating: bool
    container_resources: tuple[tuple[str, frozenset[str], frozenset[str]], ...]


def _add(into: dict[str, Quantity], res: dict[str, Quantity]) -> None:
    for k, q in res.items():
        into[k] = into[k] + q if k in into else q


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


_INFO_CACHE: dict[str, PodQuotaInfo] = {}


def pod_quota_info(pod: dict[str, Any]) -> PodQuotaInfo:
    """Quota-relevant summary of a pod (memoized: large fleets share a few shapes)."""
    spec = pod.get("spec") or {}
    phase = (pod.get("status") or {}).get("phase") or "Pending"
    key_src = {
        "c": [(c.get("name"), c.get("resources")) for c in spec.get("containers") or []],
        "i": [
            (c.get("name"), c.get("resources"), c.get("restartPolicy"))
            for c in spec.get("initContainers") or []
        ],
        "o": spec.get("overhead"),
        "p": phase in TERMINAL_PHASES,
        "pc": spec.get("priorityClassName") or "",
        "t": spec.get("activeDeadlineSeconds"),
    }
    key = repr(key_src)
    hit = _INFO_CACHE.get(key)
    if hit is not None:
        return hit
    info = _compute_info(spec, phase)
    if len(_INFO_CACHE) < 100_000:
        _INFO_CACHE[key] = info
    return info


def _compute_info(spec: dict[str, Any], phase: str) -> PodQuotaInfo:
    terminal = phase in TERMINAL_PHASES
    usage: dict[str, Quantity] = {"count/pods": Quantity(Fraction(1))}
    requests = effective(spec, "requests")
    limits = effective(spec, "limits")
    if not terminal:
        usage["pods"] = Quantity(Fraction(1))
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
    deadline = spec.get("activeDeadlineSeconds")
    return PodQuotaInfo(
        usage=usage,
        terminal=terminal,
        priority_class=spec.get("priorityClassName") or "",
        best_effort=best_effort,
        terminating=deadline is not None and int(deadline) >= 0,
        container_resources=tuple(containers),
    )


def quota_matches_pod(quota: dict[str, Any], info: PodQuotaInfo) -> bool:
    """Whether a (possibly scoped) quota applies to a pod."""
    spec = quota.get("spec") or {}
    for scope in spec.get("scopes") or []:
        if not _scope_matches(scope, "Exists", [], info):
            return False
    for expr in (spec.get("scopeSelector") or {}).get("matchExpressions") or []:
        if not _scope_matches(
            expr.get("scopeName", ""), expr.get("operator", ""), expr.get("values") or [], info
        ):
            return False
    return True


def _scope_matches(scope: str, op: str, values: list[str], info: PodQuotaInfo) -> bool:
    if scope == "Terminating":
        return info.terminating
    if scope == "NotTerminating":
        return not info.terminating
    if scope == "BestEffort":
        return info.best_effort
    if scope == "NotBestEffort":
        return not info.best_effort
    if scope == "PriorityClass":
        pc = info.priority_class
        if op == "In":
            return pc in values
        if op == "NotIn":
            return pc not in values
        if op == "Exists":
            return pc != ""
        if op == "DoesNotExist":
            return pc == ""
    return True


def pod_keys(hard: dict[str, Any]) -> list[str]:
    """Keys of ``spec.hard`` that the pod evaluator maintains."""
    return [k for k in hard if is_pod_quota_key(k)]


def count_key(resource: str, group: str, hard_key: str) -> bool:
    """Whether ``hard_key`` is the object-count key for ``resource``."""
    full = f"count/{resource}" + (f".{group}" if group else "")
    return hard_key == full or (not group and LEGACY_COUNT.get(hard_key) == resource)


def sum_usage(
    quota: dict[str, Any], infos: list[PodQuotaInfo], object_counts: dict[str, int]
) -> dict[str, str]:
    """``status.used`` for a quota: only keys present in ``spec.hard``."""
    hard = (quota.get("spec") or {}).get("hard") or {}
    keys = pod_keys(hard)
    totals: dict[str, Quantity] = {k: ZERO for k in keys}
    if keys:
        for info in infos:
            if not quota_matches_pod(quota, info):
                continue
            for k in keys:
                q = info.usage.get(k)
                if q is not None:
                    cur = totals[k]
                    totals[k] = Quantity(cur.value + q.value, cur.binary or q.binary)
    used = {k: str(v) for k, v in totals.items()}
    for k in hard:
        if k in object_counts:
            used[k] = str(object_counts[k])
    return used


def _pretty(d: dict[str, Quantity | Fraction | str]) -> str:
    return ",".join(f"{k}={d[k]}" for k in sorted(d))


def admit_pod(
    pod_name: str, info: PodQuotaInfo, quotas: list[dict[str, Any]]
) -> tuple[int, str] | None:
    """Quota admission for a pod create; returns ``(403, message)`` or ``None`` if admitted.

    The message has the exact form of the API server's quota admission plugin.
    """
    for q in quotas:
        if not quota_matches_pod(q, info):
            continue
        name = q["metadata"]["name"]
        hard = (q.get("spec") or {}).get("hard") or {}
        keys = pod_keys(hard)
        if not keys:
            continue
        missing = _missing_constraints(set(keys) & VALIDATION_SET, info)
        if missing:
            return 403, f'pods "{pod_name}" is forbidden: failed quota: {name}: {missing}'
        used = (q.get("status") or {}).get("used") or {}
        failed_req: dict[str, Quantity] = {}
        failed_used: dict[str, str] = {}
        failed_hard: dict[str, str] = {}
        for k in keys:
            delta = info.usage.get(k)
            if delta is None or delta.value == 0:
                continue
            hard_q = parse_quantity(hard[k])
            cur = parse_quantity(used.get(k, "0"))
            if cur.value + delta.value > hard_q.value:
                failed_req[k] = delta
                failed_used[k] = format_quantity(cur.value, cur.binary or delta.binary)
                failed_hard[k] = str(hard_q)
        if failed_req:
            return 403, (
                f'pods "{pod_name}" is forbidden: exceeded quota: {name}, '
                f"requested: {_pretty(failed_req)}, used: {_pretty(failed_used)}, "
                f"limited: {_pretty(failed_hard)}"
            )
    return None


def _missing_constraints(required: set[str], info: PodQuotaInfo) -> str:
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


def admit_count(
    resource: str, group: str, name: str, quotas: list[dict[str, Any]]
) -> tuple[int, str] | None:
    """Object-count admission (``count/configmaps`` etc.) for a create."""
    for q in quotas:
        hard = (q.get("spec") or {}).get("hard") or {}
        used = (q.get("status") or {}).get("used") or {}
        for k, v in hard.items():
            if count_key(resource, group, k):
                cur = parse_quantity(used.get(k, "0")).value
                if cur + 1 > parse_quantity(v).value:
                    qn = q["metadata"]["name"]
                    return 403, (
                        f'{resource} "{name}" is forbidden: exceeded quota: {qn}, '
                        f"requested: {k}=1, used: {k}={format_quantity(cur)}, "
                        f"limited: {k}={parse_quantity(v)}"
                    )
    return None
