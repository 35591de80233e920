"""What telemetry says is unused in a namespace's grants, and the reclaim cycle the beat runs
(issue #25 section 2; the rules: quotas/reclaim.py; docs/quotas.md "Idle grants").

For a namespace's request grants of one GPU class (whole GPUs) on a cluster whose policy is
on, over the policy's last ``idle_hours`` closed hours:

- **judged** only when every grant of the group is older than the window, the cluster is
  measured (telemetry.measured), its hourly usage rows (telemetry.summary, from the agent's
  or Prometheus' history) cover the whole window and its source answered: otherwise nothing
  is announced or lowered, and the policy page says why ("not measured");
- **busy peak**: the most GPUs its pods held in an hour of the window whose mean engine
  activity (or utilisation, where the source has no engine activity) was at or above the
  idle threshold (``TELEMETRY_IDLE_THRESHOLD_PCT``), the idle insight's definition per hour;
  hours its pods held GPUs idly do not count;
- **held now**: GPUs its pods request on nodes of the class (the inventory: what kubectl
  shows);
- **unused** = granted - max(held now, busy peak), and never more than the namespace's
  grants (all classes, baselines too) less what its non-terminal pods request, so a
  lowering never goes below what its pods hold.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Sum
from django.utils import timezone

from inventory.models import GPU_RESOURCE, GpuPod, NamespaceUsage
from quotas import reclaim as rules
from quotas.models import Grant, GrantReclaim

from . import sources, summary
from .insight import MIN_COVERAGE, idle_threshold_pct
from .measured import measured_cluster_ids
from .models import UsageHour

HOUR = timedelta(hours=1)
TERMINAL = ("Succeeded", "Failed")


def _gpus(value: float) -> int:
    """Whole GPUs from GPU-hours in one hour (float sums: 2.0000001 is 2)."""
    return max(0, math.ceil(value - 1e-6))


@dataclass
class Coverage:
    """Whether a cluster's telemetry can judge a window, and why not."""

    measured: bool
    since: datetime | None = None  # its hourly usage rows begin here
    outage: str = ""
    # {hour (epoch s, text): [GPUs held, GPU-hours of them reported]} (telemetry.summary)
    cover: dict = field(default_factory=dict)

    def gap(self, start: datetime, end: datetime) -> datetime | None:
        """The first hour of [start, end) whose held GPUs reported less than 80 % of it
        (or that no computation covered)."""
        hour = start
        while hour < end:
            held, reported = self.cover.get(str(int(hour.timestamp())), (None, 0.0))
            if held is None or (held and reported < MIN_COVERAGE * held):
                return hour
            hour += HOUR
        return None

    def judges(self, start: datetime, end: datetime) -> bool:
        return not self.why_not(start, end)

    def why_not(self, start: datetime, end: datetime) -> str:
        if not self.measured:
            return "not measured: the cluster sends no telemetry, so nothing is reclaimed"
        if self.outage:
            return f"its telemetry source did not answer ({self.outage}): nothing is reclaimed"
        if self.since is None or self.since > start:
            when = f"{self.since:%Y-%m-%d %H:%M} UTC" if self.since else "now"
            return f"its telemetry covers only since {when}, less than the idle window"
        gap = self.gap(start, end)
        if gap is not None:
            return (
                f"its telemetry has a gap at {gap:%Y-%m-%d %H:%M} UTC (held GPUs reported less "
                "than 80 % of the hour): nothing is reclaimed until the window has none"
            )
        return ""


def coverage(cluster_ids, now: datetime) -> dict:
    """{cluster id: Coverage} (the measured ones' summaries computed where needed)."""
    cluster_ids = set(cluster_ids)
    measured = measured_cluster_ids(cluster_ids)
    out = {c: Coverage(measured=False) for c in cluster_ids - measured}
    for row in summary.rows(measured, now):
        data = row.data
        out[row.cluster_id] = Coverage(
            True, summary.usage_since_of(row), "; ".join(data.get("outages", [])),
            data.get("usage_cover") or {},
        )  # fmt: skip
    for c in measured - set(out):
        out[c] = Coverage(True)
    return out


