"""MIG requests: validation, node proposals and the submit / approve / reject / cancel /
revert transitions.

The REST API, the pages and the admin all call these functions, so each rule lives in one
place. Every transition is one transaction with an audit event; starting the coordinator
is queued to run after it commits.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from inventory.models import GPU_RESOURCE, Cluster, GpuPod, Node, NodeResource
from quotas import audit
from quotas.capacity import headroom
from quotas.models import CapacityLock, Team, TeamNamespace
from quotas.services import check_may_file, clean_justification, clean_reason, is_manager

from . import catalog, layout, migparted
from .models import MigRequest, MigStep, TransitionError

STRATEGIES = ("single", "mixed")

Step = MigStep.Name
APPLY_STEPS = [Step.WRITE_CONFIG, Step.CORDON, Step.DRAIN, Step.WAIT_MOUNT, Step.SET_LABEL,
               Step.WAIT_STATE, Step.WAIT_DEVICES, Step.UNCORDON, Step.RESYNC,
               Step.GRANT]  # fmt: skip
# A revert sets a config the node had before: it is in the ConfigMap or a stock name
# already, and there is nothing to grant.
REVERT_STEPS = [Step.CORDON, Step.DRAIN, Step.SET_LABEL, Step.WAIT_STATE, Step.UNCORDON,
                Step.RESYNC]  # fmt: skip

__all__ = [
    "MigRequestData", "Proposal", "TransitionError", "approve", "cancel", "mig_nodes",
    "propose_nodes", "reject", "revert", "submit", "validate",
]  # fmt: skip


# -- nodes and products ------------------------------------------------------------------


def product_of(node: Node) -> catalog.Product | None:
    try:
        return catalog.resolve_product(node.base_product)
    except catalog.UnknownProduct:
        return None


def mig_nodes(cluster: Cluster, product: catalog.Product, *, enabled: bool = True) -> list[Node]:
    """Present MIG-capable nodes of ``product`` in the cluster; ``enabled``: only those
    whose ``nvidia.com/mig.strategy`` is single or mixed (with ``none`` or no label the
    device plugin advertises no MIG devices, so a layout there would never be usable)."""
    nodes = Node.objects.present().filter(cluster=cluster, mig_capable=True).order_by("name")
    if enabled:
        nodes = nodes.filter(mig_strategy__in=STRATEGIES)
    return [n for n in nodes if (p := product_of(n)) is not None and p.name == product.name]


MIG_DISABLED = (
    "MIG is disabled on {cluster}'s {product} nodes (nvidia.com/mig.strategy is none): an "
    "admin enables a MIG strategy in the GPU Operator first."
)


def node_strategy(node: Node) -> str:
    """The node's MIG strategy; anything but ``single`` behaves like ``mixed``."""
    return node.mig_strategy if node.mig_strategy in STRATEGIES else "mixed"


def cluster_strategy(nodes: list[Node]) -> str:
    """The strategy most of these nodes use (validation before a node is chosen)."""
    counts = Counter(node_strategy(n) for n in nodes)
    return counts.most_common(1)[0][0] if counts else "mixed"


def devices_for(node: Node, gpus: int) -> list[int] | str:
    """The GPUs a run reconfigures: the first ``gpus`` of the node, or all of them."""
    return "all" if gpus >= node.gpu_count else list(range(gpus))


def config_name_for(req: MigRequest, node: Node) -> str:
    """The product goes into the name: one ConfigMap serves every product of a cluster."""
    product = catalog.resolve_product(req.product)
    return migparted.config_name(req.layout, devices_for(node, req.gpus), product)


def layout_errors_on(req: MigRequest, product: catalog.Product, node: Node) -> list[str]:
    return layout.validate_node_layout(
        product, req.layout, req.gpus, node_strategy(node), node_gpus=node.gpu_count
    )


# -- validation ------------------------------------------------------------------------


@dataclass
class MigRequestData:
    team: Team
    namespace: TeamNamespace
    product: str
    layout: dict[str, int]
    gpus: int
    justification: str
    node: Node | None = None
    resolved: catalog.Product | None = field(default=None, repr=False)


def _check_layout(product: catalog.Product, lay: Any, gpus: int, strategy: str) -> list[str]:
    """Input errors (not an object, unknown profiles, bad counts) alone, else fit errors."""
    return layout.input_errors(product, lay) or layout.validate_node_layout(
        product, lay, gpus, strategy
    )


