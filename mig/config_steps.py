"""Coordinator steps that put the run's config where mig-manager reads it.

``write_config`` merges the run's ``portal-…`` config into the ConfigMap the GPU
Operator's ClusterPolicy names (mig/operator.py), creating it with the stock configs kept.
``wait_mount`` then waits out the kubelet: a ConfigMap volume follows a write only on the
kubelet's next sync (about a minute; kubelet configMapAndSecretChangeDetectionStrategy), and
mig-manager publishes nothing that says which version it sees (with a custom config it
writes no ``<node>-mig-config`` ConfigMap: mig-parted cmd/nvidia-mig-manager/main.go
setupMigConfig returns before createNodeConfigMap). A label set earlier is judged against
the old file: ``failed`` without ``pending`` (pkg/mig/reconfigure/reconfigure.go Run →
validateMigConfig), and mig-manager never retries by itself (main.go SyncableMigConfig).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import yaml
from django.utils import timezone

from inventory.kube import KubeError
from inventory.models import Node

from . import catalog, migparted, operator
from .models import MigRequest
from .services import devices_for
from .state_steps import DECOY
from .stepbase import Ctx, Done, Fail, Wait, conf

# When the portal last wrote its ConfigMap (ISO 8601, the portal's clock): a config that
# was already there may still be on its way to mig-manager's mount.
WRITTEN_AT = "gpu-quota-portal.io/written-at"


def mount_seconds() -> float:
    return float(conf("MIG_CONFIG_MOUNT_SECONDS", 90.0))


def _dump(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


def _entries(req: MigRequest, node: Node) -> list[dict]:
    product = catalog.resolve_product(req.product)
    return migparted.config_entries(
        product, req.layout, devices_for(node, req.gpus), node.gpu_count
    )


def _base_configs(ctx: Ctx) -> tuple[dict[str, Any], str]:
    """What a new ConfigMap starts from: the operator's default ConfigMap when it can be
    read (it holds the stock configs of the operator version installed, and any site
    configs the nodes were set up with), else the vendored stock set."""
    namespace = operator.configmap_namespace()
    try:
        default = ctx.gw.get_config_map(namespace, operator.DEFAULT_CONFIGMAP)
    except KubeError as err:
        if err.status not in (401, 403):
            raise
        default = None
    configs = operator.configs_of(default)
    if configs:
        return configs, f"{namespace}/{operator.DEFAULT_CONFIGMAP}"
    return dict(operator.stock_configs()), "the GPU Operator's stock configs"


def _labelled_configs(ctx: Ctx, configs: dict[str, Any]) -> list[str]:
    """Add the config of every node labelled with a portal config the map lacks (from the
    run that set it), so a restarted mig-manager finds each node's config. Returns the
    labelled names nothing could supply."""
    missing = []
    nodes = Node.objects.filter(cluster=ctx.req.cluster, gone_at__isnull=True).exclude(
        mig_config=""
    )
    for node in nodes:
        name = node.mig_config
        if name in configs or name in (ctx.req.config_name, DECOY):
            continue
        if name in operator.stock_configs():  # a stock name the map lacks
            configs[name] = operator.stock_configs()[name]
            continue
        run = (
            MigRequest.objects.filter(
                cluster=ctx.req.cluster, config_name=name, kind=MigRequest.Kind.APPLY
            )
            .exclude(layout={})
            .order_by("-created_at")
            .first()
        )
        try:
            configs[name] = _entries(run, node) if run is not None else None
        except (catalog.UnknownProduct, ValueError):
            configs[name] = None
        if configs[name] is None:
            del configs[name]
            missing.append(f"{node.name}={name}")
    return missing


def write_config(ctx: Ctx) -> Done | Fail:
    """Merge the run's config into the ClusterPolicy's ConfigMap (read-modify-write with the
    resourceVersion read, so a concurrent writer makes the PUT fail with 409 and we merge
    again on a fresh copy). Creates the ConfigMap when missing, so mig-manager can mount
    it; when the ClusterPolicy does not name it yet, the run fails with the patch to make."""
    req = ctx.req
    try:
        operator.check_policy(ctx.gw.list_cluster_policies())
        problem = None
    except operator.OperatorProblem as err:
        problem = str(err)
        if "names no custom" not in problem:
            return Fail(f"write_config: {problem}")
    namespace, name = operator.configmap_namespace(), operator.configmap_name()
    entries = _entries(req, req.node)
    for _ in range(5):
        now = timezone.now()
        cm = ctx.gw.get_config_map(namespace, name)
        original = operator.configs_of(cm)
        if cm is None:
            configs, source = _base_configs(ctx)
        elif original is None:
            return Fail(
                f"write_config: ConfigMap {namespace}/{name} holds no valid mig-parted "
                "config.yaml; not touching it."
            )
        else:
            configs, source = dict(original), ""
        missing = _labelled_configs(ctx, configs)
        configs[req.config_name] = entries
        if cm is not None and configs == original:
            written = _written_at(cm)
            ctx.save_data(written_at=written.isoformat() if written else None, wrote=False)
            if problem:
                return _setup_fail(ctx, problem, namespace, name)
            return Done(f"{req.config_name} already in {namespace}/{name}")
        text = _dump({"version": "v1", "mig-configs": configs})
        stamp = {WRITTEN_AT: now.isoformat()}
        try:
            if cm is None:
                ctx.gw.create_config_map(namespace, name, {"config.yaml": text}, stamp)
            else:
                meta = cm.setdefault("metadata", {})
                meta["annotations"] = {**(meta.get("annotations") or {}), **stamp}
                cm["data"] = {**(cm.get("data") or {}), "config.yaml": text}
                ctx.gw.replace_config_map(namespace, cm)
        except KubeError as err:
            if err.status == 409:
                continue
            raise
        ctx.save_data(written_at=now.isoformat(), wrote=True, unsupplied=missing)
        if problem:
            return _setup_fail(ctx, problem, namespace, name)
        what = f"created {namespace}/{name} from {source}" if cm is None else (
            f"wrote {req.config_name} into {namespace}/{name}"
        )  # fmt: skip
        note = f"; no config known for {', '.join(missing)}" if missing else ""
        return Done(f"{what} ({len(configs)} configs){note}")
    raise KubeError(f"ConfigMap {namespace}/{name} kept changing; will merge again")


def _setup_fail(ctx: Ctx, problem: str, namespace: str, name: str) -> Fail:
    ctx.save_data(setup_command=operator.patch_command())
    return Fail(
        f"write_config: {problem} The portal has written {namespace}/{name} (the stock configs "
        "and this run's), so mig-manager can mount it once the ClusterPolicy names it; then "
        "file the request again."
    )


def _written_at(cm: dict[str, Any]) -> datetime | None:
    value = ((cm.get("metadata") or {}).get("annotations") or {}).get(WRITTEN_AT)
    try:
        return datetime.fromisoformat(value) if value else None
    except ValueError:
        return None


def ready_at(data: dict[str, Any]) -> datetime | None:
    """When mig-manager's mount has the config (the write plus MIG_CONFIG_MOUNT_SECONDS)."""
    written = data.get("written_at")
    if not written:
        return None
    return datetime.fromisoformat(written) + timedelta(seconds=mount_seconds())


def wait_mount(ctx: Ctx) -> Done | Wait:
    """Wait until the kubelet has had time to update mig-manager's mounted config."""
    write = ctx.req.steps.filter(name="write_config").first()
    ready = ready_at(write.data) if write is not None else None
    if ready is None:
        return Done("the config was not written by the portal recently: nothing to wait for")
    left = (ready - ctx.now).total_seconds()
    if left <= 0:
        return Done(f"mount delay over ({mount_seconds():.0f}s after the ConfigMap write)")
    ctx.save_data(ready_at=ready.isoformat())
    return Wait(
        f"waiting for the kubelet to update mig-manager's mounted config: {left:.0f}s left "
        f"(MIG_CONFIG_MOUNT_SECONDS={mount_seconds():.0f} after the ConfigMap write)",
        countdown=left,
    )
