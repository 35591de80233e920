"""Coordinator steps that talk to mig-manager through node labels, as it really behaves.

NVIDIA/mig-parted pkg/mig/reconfigure/reconfigure.go Run(): validateMigConfig (a config
absent from the mounted file: ``failed``, no ``pending``) → already applied: ``success`` →
``pending`` → operands paused (``nvidia.com/gpu.deploy.*=paused-for-mig-change``) →
waitForPodsToBeDeleted (5 min per kind; on timeout Run returns WITHOUT a state: the node
stays ``pending`` with the operands paused) → MIG mode change (``rebooting`` only when it
fails and WITH_REBOOT is set) → apply → operands restored → ``success`` | ``failed``.
cmd/nvidia-mig-manager/main.go: the label is re-read only when it CHANGES
(SyncableMigConfig.Get blocks while lastRead == current); nothing retries by itself.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from quotas import audit

from . import catalog, layout
from .stepbase import (
    CONFIG_LABEL,
    OPERAND_LABELS,
    PAUSED,
    STATE_LABEL,
    Ctx,
    Done,
    Fail,
    Wait,
    conf,
    node_labels,
    poll_seconds,
)

# A label value no mig-parted file holds (portal configs end in -d<n>… or -all), so
# validateMigConfig refuses it without touching the GPUs: setting it and then the real
# name again is a label CHANGE, the only thing that makes mig-manager look again.
DECOY = "portal-relabel-not-a-config"


def set_label(ctx: Ctx) -> Done:
    """Set the config label and clear the state label, so a stale ``success`` of the old
    config cannot be mistaken for the new one (mig-manager writes a fresh state)."""
    labels = node_labels(ctx)
    cfg = ctx.req.config_name
    if labels.get(CONFIG_LABEL) == cfg:
        return Done(f"{CONFIG_LABEL} already {cfg} (state {labels.get(STATE_LABEL, 'unset')})")
    ctx.gw.patch_node_labels(ctx.node, {CONFIG_LABEL: cfg, STATE_LABEL: None})
    return Done(f"{CONFIG_LABEL}={cfg} (was {labels.get(CONFIG_LABEL, 'unset')})")


def _since(ctx: Ctx) -> float:
    """Seconds since the label was last set to the run's config (by set_label or a relabel)."""
    since = ctx.step.data.get("since")
    start = datetime.fromisoformat(since) if since else ctx.step.started_at
    return (ctx.now - start).total_seconds()


def _paused(labels: dict[str, str]) -> list[str]:
    return [k for k in OPERAND_LABELS if labels.get(k) == PAUSED]


def _relabel(ctx: Ctx, why: str) -> Wait:
    """First half of a relabel: the decoy, whose refusal we wait for before the real name
    (set both at once and mig-manager may never see the change: Get compares values)."""
    attempts = ctx.step.data.get("relabels", [])
    attempts.append({"at": ctx.now.isoformat(), "why": why})
    ctx.save_data(relabels=attempts, phase="decoy")
    ctx.gw.patch_node_labels(ctx.node, {CONFIG_LABEL: DECOY, STATE_LABEL: None})
    audit.record(
        None, "mig.relabelled", ctx.req, team=ctx.req.team,
        after={"node": ctx.node, "config": ctx.req.config_name, "attempt": len(attempts)},
        note=why,
    )  # fmt: skip
    return Wait(f"relabel {len(attempts)}: {why}; set {CONFIG_LABEL}={DECOY} first", 0)


def _decoy(ctx: Ctx, labels: dict[str, str]) -> Done | Wait | Fail:
    live, state = labels.get(CONFIG_LABEL), labels.get(STATE_LABEL, "")
    cfg = ctx.req.config_name
    if live == cfg:  # the decoy's patch never happened (a worker died in between): again
        ctx.gw.patch_node_labels(ctx.node, {CONFIG_LABEL: DECOY, STATE_LABEL: None})
        return Wait(f"relabel: set {CONFIG_LABEL}={DECOY}", 0)
    if live != DECOY:
        return Fail(f"{CONFIG_LABEL} changed to {live!r} by someone else during a relabel.")
    if state == "failed":
        # Saved before the patch: a retry that finds the decoy still set patches again.
        ctx.save_data(phase="real", since=ctx.now.isoformat(), seen_pending=False)
        ctx.gw.patch_node_labels(ctx.node, {CONFIG_LABEL: cfg, STATE_LABEL: None})
        n = len(ctx.step.data.get("relabels", []))
        return Wait(f"relabel {n}: mig-manager refused {DECOY}; {CONFIG_LABEL}={cfg} again", 0)
    if _since(ctx) >= conf("MIG_STATE_TIMEOUT_SECONDS", 900.0):
        return Fail(f"mig-manager never answered the relabel ({CONFIG_LABEL}={DECOY}).")
    return Wait(f"relabel: waiting for mig-manager to refuse {DECOY}", min(poll_seconds(), 5.0))