def validate(user, data: MigRequestData) -> MigRequestData:
    """Check every rule; raise ValidationError with a message per field.

    Normalises ``product`` to the catalog's short name (a GFD label is accepted) and
    takes it from the node when an admin names one.
    """
    errors: dict[str, str] = {}
    check_may_file(user, data.team)
    if data.namespace.team_id != data.team.pk:
        errors["namespace"] = f"Namespace {data.namespace} does not belong to team {data.team}."
    cluster = data.namespace.cluster
    node = data.node
    if node is not None:
        if not user.is_staff:
            errors["node"] = "Only admins may ask for a specific node."
        elif node.cluster_id != cluster.pk or node.gone_at is not None:
            errors["node"] = f"Node {node.name} is not in cluster {cluster.slug}."
        elif not node.mig_capable:
            errors["node"] = f"Node {node.name} is not MIG-capable."
        elif node.mig_strategy not in STRATEGIES:
            errors["node"] = (
                f"MIG is disabled on node {node.name} (nvidia.com/mig.strategy is "
                f"{node.mig_strategy or 'not set'})."
            )
        if not data.product:
            data.product = node.base_product
    product = None
    try:
        product = catalog.resolve_product(data.product or "")
    except catalog.UnknownProduct as exc:
        errors["product"] = str(exc)
    gpus_ok = isinstance(data.gpus, int) and not isinstance(data.gpus, bool) and data.gpus > 0
    if not gpus_ok:
        errors["gpus"] = "A positive whole number."
    if product is not None:
        data.product, data.resolved = product.name, product
        nodes = [node] if node is not None and "node" not in errors else mig_nodes(cluster, product)
        if node is not None and "node" not in errors and product_of(node) != product:
            errors["node"] = f"Node {node.name} has {node.gpu_product}, not {product.name}."
        elif not nodes:
            errors["product"] = (
                MIG_DISABLED.format(cluster=cluster.slug, product=product.name)
                if mig_nodes(cluster, product, enabled=False)
                else f"Cluster {cluster.slug} has no MIG-capable {product.name} node."
            )
        else:
            # Every problem in one round: the layout is checked whatever the GPU count.
            if gpus_ok and data.gpus > (most := max(n.gpu_count for n in nodes)):
                errors["gpus"] = f"Nodes of {product.name} here have at most {most} GPUs."
            problems = _check_layout(
                product, data.layout, data.gpus if gpus_ok and "gpus" not in errors else 1,
                cluster_strategy(nodes),
            )  # fmt: skip
            if problems:
                errors["layout"] = problems
    data.justification = clean_justification(data.justification, errors)
    if errors:
        raise ValidationError(errors)
    return data


# -- transitions -----------------------------------------------------------------------


def _audit(actor, action: str, req: MigRequest, before: str | None, note: str = "",
           **after: Any) -> None:  # fmt: skip
    audit.record(
        actor, f"mig.{action}", req, team=req.team,
        before={"status": before} if before else None,
        after={"status": req.status, **after}, note=note,
    )  # fmt: skip


@transaction.atomic
def submit(user, data: MigRequestData) -> MigRequest:
    data = validate(user, data)
    req = MigRequest.objects.create(
        team=data.team, namespace=data.namespace, cluster=data.namespace.cluster,
        product=data.product, layout=data.layout, gpus=data.gpus, requested_node=data.node,
        justification=data.justification, requested_by=user,
    )  # fmt: skip
    _audit(user, "submitted", req, None, layout=req.layout, gpus=req.gpus, product=req.product)
    return req


@dataclass
class Proposal:
    """A node the request could run on, and what choosing it would disrupt."""

    node: Node
    config_name: str
    in_config: bool  # already in this layout: nothing to disrupt
    pods: list[GpuPod]  # GPU pods that would be evicted (or waited for)

    @property
    def idle(self) -> bool:
        return not self.pods