def window_of(policy, now: datetime) -> tuple[datetime, datetime]:
    end = now.replace(minute=0, second=0, microsecond=0)
    return end - timedelta(hours=policy.idle_hours), end


def findings(now: datetime | None = None, cluster_ids=None) -> tuple[list, dict]:
    """(the Findings of every group under an enabled policy, {cluster id: Coverage})."""
    now = now or timezone.now()
    policies = rules.policies_by_scope(cluster_ids)
    clusters = {c for (c, _), p in policies.items() if p.enabled}
    if not clusters:
        return [], {}
    cover = coverage(clusters, now)
    groups: dict = defaultdict(list)
    grants = (
        Grant.objects.active_at(now)
        .filter(namespace__cluster_id__in=clusters, resource=GPU_RESOURCE)
        .select_related("namespace__cluster", "namespace__team")
    )
    totals: dict = defaultdict(int)
    for g in grants:
        totals[g.namespace_id] += g.amount
        groups[(g.namespace, g.gpu_class_id)].append(g)
    judged = {}
    judges: dict = {}  # (cluster id, start): whether its telemetry covers the window
    for (ns, class_id), group in groups.items():
        policy = rules.policy_for(policies, ns.cluster_id, class_id)
        if policy is None or not policy.enabled:
            continue
        start, end = window_of(policy, now)
        old = sum(g.amount for g in group if g.kind == Grant.Kind.REQUEST and g.starts_at <= start)
        if not old:
            continue
        key = (ns.cluster_id, start)
        if key not in judges:
            judges[key] = cover[ns.cluster_id].judges(start, end)
        if judges[key]:
            judged[(ns, class_id)] = (policy, start, end, sum(g.amount for g in group), old)
    if not judged:
        return [], cover
    namespaces = {ns for ns, _ in judged}
    busy = _busy_peaks(judged)
    held = _held_now(namespaces)
    requested = _requested(namespaces)
    out = []
    names = {c: sources.source_name(c) for c in {ns.cluster_id for ns, _ in judged}}
    for (ns, class_id), (policy, start, end, granted, old) in judged.items():
        by_class = held.get(ns.pk, {})
        held_now = sum(by_class.values()) if class_id is None else by_class.get(class_id, 0)
        peak = busy.get((ns.pk, class_id), 0)
        # What pods hold (or held busily) is covered by the class's grants first (baselines
        # and young grants too); what is left is unused, and the old request grants give it.
        unused = min(old, granted - max(held_now, peak))
        unused = min(unused, totals[ns.pk] - requested.get(ns.pk, 0))
        if unused < 1:
            continue
        basis = {
            "hours": policy.idle_hours, "window_start": start.isoformat(),
            "window_end": end.isoformat(), "held_now": held_now, "busy_peak": peak,
            "reclaimable": old, "threshold_pct": idle_threshold_pct(),
            "source": names[ns.cluster_id],
        }  # fmt: skip
        out.append(rules.Finding(ns, class_id, GPU_RESOURCE, granted, unused, basis, policy))
    return out, cover


def _busy_peaks(judged: dict) -> dict:
    """{(namespace id, class id or None): the most GPUs held in a busy hour of its window}.
    One query; each group reads only its namespace's rows."""
    threshold = idle_threshold_pct()
    out: dict = defaultdict(int)
    earliest = min(start for _, start, _, _, _ in judged.values())
    rows = (
        UsageHour.objects.filter(
            cluster_id__in={ns.cluster_id for ns, _ in judged},
            namespace__in={ns.name for ns, _ in judged},
            hour__gte=earliest,
        )
        .values("cluster_id", "namespace", "gpu_class_id", "hour")
        .annotate(a=Sum("allocated"), b=Sum("busy"))
    )
    by_ns: dict = defaultdict(list)  # (cluster id, namespace) -> [(class id, hour, a, b)]
    for r in rows:
        by_ns[(r["cluster_id"], r["namespace"])].append(
            (r["gpu_class_id"], r["hour"], r["a"], r["b"])
        )
    for (ns, class_id), (_, start, end, _, _) in judged.items():
        hours: dict = defaultdict(lambda: [0.0, 0.0])
        for row_class, hour, a, b in by_ns.get((ns.cluster_id, ns.name), ()):
            if start <= hour < end and (class_id is None or row_class == class_id):
                hours[hour][0] += a
                hours[hour][1] += b
        for a, b in hours.values():
            if a > 0 and 100 * b / a >= threshold:
                out[(ns.pk, class_id)] = max(out[(ns.pk, class_id)], _gpus(a))
    return out


