"""The coordinator's node steps: cordon, drain, uncordon, inventory resync and grant, and
the table of every step's handler (the config and label steps live in
``mig.config_steps`` and ``mig.state_steps``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.utils import timezone

from inventory.models import is_gpu_resource
from inventory.sync import sync_cluster
from inventory.syncdb import SyncBusy
from quotas import audit
from quotas.apply import enqueue_apply
from quotas.models import Grant

from . import catalog, config_steps, layout, state_steps
from .models import MigRequest, MigStep
from .stepbase import CONFIG_LABEL, Ctx, Done, Fail, Step, Wait, conf


def _cordoned_by_reverted_run(req: MigRequest) -> bool:
    """A revert of a run that cordoned the node and left it so (the stuck policy, or
    MIG_UNCORDON_ON_FAILURE off): the node was schedulable before that run, so the revert
    uncordons it at the end."""
    if req.kind != MigRequest.Kind.REVERT or req.reverts_id is None:
        return False
    cordon = MigStep.objects.filter(
        request_id=req.reverts_id, name=Step.CORDON, status=MigStep.Status.DONE
    ).first()
    return cordon is not None and cordon.data.get("was_unschedulable") is False


def _cordon(ctx: Ctx) -> Done:
    if "was_unschedulable" not in ctx.step.data:
        node = ctx.gw.get_node(ctx.node)
        labels = (node.get("metadata") or {}).get("labels") or {}
        was = bool((node.get("spec") or {}).get("unschedulable"))
        if was and _cordoned_by_reverted_run(ctx.req):
            ctx.save_data(was_unschedulable=False)
            return Done("still cordoned by the failed run this reverts; uncordoned at the end")
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
    """A non-terminal pod that asks for a GPU resource, or holds devices through DRA
    claims (on a DRA cluster the GPUs are claimed, not requested; a claim of another
    device on a GPU node is drained too: the cautious side)."""
    if ((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed"):
        return False
    spec = pod.get("spec") or {}
    if spec.get("resourceClaims") or (pod.get("status") or {}).get("extendedResourceClaimStatus"):
        return True
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
    Step.WRITE_CONFIG: config_steps.write_config,
    Step.CORDON: _cordon,
    Step.DRAIN: _drain,
    Step.WAIT_MOUNT: config_steps.wait_mount,
    Step.SET_LABEL: state_steps.set_label,
    Step.WAIT_STATE: state_steps.wait_state,
    Step.WAIT_DEVICES: state_steps.wait_devices,
    Step.UNCORDON: _uncordon,
    Step.RESYNC: _resync,
    Step.GRANT: _grant,
}