def wait_state(ctx: Ctx) -> Done | Wait | Fail:
    labels = node_labels(ctx)
    if ctx.step.data.get("phase") == "decoy":
        return _decoy(ctx, labels)
    cfg, state = ctx.req.config_name, labels.get(STATE_LABEL, "")
    if labels.get(CONFIG_LABEL) == DECOY and ctx.step.data.get("phase") == "real":
        ctx.gw.patch_node_labels(ctx.node, {CONFIG_LABEL: cfg, STATE_LABEL: None})
        return Wait(f"relabel: {CONFIG_LABEL}={cfg} again", 0)
    if labels.get(CONFIG_LABEL) != cfg:
        return Fail(f"{CONFIG_LABEL} changed to {labels.get(CONFIG_LABEL)!r} by someone else.")
    paused = _paused(labels)
    if (state in ("pending", "rebooting") or paused) and not ctx.step.data.get("seen_pending"):
        ctx.save_data(seen_pending=True)
    if state == "success":
        relabels = len(ctx.step.data.get("relabels", []))
        return Done(f"mig-manager applied {cfg}" + (f" after {relabels} relabel(s)" if relabels
                                                    else ""))  # fmt: skip
    if state == "failed":
        tries = len(ctx.step.data.get("relabels", []))
        if not ctx.step.data.get("seen_pending") and tries < conf("MIG_RELABEL_ATTEMPTS", 3):
            return _relabel(
                ctx,
                f"{STATE_LABEL}=failed without pending: mig-manager judged "
                f"{cfg} against a config file without it (mount not updated)",
            )
        return Fail(f"mig-manager reports {STATE_LABEL}=failed for {cfg}"
                    + (f" (after {tries} relabel(s))." if tries else "."))  # fmt: skip
    if state == "rebooting" and not ctx.step.data.get("rebooting"):
        ctx.save_data(rebooting=True)
    if ctx.step.data.get("rebooting"):
        timeout = conf("MIG_REBOOT_TIMEOUT_SECONDS", 1800.0)
    else:
        timeout = conf("MIG_STATE_TIMEOUT_SECONDS", 900.0)
    if _since(ctx) >= timeout:
        return _stuck(ctx, state, paused, timeout)
    return Wait(f"{STATE_LABEL}={state or 'unset'}", min(poll_seconds(), 5.0))


def _stuck(ctx: Ctx, state: str, paused: list[str], timeout: float) -> Fail:
    """The stuck policy: a node whose operands mig-manager left paused has no device plugin,
    so it stays cordoned and the admins get the commands that restore it."""
    error = (
        f"mig-manager still reports {STATE_LABEL}={state or 'unset'} after {timeout:.0f}s "
        "(stuck; the portal's own timeout)."
    )
    if not paused:
        return Fail(error)
    ctx.save_data(stuck=True, paused=paused)
    restore = " ".join(f"{k}=true" for k in paused)
    keep = (
        f"The node stays cordoned: mig-manager left {', '.join(paused)}={PAUSED}, so it has no "
        "device plugin (mig-manager gives up after 5 minutes waiting for GPU client pods to "
        "stop and does not retry until the config label changes). Find what still holds the "
        f"GPUs (kubectl get pods -A --field-selector spec.nodeName={ctx.node}), then either "
        f"restore the operands: kubectl label node {ctx.node} {restore} --overwrite && "
        f"kubectl uncordon {ctx.node}; or revert the run from its page: mig-manager reads "
        "the label change, finds the old config still applied, answers success and restores "
        "the operands itself, and the revert uncordons the node."
    )
    return Fail(error, keep_cordoned=keep)


def expected_devices(ctx: Ctx) -> dict[str, int]:
    """What the node advertises once the run's config is applied: the config enables the
    run's GPUs with the layout and disables every other GPU (mig/migparted.py)."""
    req = ctx.req
    product = catalog.resolve_product(req.product)
    want = {r: int(n) for r, n in
            layout.resources_for(product, req.layout, req.gpus, req.strategy).items()}  # fmt: skip
    if req.strategy == "mixed":
        want["nvidia.com/gpu"] = max(req.node.gpu_count - req.gpus, 0)
    return want


def _mismatch(node: dict[str, Any], want: dict[str, int]) -> list[str]:
    status = node.get("status") or {}
    alloc = status.get("capacity") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    out = []
    keys = set(want) | {k for k in alloc if k.startswith("nvidia.com/mig-")}
    for key in sorted(keys):
        n, have = want.get(key, 0), int(str(alloc.get(key, "0")) or 0)
        if have != n:
            out.append(f"capacity {key}={have} (want {n})")
        if key.startswith("nvidia.com/mig-") and n:
            count = labels.get(f"{key}.count", "")
            if count != str(n):
                out.append(f"label {key}.count={count or 'unset'} (want {n})")
    return out


def wait_devices(ctx: Ctx) -> Done | Wait | Fail:
    """After ``success`` the device plugin and GFD restart: capacity and the GFD
    ``nvidia.com/mig-<profile>.count`` labels change seconds later. Grant only once they
    show the new layout."""
    if not ctx.req.layout:
        return Done("no layout to check (a revert)", skipped=True)
    want = expected_devices(ctx)
    wrong = _mismatch(ctx.gw.get_node(ctx.node), want)
    if not wrong:
        text = ", ".join(f"{n} {r}" for r, n in sorted(want.items()) if n)
        return Done(f"the node advertises the new layout: {text}")
    timeout = conf("MIG_DEVICES_TIMEOUT_SECONDS", 300.0)
    if ctx.elapsed >= timeout:
        return Fail(
            f"mig-manager reported success but after {timeout:.0f}s the node still shows "
            f"{'; '.join(wrong)}: check the device plugin and GPU feature discovery pods."
        )
    return Wait(f"waiting for the device plugin and GFD: {'; '.join(wrong)}",
                min(poll_seconds(), 5.0))  # fmt: skip
