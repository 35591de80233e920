"""Quotas the portal finds in a team namespace but does not own: onboarding, adoption.

A namespace often has quotas already (a hand-made ``gpu-quota``). Kubernetes enforces
every one of them next to the portal's (GPU-FACTS.md section 1), so the portal reads
them when a namespace is onboarded and on every drift check (:func:`record_foreign`),
and an admin decides: **adopt** (the GPU keys become baseline grants, in one
transaction; the quota is then left alone or, on request, removed from the cluster) or
**keep** it as an outside limit. Every decision is audited.

Only ``requests.nvidia.com/*`` keys count: the pod evaluator matches extended resources
only under ``requests.`` (``isExtendedResourceNameForQuota`` in
``pkg/quota/v1/evaluator/core/pods.go``); ``limits.nvidia.com/*`` and bare
``nvidia.com/*`` keys are accepted by the API server but never counted, and are shown as
such.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from inventory.kube import KubeError, KubeGateway
from inventory.models import Cluster, is_gpu_resource

from . import audit, services
from .apply import record_status
from .models import ForeignQuota, Team, TeamNamespace

PREFIX = "requests."


@dataclass(frozen=True)
class ParsedQuota:
    name: str
    hard: dict[str, str]
    used: dict[str, str]
    ignored: dict[str, str]
    scopes: list[list]


def parse_quota(quota: dict) -> ParsedQuota | None:
    """The GPU part of one ResourceQuota (None when it has no GPU key at all)."""
    spec, status = quota.get("spec") or {}, quota.get("status") or {}
    hard, ignored = {}, {}
    for key, value in (spec.get("hard") or {}).items():
        if key.startswith(PREFIX) and is_gpu_resource(key.removeprefix(PREFIX)):
            hard[key] = str(value)
        elif is_gpu_resource(key.removeprefix("limits.")):
            ignored[key] = str(value)
    if not hard and not ignored:
        return None
    used = {k: str(v) for k, v in (status.get("used") or {}).items() if k in hard}
    # getScopeSelectorsFromQuota: spec.scopes as Exists, then scopeSelector's expressions.
    scopes = [[s, "Exists", []] for s in spec.get("scopes") or []]
    for e in (spec.get("scopeSelector") or {}).get("matchExpressions") or []:
        scopes.append([e.get("scopeName", ""), e.get("operator", ""), e.get("values") or []])
    name = (quota.get("metadata") or {}).get("name", "")
    return ParsedQuota(name=name, hard=hard, used=used, ignored=ignored, scopes=scopes)


@transaction.atomic
def record_foreign(ns: TeamNamespace, quotas: list[dict]) -> list[ForeignQuota]:
    """Store what a read of every quota in ``ns`` found; the portal's own quota's status
    is recorded as after an apply. New, changed and vanished quotas are audited."""
    now = timezone.now()
    own = next((q for q in quotas if q["metadata"]["name"] == settings.QUOTA_NAME), None)
    if own is not None:
        record_status(ns, own)
    found = {}
    for quota in quotas:
        if quota["metadata"]["name"] == settings.QUOTA_NAME:
            continue
        parsed = parse_quota(quota)
        if parsed is not None:
            found[parsed.name] = parsed
    known = {fq.name: fq for fq in ForeignQuota.objects.select_for_update().filter(namespace=ns)}
    out = []
    for name, p in found.items():
        fq = known.get(name)
        fields = {"hard": p.hard, "used": p.used, "ignored": p.ignored, "scopes": p.scopes}
        if fq is None or fq.gone_at is not None:
            fq = fq or ForeignQuota(namespace=ns, name=name)
            for k, v in fields.items():
                setattr(fq, k, v)
            fq.seen_at, fq.gone_at = now, None
            if fq.decision == ForeignQuota.Decision.REMOVED:  # someone made it again
                fq.decision = ForeignQuota.Decision.UNDECIDED
            fq.save()
            audit.record(None, "quota.foreign_found", fq, team=ns.team, after=fields,
                         note=f"ResourceQuota {name} in {ns}")  # fmt: skip
        else:
            changed = fq.hard != p.hard or fq.scopes != p.scopes or fq.ignored != p.ignored
            before = {"hard": fq.hard, "ignored": fq.ignored, "scopes": fq.scopes}
            for k, v in fields.items():
                setattr(fq, k, v)
            fq.seen_at = now
            fq.save(update_fields=[*fields, "seen_at"])
            if changed:
                audit.record(None, "quota.foreign_changed", fq, team=ns.team, before=before,
                             after=fields, note=f"ResourceQuota {name} in {ns}")  # fmt: skip
        out.append(fq)
    for name, fq in known.items():
        if name not in found and fq.gone_at is None:
            fq.gone_at = now
            fq.save(update_fields=["gone_at"])
            audit.record(None, "quota.foreign_gone", fq, team=ns.team, before={"hard": fq.hard},
                         note=f"ResourceQuota {name} no longer in {ns}")  # fmt: skip
    return out


def read_namespace(ns: TeamNamespace, gateway: KubeGateway | None = None) -> list[ForeignQuota]:
    """Read every quota of ``ns`` from its cluster and record the foreign ones."""
    if gateway is not None:
        return record_foreign(ns, gateway.list_resource_quotas(ns.name))
    with KubeGateway(ns.cluster) as gw:
        return record_foreign(ns, gw.list_resource_quotas(ns.name))


def onboard(team: Team, cluster: Cluster, name: str, by) -> tuple[TeamNamespace, list]:
    """Link a namespace to a team and read its quotas at once (admins).

    The read comes first: a namespace whose quotas cannot be read is not onboarded
    (``KubeError`` propagates), so the portal never manages one blind.
    """
    if not by.is_staff:
        raise PermissionError("Only portal admins onboard namespaces.")
    errors = {}
    if TeamNamespace.objects.filter(cluster=cluster, name=name).exists():
        errors["name"] = f"Namespace {name} on {cluster.slug} already belongs to a team."
    if errors:
        raise ValidationError(errors)
    with KubeGateway(cluster) as gw:
        quotas = gw.list_resource_quotas(name)
    with transaction.atomic():
        ns = TeamNamespace(team=team, cluster=cluster, name=name)
        ns.full_clean()
        ns.save()
        audit.record(by, "namespace.onboarded", ns, team=team,
                     after={"cluster": cluster.slug, "name": name})  # fmt: skip
        foreign = record_foreign(ns, quotas)
    return ns, foreign


def _decidable(fq: ForeignQuota) -> None:
    if not fq.present:
        raise ValidationError({"quota": f"ResourceQuota {fq.name} is no longer in the namespace."})
    if fq.decision == ForeignQuota.Decision.ADOPTED:
        raise services.TransitionError(f"ResourceQuota {fq.name} is already adopted.")


@transaction.atomic
def adopt(fq: ForeignQuota, by, note: str = "") -> list:
    """Make the quota's GPU limits the namespace's baselines (one transaction: every
    baseline or none). The quota itself stays, and keeps binding, until removed."""
    if not by.is_staff:
        raise PermissionError("Only portal admins adopt quotas.")
    fq = ForeignQuota.objects.select_for_update().select_related("namespace__team").get(pk=fq.pk)
    _decidable(fq)
    if fq.scoped:
        raise ValidationError(
            {"quota": f"{fq.name} binds only pods with {fq.scope_text()}: a baseline would "
                      "bind every pod. Keep it as an outside limit instead."}
        )  # fmt: skip
    if not fq.hard:
        raise ValidationError({"quota": f"{fq.name} has no requests.nvidia.com/* key to adopt."})
    grants = []
    for key, value in sorted(fq.hard.items()):
        try:
            amount = int(value)
        except ValueError:
            raise ValidationError({"quota": f"{key}: {value} is not a whole number."}) from None
        grants.append(services.set_baseline(fq.namespace, key.removeprefix(PREFIX), amount, by))
    before = {"decision": fq.decision}
    fq.decision, fq.decided_by, fq.decided_at = ForeignQuota.Decision.ADOPTED, by, timezone.now()
    fq.decision_note = note[:2000]
    fq.save(update_fields=["decision", "decided_by", "decided_at", "decision_note"])
    audit.record(by, "quota.foreign_adopted", fq, team=fq.namespace.team, before=before,
                 after={"decision": fq.decision, "baselines": fq.hard}, note=note)  # fmt: skip
    return grants


@transaction.atomic
def keep(fq: ForeignQuota, by, note: str = "") -> ForeignQuota:
    """Record that the quota stays as an outside limit (the portal never touches it)."""
    if not by.is_staff:
        raise PermissionError("Only portal admins decide on quotas.")
    fq = ForeignQuota.objects.select_for_update().select_related("namespace__team").get(pk=fq.pk)
    _decidable(fq)
    before = {"decision": fq.decision}
    fq.decision, fq.decided_by, fq.decided_at = ForeignQuota.Decision.KEPT, by, timezone.now()
    fq.decision_note = note[:2000]
    fq.save(update_fields=["decision", "decided_by", "decided_at", "decision_note"])
    audit.record(by, "quota.foreign_kept", fq, team=fq.namespace.team, before=before,
                 after={"decision": fq.decision, "hard": fq.hard}, note=note)  # fmt: skip
    return fq


def removal_blockers(fq: ForeignQuota, portal_quota: dict | None) -> list[str]:
    """Why the quota may not be removed yet: only an adopted one, and only once the
    portal's quota enforces (status.hard) every adopted key, so no instant is unlimited."""
    if fq.decision != ForeignQuota.Decision.ADOPTED:
        return [f"{fq.name} is not adopted: adopt it first (its limits become baselines)."]
    if not fq.present:
        return [f"{fq.name} is no longer in the namespace."]
    enforced = ((portal_quota or {}).get("status") or {}).get("hard") or {}
    missing = sorted(k for k in fq.hard if k not in enforced)
    if missing:
        return [f"The portal's quota {settings.QUOTA_NAME} does not enforce {', '.join(missing)} "
                "yet: wait for its apply to finish."]  # fmt: skip
    return []


def remove(fq: ForeignQuota, by, note: str = "") -> None:
    """Delete an adopted quota from the cluster (admin, after the confirmation page)."""
    if not by.is_staff:
        raise PermissionError("Only portal admins remove quotas.")
    ns = fq.namespace
    with KubeGateway(ns.cluster) as gw:
        blockers = removal_blockers(fq, gw.get_resource_quota(ns.name, settings.QUOTA_NAME))
        if blockers:
            raise ValidationError({"quota": blockers})
        try:
            gw.delete_resource_quota(ns.name, fq.name)
        except KubeError as err:
            raise ValidationError({"quota": f"The cluster refused: {err}"}) from err
    with transaction.atomic():
        fq = ForeignQuota.objects.select_for_update().get(pk=fq.pk)
        now = timezone.now()
        fq.decision, fq.gone_at, fq.decided_by, fq.decided_at = (
            ForeignQuota.Decision.REMOVED, now, by, now,
        )  # fmt: skip
        fq.save(update_fields=["decision", "gone_at", "decided_by", "decided_at"])
        note = note or f"deleted ResourceQuota {fq.name}"
        audit.record(by, "quota.foreign_removed", fq, team=ns.team, before={"hard": fq.hard},
                     note=note)  # fmt: skip