def propose_nodes(req: MigRequest) -> list[Proposal]:
    """Nodes that can take the request: already in the layout first, then idle, then busy
    ones (fewest pods first). Nodes too small, with an invalid layout under their
    strategy, or with another active run are left out."""
    try:
        product = catalog.resolve_product(req.product)
    except catalog.UnknownProduct:
        return []
    busy_nodes = set(
        MigRequest.objects.filter(status__in=MigRequest.ACTIVE)
        .exclude(pk=req.pk)
        .values_list("node_id", flat=True)
    )
    candidates = [
        n for n in mig_nodes(req.cluster, product)
        if n.gpu_count >= req.gpus and n.pk not in busy_nodes
        and (req.requested_node_id is None or n.pk == req.requested_node_id)
        and not layout_errors_on(req, product, n)
    ]  # fmt: skip
    pods: dict[Any, list[GpuPod]] = {n.pk: [] for n in candidates}
    for pod in GpuPod.objects.filter(node__in=candidates).order_by("namespace", "name"):
        pods[pod.node_id].append(pod)
    proposals = []
    for n in candidates:
        name = config_name_for(req, n)
        in_config = n.mig_config == name and n.mig_config_state == "success"
        proposals.append(Proposal(n, name, in_config, pods[n.pk]))
    proposals.sort(key=lambda p: (not p.in_config, len(p.pods), p.node.name))
    return proposals


def with_health(proposals: list[Proposal]) -> list[Proposal]:
    """Attach each proposed node's health badges (``inventory.health``: not ready,
    cordoned, unhealthy GPU, driver skew, ...) as ``node.badges``; two queries."""
    from django.db.models import prefetch_related_objects

    from inventory.health import node_badges, usual_drivers

    nodes = [p.node for p in proposals]
    prefetch_related_objects(nodes, "resources")
    usual = usual_drivers(Node.objects.all()) if nodes else {}
    for node in nodes:
        node.badges = node_badges(node, usual)
    return proposals


def preferred(proposals: list[Proposal]) -> Proposal | None:
    """The proposal an approver starts from: the top-ranked one whose node has no
    error-level health badge (else the top-ranked). Call :func:`with_health` first."""
    healthy = (p for p in proposals if not any(b.level == "error" for b in p.node.badges))
    return next(healthy, proposals[0] if proposals else None)


def _create_steps(req: MigRequest, names: list[str], skip: dict[str, str]) -> None:
    MigStep.objects.bulk_create(
        MigStep(request=req, position=i, name=name,
                status=MigStep.Status.SKIPPED if name in skip else MigStep.Status.PENDING,
                detail=skip.get(name, ""))
        for i, name in enumerate(names)
    )  # fmt: skip


def _save_run(req: MigRequest) -> None:
    """Save an approved run; the partial unique index refuses a second one on the node."""
    try:
        with transaction.atomic():
            req.save()
    except IntegrityError as exc:
        if "migrequest_one_active_run_per_node" in str(exc):
            raise ValidationError(
                {"node": f"Another MIG run is active on node {req.node.name}; try when it ends."}
            ) from exc
        raise


def _start(req: MigRequest) -> None:
    from .coordinator import dispatch

    transaction.on_commit(lambda: dispatch(req.pk))


def _pools_shrinking(req: MigRequest, node: Node, product: catalog.Product) -> dict[str, int]:
    """How much of each resource the node stops advertising once the run is done.

    From the node's current per-GPU layouts where the portal knows them (a stock or
    portal config, or GFD counts); else only the whole GPUs the run turns into slices.
    """
    from .drawing import current_layouts  # drawing uses this module's helpers

    devices = devices_for(node, req.gpus)
    indexes = list(range(node.gpu_count)) if devices == "all" else list(devices)
    strategy = node_strategy(node)
    layouts, _ = current_layouts(node, product)
    if layouts is None:
        row = NodeResource.objects.filter(node=node, resource=GPU_RESOURCE).first()
        return {GPU_RESOURCE: min(req.gpus, row.allocatable if row else 0)}
    before: Counter[str] = Counter()
    for i in indexes:
        current = layouts[i] if i < len(layouts) else None
        if current is None:  # MIG off on that GPU: one whole GPU
            before[GPU_RESOURCE] += 1
        elif current:
            before.update(layout.resources_for(product, current, 1, strategy))
    after = layout.resources_for(product, req.layout, len(indexes), strategy)
    return {r: n - after.get(r, 0) for r, n in before.items() if n > after.get(r, 0)}


