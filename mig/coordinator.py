"""The MIG reconfiguration coordinator: the "higher level entity" mig-manager expects.

mig-manager only reacts to the ``nvidia.com/mig.config`` label; it never evicts
workloads and can stay ``pending`` forever (GPU-FACTS.md section 3). This module does
the rest, one persisted step at a time:

    cordon -> drain -> write_config -> set_label -> wait_state -> uncordon -> resync -> grant

``advance(request_id)`` claims the request with a conditional UPDATE (a lease), executes
the first unfinished ``MigStep``, records the outcome and schedules the next call (with a
countdown while it waits). Steps are idempotent, so a worker killed at any point leaves a
run that the next claim continues; beat re-dispatches runs whose message or worker was
lost. The partial unique index ``migrequest_one_active_run_per_node`` keeps a second run
off a node while one is active, and the lease keeps two workers off one run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import yaml
from django.conf import settings
from django.db import transaction
from django.db.models import Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from inventory.kube import KubeError, KubeGateway
from inventory.models import is_gpu_resource
from inventory.sync import SyncBusy, sync_cluster
from quotas import audit
from quotas.apply import enqueue_apply
from quotas.models import Grant

from . import catalog, layout, migparted
from .models import MigRequest, MigStep
from .services import alert_admins, devices_for

log = logging.getLogger(__name__)

CONFIG_LABEL = "nvidia.com/mig.config"
STATE_LABEL = "nvidia.com/mig.config.state"
Step = MigStep.Name


def conf(name: str, default: Any) -> Any:
    """A ``MIG_*`` setting (portal/settings.py reads each from the environment)."""
    return getattr(settings, name, default)


def lease() -> timedelta:
    """How long one step may run before beat assumes its worker died."""
    return timedelta(seconds=conf("MIG_LEASE_SECONDS", 300.0))


def poll_seconds() -> float:
    return conf("MIG_POLL_SECONDS", 5.0)


# -- dispatching ---------------------------------------------------------------------------


def dispatch(request_id: Any, countdown: float = 0) -> None:
    from .tasks import advance_run

    try:
        advance_run.apply_async((str(request_id),), countdown=max(countdown, 0))
    except Exception:  # the broker being down loses nothing: beat re-sends
        log.warning("could not enqueue MIG run %s; beat will re-dispatch it", request_id)


def redispatch_due(now=None) -> int:
    """Re-send active runs nobody holds whose next step is overdue (lost message, dead
    worker). Safe at any time: a run executes only under the lease claimed in ``advance``."""
    now = now or timezone.now()
    grace = timedelta(seconds=conf("MIG_REDISPATCH_GRACE_SECONDS", 30.0))
    due = list(
        MigRequest.objects.filter(status__in=MigRequest.ACTIVE)
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
        .filter(Q(next_run_at__isnull=True) | Q(next_run_at__lte=now - grace))
        .values_list("pk", flat=True)[:500]
    )
    for pk in due:
        dispatch(pk)
    return len(due)


# -- outcomes of one step ------------------------------------------------------------------


@dataclass
class Done:
    detail: str
    skipped: bool = False
    # Runs inside the transaction that marks the step done (the grant step's writes).
    commit: Callable[[], None] | None = None


@dataclass
class Wait:
    detail: str
    countdown: float | None = None


@dataclass
class Fail:
    error: str


@dataclass
class Ctx:
    req: MigRequest
    step: MigStep
    now: Any
    _gw: KubeGateway | None = field(default=None, repr=False)

    @property
    def gw(self) -> KubeGateway:
        if self._gw is None:
            self._gw = KubeGateway(self.req.cluster)
        return self._gw

    @property
    def node(self) -> str:
        return self.req.node.name

    @property
    def elapsed(self) -> float:
        return (self.now - self.step.started_at).total_seconds()

    def save_data(self, **values: Any) -> None:
        """Persist facts before acting on them, so a retry after a crash sees them."""
        self.step.data.update(values)
        MigStep.objects.filter(pk=self.step.pk).update(data=self.step.data)


# -- the run -------------------------------------------------------------------------------


def advance(request_id: Any, *, gateway: KubeGateway | None = None) -> str:
    """Execute the next step of a run if no one else holds it; returns what happened."""
    now = timezone.now()
    until = now + lease()
    claimed = (
        MigRequest.objects.filter(pk=request_id, status__in=MigRequest.ACTIVE)
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
        .update(
            status=MigRequest.Status.RUNNING,
            lease_until=until,
            updated_at=now,
            started_at=Coalesce("started_at", Value(now)),
        )
    )
    if not claimed:
        return "busy"
    req = MigRequest.objects.select_related("node", "cluster", "namespace", "team").get(
        pk=request_id
    )
    step = req.steps.exclude(status__in=MigStep.FINISHED).order_by("position").first()
    if step is None:  # every step finished but the request was not closed: close it
        with transaction.atomic():
            _succeed(req)
        return "succeeded"
    step.attempts += 1
    step.status = MigStep.Status.RUNNING
    step.started_at = step.started_at or now
    step.save(update_fields=["attempts", "status", "started_at"])
    ctx = Ctx(req, step, now, gateway)
    try:
        outcome = _execute(ctx)
    finally:
        if gateway is None and ctx._gw is not None:
            ctx._gw.close()
    return _record(ctx, outcome, until)


def _execute(ctx: Ctx) -> Done | Wait | Fail:
    try:
        return HANDLERS[ctx.step.name](ctx)
    except KubeError as err:
        if err.permanent:
            return Fail(f"{ctx.step.name}: {err}")
        errors = ctx.step.data.get("errors", 0) + 1
        ctx.save_data(errors=errors)
        if errors >= conf("MIG_STEP_MAX_ERRORS", 8):
            return Fail(f"{ctx.step.name}: {err} ({errors} transient errors in a row)")
        return Wait(f"retrying after: {err}", min(poll_seconds() * 2 ** (errors - 1), 60))
    except Exception as err:  # a bug must fail the run, not loop forever
        log.exception("MIG run %s: step %s crashed", ctx.req.pk, ctx.step.name)
        return Fail(f"{ctx.step.name}: {type(err).__name__}: {err}")


def _record(ctx: Ctx, outcome: Done | Wait | Fail, until) -> str:
    req, step = ctx.req, ctx.step
    now = timezone.now()
    if isinstance(outcome, Wait):
        MigStep.objects.filter(pk=step.pk).update(detail=outcome.detail[:4000])
        countdown = poll_seconds() if outcome.countdown is None else outcome.countdown
        _release(req, until, now + timedelta(seconds=countdown))
        transaction.on_commit(lambda: dispatch(req.pk, countdown))
        return "waiting"
    if isinstance(outcome, Fail):
        fail_run(ctx, outcome.error)
        return "failed"
    with transaction.atomic():
        step.status = MigStep.Status.SKIPPED if outcome.skipped else MigStep.Status.DONE
        step.detail, step.finished_at = outcome.detail[:4000], now
        step.save(update_fields=["status", "detail", "finished_at"])
        if outcome.commit is not None:
            outcome.commit()
        if not req.steps.exclude(status__in=MigStep.FINISHED).exists():
            _succeed(req)
            return "succeeded"
        _release(req, until, now)
    transaction.on_commit(lambda: dispatch(req.pk))
    return "advanced"


def _release(req: MigRequest, until, next_run_at) -> None:
    """Give the lease back (only ours: a run reclaimed after our lease expired is theirs)."""
    MigRequest.objects.filter(pk=req.pk, lease_until=until).update(
        lease_until=None, next_run_at=next_run_at, updated_at=timezone.now()
    )


def _succeed(req: MigRequest) -> None:
    req.refresh_from_db()
    req.succeed()
    req.save()
    audit.record(
        None, "mig.succeeded", req, team=req.team,
        before={"status": MigRequest.Status.RUNNING},
        after={"status": req.status, "node": req.node.name, "config": req.config_name,
               "granted": req.granted},
    )  # fmt: skip


def fail_run(ctx: Ctx, error: str) -> None:
    """Fail the run: uncordon if the portal cordoned (``MIG_UNCORDON_ON_FAILURE``), keep
    the node's previous config on record for a revert, audit, and alert the admins."""
    req, step = ctx.req, ctx.step
    notes = [error]
    cordon = req.steps.filter(name=Step.CORDON, status=MigStep.Status.DONE).first()
    we_cordoned = cordon is not None and not cordon.data.get("was_unschedulable", False)
    uncordoned = req.steps.filter(name=Step.UNCORDON, status=MigStep.Status.DONE).exists()
    if we_cordoned and not uncordoned:
        if conf("MIG_UNCORDON_ON_FAILURE", True):
            try:
                ctx.gw.set_unschedulable(ctx.node, False)
                notes.append("The node was uncordoned.")
            except KubeError as err:
                notes.append(f"Could not uncordon the node: {err}")
        else:
            notes.append("The node stays cordoned (MIG_UNCORDON_ON_FAILURE is off).")
    if req.previous_config:
        notes.append(f"Previous config: {req.previous_config}.")
    now = timezone.now()
    with transaction.atomic():
        MigStep.objects.filter(pk=step.pk).update(
            status=MigStep.Status.FAILED, detail=error[:4000], finished_at=now
        )
        req.steps.filter(status__in=[MigStep.Status.PENDING, MigStep.Status.RUNNING]).update(
            status=MigStep.Status.SKIPPED, detail="not run: the run failed"
        )
        req = (
            MigRequest.objects.select_for_update(of=("self",))
            .select_related("node", "team")
            .get(pk=req.pk)
        )
        before = req.status
        req.fail(" ".join(notes))
        req.save()
        audit.record(
            None, "mig.failed", req, team=req.team, before={"status": before},
            after={"status": req.status, "step": step.name, "node": req.node.name,
                   "config": req.config_name, "previous_config": req.previous_config},
            note=req.error,
        )  # fmt: skip
        alert_admins(req)
    log.warning("MIG run %s on %s failed at %s: %s", req.pk, req.node.name, step.name, error)