def _held_now(namespaces) -> dict:
    """{namespace id: {class id: whole GPUs its non-terminal pods request on nodes of the
    class}} from the inventory."""
    keys = {(ns.cluster_id, ns.name): ns.pk for ns in namespaces}
    out: dict = defaultdict(lambda: defaultdict(int))
    pods = (
        GpuPod.objects.filter(
            cluster_id__in={c for c, _ in keys},
            namespace__in={n for _, n in keys},
            node__isnull=False,
        )
        .exclude(phase__in=TERMINAL)
        .values_list("cluster_id", "namespace", "node__gpu_class_id", "requests")
    )
    for cid, name, class_id, requests in pods:
        ns_id = keys.get((cid, name))
        if ns_id is None:
            continue
        try:
            out[ns_id][class_id] += int((requests or {}).get(GPU_RESOURCE, 0))
        except (TypeError, ValueError):
            continue
    return out


def _requested(namespaces) -> dict:
    """{namespace id: GPUs its non-terminal pods request} (the quota's "used")."""
    keys = {(ns.cluster_id, ns.name): ns.pk for ns in namespaces}
    rows = NamespaceUsage.objects.filter(
        resource=GPU_RESOURCE,
        cluster_id__in={c for c, _ in keys},
        namespace__in={n for _, n in keys},
    ).values_list("cluster_id", "namespace", "requested")
    return {keys[(c, n)]: r for c, n, r in rows if (c, n) in keys}


# -- the cycle ------------------------------------------------------------------------------


def run(now: datetime | None = None) -> dict[str, int]:
    """One pass of the beat: close what no longer applies, lower what the grace let go, warn
    about new idle grants. Returns counts."""
    now = now or timezone.now()
    counts = {"warned": 0, "lowered": 0, "withdrawn": 0, "waiting": 0}
    found, cover = findings(now)
    by_key = {(f.namespace.pk, f.gpu_class_id, f.resource): f for f in found}
    open_ = GrantReclaim.objects.open().select_related("policy", "namespace__team")
    for r in open_:
        key = (r.namespace_id, r.gpu_class_id, r.resource)
        finding = by_key.pop(key, None)
        if not r.policy.enabled:
            counts["withdrawn"] += rules.withdraw(r, "the policy was turned off", now)
        elif r.status == GrantReclaim.Status.HELD:
            if r.held_until <= now:
                counts["withdrawn"] += rules.withdraw(r, "the 'still needed' hold ended", now)
                if finding is not None:
                    by_key[key] = finding  # still idle: announced again below
        elif finding is None:
            c = cover.get(r.namespace.cluster_id)
            if c is not None and not c.judges(*window_of(r.policy, now)):
                counts["waiting"] += 1  # no data: neither lowered nor withdrawn
                continue
            why = ("its GPUs are in use again" if rules.grants_left(r, now)
                   else "its grants ended or were released")  # fmt: skip
            counts["withdrawn"] += rules.withdraw(r, why, now)
        elif now >= r.grace_ends_at:
            counts["lowered"] += bool(rules.lower(r, finding.unused, now))
    for f in by_key.values():
        rules.warn(f.policy, f, now)
        counts["warned"] += 1
    return counts


def policy_states(now: datetime | None = None) -> list[dict]:
    """Every policy with what it can do now: "judging", or why it does nothing."""
    now = now or timezone.now()
    policies = list(rules.policies_by_scope().values())
    cover = coverage({p.cluster_id for p in policies}, now) if policies else {}
    out = []
    for p in sorted(policies, key=lambda p: (p.cluster.name, p.gpu_class_id is not None)):
        c = cover.get(p.cluster_id, Coverage(False))
        state = "off" if not p.enabled else (c.why_not(*window_of(p, now)) or "judging")
        out.append({"policy": p, "state": state, "measured": c.measured})
    return out