def _check_capacity_after(req: MigRequest, node: Node, product: catalog.Product) -> None:
    """Refuse a run that shrinks a pool below what grants already reserve from it.

    Turning whole GPUs into slices shrinks ``nvidia.com/gpu``; re-laying out MIG GPUs
    shrinks the old profiles' pools. If grants count on more than a smaller pool allows,
    quotas would promise devices that no longer exist. Locks each pool like a quota
    approval does.
    """
    for resource, shrink in sorted(_pools_shrinking(req, node, product).items()):
        lock, _ = CapacityLock.objects.get_or_create(cluster=node.cluster, resource=resource)
        CapacityLock.objects.select_for_update().get(pk=lock.pk)
        room = headroom(node.cluster, resource, timezone.now(), None)
        left = math.floor((room.allocatable - shrink) * room.ratio)
        if room.reserved > left:
            raise ValidationError(
                {
                    "node": (
                        f"Reconfiguring {req.gpus} GPUs of {node.name} leaves {left} {resource} "
                        f"on {node.cluster.slug} for the {room.reserved} that grants reserve; "
                        "end or shrink those grants first."
                    )
                }
            )


@transaction.atomic
def approve(req: MigRequest, by, *, node: Node, drain_policy: str, note: str = "") -> MigRequest:
    """Approve on ``node`` with a drain policy (admins) and start the coordinator."""
    if not by.is_staff:
        raise PermissionError("Only portal admins approve MIG requests.")
    req = MigRequest.objects.select_for_update(of=("self",)).select_related("team").get(pk=req.pk)
    if req.status != MigRequest.Status.PENDING:
        raise TransitionError(f"A {req.status} MIG request cannot be approved.")
    if drain_policy not in MigRequest.DrainPolicy.values:
        raise ValidationError({"drain_policy": "Choose 'wait' or 'evict'."})
    product = catalog.resolve_product(req.product)
    node = Node.objects.select_for_update().get(pk=node.pk)
    if node.cluster_id != req.cluster_id or node.gone_at is not None or not node.mig_capable:
        raise ValidationError({"node": f"{node.name} is not a MIG-capable node of this cluster."})
    if product_of(node) != product:
        raise ValidationError({"node": f"{node.name} has {node.gpu_product}, not {product.name}."})
    if node.gpu_count < req.gpus:
        raise ValidationError({"node": f"{node.name} has only {node.gpu_count} GPUs."})
    problems = layout_errors_on(req, product, node)
    if problems:
        raise ValidationError({"node": f"Layout invalid on {node.name}: " + " ".join(problems)})
    _check_capacity_after(req, node, product)
    name = config_name_for(req, node)
    req.approve(by, node=node, drain_policy=drain_policy, strategy=node_strategy(node),
                config_name=name, note=(note or "").strip()[:2000])  # fmt: skip
    _save_run(req)
    skip = {}
    if node.mig_config == name and node.mig_config_state == "success":
        why = f"node already in {name}: nothing to disrupt"
        skip = {Step.CORDON: why, Step.DRAIN: why}
    _create_steps(req, APPLY_STEPS, skip)
    _audit(by, "approved", req, MigRequest.Status.PENDING, note=req.decision_note,
           node=node.name, drain_policy=drain_policy, config=name)  # fmt: skip
    notify_team(req, "mig_decided", f"MIG request approved: {req.layout_text} on {node.name}",
                req.decision_note)  # fmt: skip
    _start(req)
    return req


@transaction.atomic
def reject(req: MigRequest, by, reason: str) -> MigRequest:
    if not by.is_staff:
        raise PermissionError("Only portal admins reject MIG requests.")
    reason = clean_reason(reason)
    req = MigRequest.objects.select_for_update(of=("self",)).select_related("team").get(pk=req.pk)
    before = req.status
    req.reject(by, reason[:2000])
    req.save()
    _audit(by, "rejected", req, before, note=reason)
    notify_team(req, "mig_decided", f"MIG request rejected: {req.layout_text}", reason)
    return req


@transaction.atomic
def cancel(req: MigRequest, by, note: str = "") -> MigRequest:
    """The requester, a team manager or an admin withdraws a pending request."""
    req = MigRequest.objects.select_for_update(of=("self",)).select_related("team").get(pk=req.pk)
    if not (by.is_staff or req.requested_by_id == by.pk or is_manager(by, req.team)):
        raise PermissionError("Only the requester, a team manager or an admin may cancel.")
    before = req.status
    req.cancel()
    req.save()
    _audit(by, "cancelled", req, before, note=note)
    return req