# -- the steps -----------------------------------------------------------------------------


def _cordon(ctx: Ctx) -> Done:
    if "was_unschedulable" not in ctx.step.data:
        node = ctx.gw.get_node(ctx.node)
        labels = (node.get("metadata") or {}).get("labels") or {}
        was = bool((node.get("spec") or {}).get("unschedulable"))
        ctx.save_data(was_unschedulable=was)
        live = labels.get(CONFIG_LABEL, "")
        if live and live != ctx.req.previous_config:
            MigRequest.objects.filter(pk=ctx.req.pk).update(previous_config=live)
            ctx.req.previous_config = live
    if ctx.step.data["was_unschedulable"]:
        return Done("already cordoned before the run; it stays cordoned afterwards")
    ctx.gw.set_unschedulable(ctx.node, True)
    return Done("cordoned")


def _is_gpu_pod(pod: dict[str, Any]) -> bool:
    if ((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed"):
        return False
    spec = pod.get("spec") or {}
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        res = c.get("resources") or {}
        keys = set(res.get("requests") or {}) | set(res.get("limits") or {})
        if any(is_gpu_resource(k) for k in keys):
            return True
    return False


def _gpu_pods(ctx: Ctx) -> list[dict[str, Any]]:
    pods = ctx.gw.list_pods(field_selector=f"spec.nodeName={ctx.node}")
    return [p for p in pods if _is_gpu_pod(p)]


def _ref(pod: dict[str, Any]) -> str:
    return f"{pod['metadata'].get('namespace', '')}/{pod['metadata']['name']}"


def _drain(ctx: Ctx) -> Done | Wait | Fail:
    timeout = conf("MIG_DRAIN_TIMEOUT_SECONDS", 1800.0)
    pods = _gpu_pods(ctx)
    evicted = ctx.step.data.get("evicted", [])
    if ctx.req.drain_policy == MigRequest.DrainPolicy.EVICT and pods:
        blocked = []
        for pod in pods:
            if pod["metadata"].get("deletionTimestamp"):
                continue  # terminating already
            result = ctx.gw.try_evict_pod(pod["metadata"]["namespace"], pod["metadata"]["name"])
            if result == "blocked":
                blocked.append(_ref(pod))
            elif result == "evicted":
                evicted.append(_ref(pod))
        ctx.save_data(evicted=evicted, blocked=blocked)
        pods = _gpu_pods(ctx)
        if pods and blocked and ctx.elapsed >= timeout:
            return Fail(
                f"Eviction blocked by a PodDisruptionBudget for {', '.join(blocked)} "
                f"for {timeout:.0f}s (drain timeout)."
            )
    if not pods:
        return Done(f"evicted {', '.join(evicted)}" if evicted else "no GPU pods on the node")
    names = ", ".join(_ref(p) for p in pods[:20])
    if ctx.elapsed >= timeout:
        return Fail(f"{len(pods)} GPU pod(s) still on the node after {timeout:.0f}s: {names}.")
    blocked = ctx.step.data.get("blocked") or []
    why = f"eviction blocked by a PodDisruptionBudget: {', '.join(blocked)}" if blocked else ""
    return Wait(why or f"waiting for {len(pods)} GPU pod(s) to finish: {names}")


def _write_config(ctx: Ctx) -> Done | Fail:
    """Read-modify-write the mig-parted ConfigMap: add or update our config, keep the rest.

    The PUT carries the resourceVersion that was read, so a concurrent writer (another
    run, an operator) makes it fail with 409 and we merge again on a fresh copy.
    """
    req = ctx.req
    namespace = conf("MIG_CONFIGMAP_NAMESPACE", "gpu-operator")
    name = conf("MIG_CONFIGMAP_NAME", "default-mig-parted-config")
    product = catalog.resolve_product(req.product)
    entries = migparted.config_entries(
        product, req.layout, devices_for(req.node, req.gpus), req.node.gpu_count
    )
    for _ in range(5):
        cm = ctx.gw.get_config_map(namespace, name)
        if cm is None:
            doc = {"version": "v1", "mig-configs": {req.config_name: entries}}
            try:
                ctx.gw.create_config_map(namespace, name, {"config.yaml": _dump(doc)})
            except KubeError as err:
                if err.status == 409:
                    continue
                raise
            return Done(f"created ConfigMap {namespace}/{name} with {req.config_name}")
        data = cm.get("data") or {}
        try:
            doc = yaml.safe_load(data.get("config.yaml") or "") or {}
        except yaml.YAMLError as err:
            return Fail(f"ConfigMap {namespace}/{name} holds invalid YAML; not touching it: {err}")
        if not isinstance(doc, dict) or not isinstance(doc.get("mig-configs") or {}, dict):
            return Fail(f"ConfigMap {namespace}/{name} is not a mig-parted config.")
        configs = doc.get("mig-configs") or {}
        if configs.get(req.config_name) == entries:
            return Done(f"{req.config_name} already in {namespace}/{name}")
        configs[req.config_name] = entries
        doc["mig-configs"] = configs
        doc.setdefault("version", "v1")
        cm["data"] = {**data, "config.yaml": _dump(doc)}
        try:
            ctx.gw.replace_config_map(namespace, cm)
        except KubeError as err:
            if err.status == 409:
                continue
            raise
        return Done(f"wrote {req.config_name} into {namespace}/{name} ({len(configs)} configs)")
    raise KubeError(f"ConfigMap {namespace}/{name} kept changing; will merge again")


def _dump(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


def _labels(ctx: Ctx) -> dict[str, str]:
    return (ctx.gw.get_node(ctx.node).get("metadata") or {}).get("labels") or {}


def _set_label(ctx: Ctx) -> Done:
    """Set the config label and clear the state label, so a stale ``success`` of the old
    config cannot be mistaken for the new one (mig-manager writes a fresh state)."""
    labels = _labels(ctx)
    cfg = ctx.req.config_name
    if labels.get(CONFIG_LABEL) == cfg:
        return Done(f"{CONFIG_LABEL} already {cfg} (state {labels.get(STATE_LABEL, 'unset')})")
    ctx.gw.patch_node_labels(ctx.node, {CONFIG_LABEL: cfg, STATE_LABEL: None})
    return Done(f"{CONFIG_LABEL}={cfg} (was {labels.get(CONFIG_LABEL, 'unset')})")


def _wait_state(ctx: Ctx) -> Done | Wait | Fail:
    labels = _labels(ctx)
    cfg, state = ctx.req.config_name, labels.get(STATE_LABEL, "")
    if labels.get(CONFIG_LABEL) != cfg:
        return Fail(f"{CONFIG_LABEL} changed to {labels.get(CONFIG_LABEL)!r} by someone else.")
    if state == "success":
        return Done(f"mig-manager applied {cfg}")
    if state == "failed":
        return Fail(f"mig-manager reports {STATE_LABEL}=failed for {cfg}.")
    if state == "rebooting" and not ctx.step.data.get("rebooting"):
        ctx.save_data(rebooting=True)
    if ctx.step.data.get("rebooting"):
        timeout = conf("MIG_REBOOT_TIMEOUT_SECONDS", 1800.0)
    else:
        timeout = conf("MIG_STATE_TIMEOUT_SECONDS", 900.0)
    if ctx.elapsed >= timeout:
        return Fail(
            f"mig-manager still reports {STATE_LABEL}={state or 'unset'} after {timeout:.0f}s "
            "(stuck; the portal's own timeout)."
        )
    return Wait(f"{STATE_LABEL}={state or 'unset'}", min(poll_seconds(), 5.0))


def _uncordon(ctx: Ctx) -> Done:
    cordon = ctx.req.steps.get(name=Step.CORDON)
    if cordon.status == MigStep.Status.SKIPPED:
        return Done("not cordoned by this run", skipped=True)
    if cordon.data.get("was_unschedulable"):
        return Done("left cordoned: it was cordoned before the run", skipped=True)
    ctx.gw.set_unschedulable(ctx.node, False)
    return Done("uncordoned")


def _resync(ctx: Ctx) -> Done | Wait:
    try:
        run = sync_cluster(ctx.req.cluster, trigger="mig", gateway=ctx.gw)
    except SyncBusy:
        return Wait("another inventory sync of the cluster is running")
    if run.status == run.Status.SUCCEEDED:
        return Done(f"inventory synced ({run.nodes_seen} nodes)")
    if ctx.step.attempts >= 5:
        return Done(f"inventory sync failed: {run.error}; the next scheduled sync catches up",
                    skipped=True)  # fmt: skip
    return Wait(f"inventory sync failed: {run.error}")


def _grant(ctx: Ctx) -> Done:
    """Grant the run's MIG resources to the team's namespace, in the transaction that
    finishes the run, and queue the ResourceQuota apply."""
    req = ctx.req
    product = catalog.resolve_product(req.product)
    resources = {
        r: int(n) for r, n in layout.resources_for(product, req.layout, req.gpus, req.strategy)
        .items() if int(n) > 0
    }  # fmt: skip

    def commit() -> None:
        now = timezone.now()
        for resource, amount in sorted(resources.items()):
            Grant.objects.create(namespace=req.namespace, resource=resource, amount=amount,
                                 starts_at=now, start_applied=True)  # fmt: skip
        MigRequest.objects.filter(pk=req.pk).update(granted=resources)
        enqueue_apply(req.namespace, reason="mig")
        audit.record(None, "mig.granted", req.namespace, team=req.team, after=resources,
                     note=f"MIG run {req.pk} on {req.node.name} ({req.config_name})")  # fmt: skip

    text = ", ".join(f"+{n} {r}" for r, n in sorted(resources.items()))
    return Done(f"granted {text} to {req.namespace}", commit=commit)


HANDLERS: dict[str, Callable[[Ctx], Done | Wait | Fail]] = {
    Step.CORDON: _cordon,
    Step.DRAIN: _drain,
    Step.WRITE_CONFIG: _write_config,
    Step.SET_LABEL: _set_label,
    Step.WAIT_STATE: _wait_state,
    Step.UNCORDON: _uncordon,
    Step.RESYNC: _resync,
    Step.GRANT: _grant,
}