@transaction.atomic
def revert(req: MigRequest, by) -> MigRequest:
    """Put the node of a failed run back to its previous config, through the coordinator.

    Returns the new revert run (a MigRequest of kind ``revert``, approved at once).
    """
    if not by.is_staff:
        raise PermissionError("Only portal admins revert MIG runs.")
    req = (
        MigRequest.objects.select_for_update(of=("self",))
        .select_related("team", "node")
        .get(pk=req.pk)
    )
    if not req.can_revert:
        raise TransitionError("Only a failed run that changed the node's config can be reverted.")
    active = (MigRequest.Status.APPROVED, MigRequest.Status.RUNNING, MigRequest.Status.SUCCEEDED)
    if req.reverted_by.filter(status__in=active).exists():
        raise TransitionError("This run is already reverted (or its revert is running).")
    now = timezone.now()
    run = MigRequest(
        kind=MigRequest.Kind.REVERT, reverts=req, team=req.team, namespace=req.namespace,
        cluster=req.cluster, product=req.product, layout={}, gpus=req.gpus,
        justification=f"Revert of failed MIG run {req.pk}", requested_by=by,
        status=MigRequest.Status.APPROVED, decided_by=by, decided_at=now,
        drain_policy=req.drain_policy, node=req.node, strategy=req.strategy,
        config_name=req.previous_config, previous_config=req.config_name,
    )  # fmt: skip
    _save_run(run)
    _create_steps(run, REVERT_STEPS, {})
    _audit(by, "revert_started", run, None, node=req.node.name, config=run.config_name,
           reverts=str(req.pk))  # fmt: skip
    _start(run)
    return run


def alert_admins(req: MigRequest, stuck: bool = False) -> None:
    """E-mail staff about a failed run (after commit; mail trouble never fails the run).
    ``stuck``: the node was left cordoned with its GPU operands paused (the error says how
    to restore it)."""
    from django.conf import settings
    from django.core.mail import send_mail

    emails = list(
        get_user_model().objects.filter(is_staff=True, is_active=True)
        .exclude(email="").values_list("email", flat=True)
    )  # fmt: skip
    node = req.node.name if req.node else "?"
    subject = f"[GPU portal] MIG reconfiguration of {node} failed"
    if stuck:
        subject = f"[GPU portal] MIG reconfiguration of {node} is stuck: node left cordoned"
    after = (
        "The node was left CORDONED: its GPU operands are paused. Follow the commands above."
        if stuck else "The node was uncordoned where the portal had cordoned it."
    )  # fmt: skip
    body = (
        f"The MIG run {req.pk} ({req.layout_text} on {req.gpus} GPU(s) of {node}, config "
        f"{req.config_name}) failed:\n\n{req.error}\n\n{after} "
        f"Its previous config was {req.previous_config or '?'}; "
        "an admin can revert to it from the request's page or the API.\n"
    )
    notify_team(req, "mig_failed", subject.removeprefix("[GPU portal] "), body, admins=True)

    def deliver() -> None:
        try:
            send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, emails)
        except Exception:  # an alert must not break the coordinator
            import logging

            logging.getLogger(__name__).exception("could not e-mail the MIG failure alert")

    if emails:
        transaction.on_commit(deliver)


# -- in-app notices and webhooks (notices/, issue #12 section 2) ----------------------------


def notify_team(req: MigRequest, event: str, title: str, body: str = "", *,
                admins: bool = False) -> None:  # fmt: skip
    """The requester and the team's managers (with ``admins``: every admin too) get an
    in-app notice, and the event's webhooks are told, when the caller's transaction
    commits."""
    from django.urls import reverse

    import notices
    from quotas.models import Membership

    people = [req.requested_by, *(
        m.user for m in Membership.objects.filter(team=req.team, role=Membership.Role.MANAGER)
        .select_related("user")
    )]  # fmt: skip
    if admins:
        people += list(get_user_model().objects.filter(is_staff=True, is_active=True))
    notices.notify(people, event=event, title=title, body=body or "",
                   url=reverse("mig:request", args=[req.pk]), team=req.team)  # fmt: skip
