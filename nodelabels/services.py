"""Label sets: validation, changes (audited, each enqueuing per-node operations), desired
labels per node, applying an operation through the gateway, and the drift check.

Ownership rule: the portal only ever removes a key it applied itself (recorded in
``NodeLabelState.applied``) and only while the node still carries the portal's value; a
label someone else owns, or took over by changing its value, is never touched.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.postgres.expressions import ArraySubquery
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F, OuterRef, Subquery
from django.db.models.functions import JSONObject
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from inventory.kube import KubeError, KubeGateway
from inventory.models import Cluster, Node
from portal import broker, outbox
from quotas import audit

from .models import LabelOperation, LabelSet, NodeLabelState

log = logging.getLogger(__name__)

EDITABLE = ("cluster", "name", "description", "labels", "node_names", "gpu_product", "enabled")


def lease() -> timedelta:
    """How long a claimed operation may run before beat assumes its worker died."""
    return timedelta(seconds=getattr(settings, "NODELABEL_OPERATION_LEASE_SECONDS", 300))


def backoff(attempt: int) -> timedelta:
    """5 s, 10 s, 20 s, … capped at 10 minutes."""
    return timedelta(seconds=min(5 * 2 ** max(attempt - 1, 0), 600))


def _require_staff(actor) -> None:
    if actor is None or not actor.is_staff:
        raise PermissionError("Only portal admins can manage node labels.")


# -- matching and desired labels ------------------------------------------------------------


def _products(product: str) -> list[str]:
    """GFD product labels whose base product is ``product``."""
    return [product, f"{product}-SHARED", f"{product}-MIG-INVALID"]


def desired_for(node: Node, label_sets: Iterable[LabelSet]) -> dict[str, str]:
    """The union of the labels of the enabled ``label_sets`` that select ``node``.

    Validation refuses two sets giving one key different values on a node; should it happen
    anyway (a node changed product), the oldest set wins, deterministically.
    """
    ordered = sorted(label_sets, key=lambda s: (s.created_at, str(s.pk)))
    out: dict[str, str] = {}
    for label_set in ordered:
        if label_set.enabled and label_set.matches(node):
            for key, value in label_set.labels.items():
                out.setdefault(key, value)
    return out


def desired_labels(node: Node) -> dict[str, str]:
    """The labels the portal wants on ``node`` now (empty for a node that is gone)."""
    if node.gone_at is not None:
        return {}
    return desired_for(node, LabelSet.objects.enabled().filter(cluster_id=node.cluster_id))


def matched_nodes(label_set: LabelSet) -> list[Node]:
    """Present inventory nodes the selector picks."""
    qs = Node.objects.present().filter(cluster_id=label_set.cluster_id)
    if label_set.gpu_product:
        return list(qs.filter(gpu_product__in=_products(label_set.gpu_product)))
    return list(qs.filter(name__in=label_set.node_names))


def plan_patch(
    current: dict[str, str], desired: dict[str, str], applied: dict[str, str]
) -> dict[str, str | None]:
    """The merge patch that makes ``current`` carry ``desired``: set what differs, and
    remove keys the portal applied before and no longer wants, while they still hold the
    portal's value."""
    patch: dict[str, str | None] = {k: v for k, v in desired.items() if current.get(k) != v}
    for key, value in applied.items():
        if key not in desired and key in current and current[key] == value:
            patch[key] = None
    return patch


# -- validation -----------------------------------------------------------------------------


def _may_share_nodes(a: LabelSet, b: LabelSet) -> bool:
    if a.gpu_product and b.gpu_product:
        return a.gpu_product == b.gpu_product
    if not a.gpu_product and not b.gpu_product:
        return bool(set(a.node_names) & set(b.node_names))
    named, by_product = (a, b) if b.gpu_product else (b, a)
    return (
        Node.objects.present()
        .filter(
            cluster_id=named.cluster_id,
            name__in=named.node_names,
            gpu_product__in=_products(by_product.gpu_product),
        )
        .exists()
    )


def check_conflicts(label_set: LabelSet) -> None:
    """Refuse a key another enabled set of the cluster gives a different value on a node
    both select."""
    if not label_set.enabled:
        return
    others = LabelSet.objects.enabled().filter(cluster_id=label_set.cluster_id)
    if label_set.pk is not None:
        others = others.exclude(pk=label_set.pk)
    messages = []
    for other in others.order_by("name"):
        clashing = sorted(
            key
            for key, value in label_set.labels.items()
            if key in other.labels and other.labels[key] != value
        )
        if clashing and _may_share_nodes(label_set, other):
            for key in clashing:
                messages.append(
                    f"'{key}' conflicts with label set {other.name}, which sets it to "
                    f"'{other.labels[key]}' on some of the same nodes."
                )
    if messages:
        raise ValidationError({"labels": messages})


def validate(label_set: LabelSet) -> None:
    """Every rule, as field errors: shape (``LabelSet.clean``), name, conflicts."""
    errors: dict[str, list[str]] = {}
    try:
        label_set.full_clean(exclude=["created_by"], validate_constraints=False)
    except ValidationError as err:
        errors.update(err.message_dict)
    if "name" not in errors and label_set.cluster_id:
        taken = LabelSet.objects.filter(cluster_id=label_set.cluster_id, name=label_set.name)
        if label_set.pk is not None:
            taken = taken.exclude(pk=label_set.pk)
        if taken.exists():
            errors["name"] = ["This cluster already has a label set with this name."]
    if "labels" not in errors and "node_names" not in errors and label_set.cluster_id:
        try:
            check_conflicts(label_set)
        except ValidationError as err:
            errors.update(err.message_dict)
    if errors:
        raise ValidationError(errors)


# -- changes --------------------------------------------------------------------------------


def _snapshot(label_set: LabelSet) -> dict[str, Any]:
    return {
        "cluster": label_set.cluster.slug,
        "name": label_set.name,
        "labels": label_set.labels,
        "node_names": label_set.node_names,
        "gpu_product": label_set.gpu_product,
        "enabled": label_set.enabled,
    }


def _affected(label_set: LabelSet, keys: Iterable[str]) -> set[str]:
    """Nodes whose labels may change: those the set selects, and those where the portal
    applied one of ``keys``."""
    names = {n.name for n in matched_nodes(label_set)}
    keys = set(keys)
    for state in NodeLabelState.objects.filter(cluster_id=label_set.cluster_id).exclude(applied={}):
        if keys & set(state.applied):
            names.add(state.node_name)
    return names


@transaction.atomic
def create_label_set(actor, **fields: Any) -> LabelSet:
    _require_staff(actor)
    label_set = LabelSet(created_by=actor, **{k: v for k, v in fields.items() if k in EDITABLE})
    validate(label_set)
    label_set.save()
    audit.record(actor, "labelset.created", label_set, after=_snapshot(label_set))
    for name in sorted(_affected(label_set, label_set.labels)):
        enqueue(label_set.cluster, name, LabelOperation.Reason.APPLY)
    return label_set


@transaction.atomic
def update_label_set(actor, label_set: LabelSet, **changes: Any) -> LabelSet:
    _require_staff(actor)
    label_set = LabelSet.objects.select_for_update().select_related("cluster").get(pk=label_set.pk)
    before = _snapshot(label_set)
    nodes_before = _affected(label_set, label_set.labels)
    old_keys = set(label_set.labels)
    cluster = changes.pop("cluster", label_set.cluster)
    if cluster != label_set.cluster:
        raise ValidationError(
            {"cluster": ["A label set stays on its cluster; create a new set instead."]}
        )
    for key, value in changes.items():
        if key in EDITABLE:
            setattr(label_set, key, value)
    validate(label_set)
    label_set.updated_at = timezone.now()
    label_set.save()
    after = _snapshot(label_set)
    if before != after:
        audit.record(actor, "labelset.updated", label_set, before=before, after=after)
    nodes = nodes_before | _affected(label_set, old_keys | set(label_set.labels))
    for name in sorted(nodes):
        enqueue(label_set.cluster, name, LabelOperation.Reason.APPLY)
    return label_set


@transaction.atomic
def delete_label_set(actor, label_set: LabelSet) -> None:
    _require_staff(actor)
    label_set = LabelSet.objects.select_for_update().select_related("cluster").get(pk=label_set.pk)
    nodes = _affected(label_set, label_set.labels)
    audit.record(actor, "labelset.deleted", label_set, before=_snapshot(label_set))
    cluster = label_set.cluster
    label_set.delete()
    for name in sorted(nodes):
        enqueue(cluster, name, LabelOperation.Reason.REMOVE)


# -- the outbox -----------------------------------------------------------------------------


def enqueue(cluster: Cluster, node_name: str, reason: str) -> LabelOperation:
    """Queue a label apply for one node; call inside the changing transaction.

    A pending operation of the node is reused (made due now): it recomputes the desired
    labels when it runs. A running one is not: it may have read the old sets already.
    """
    now = timezone.now()
    op = (
        LabelOperation.objects.filter(
            cluster=cluster, node_name=node_name, status=LabelOperation.Status.PENDING
        )
        .order_by("created_at")
        .first()
    )
    if op is not None:
        LabelOperation.objects.filter(pk=op.pk, status=LabelOperation.Status.PENDING).update(
            next_attempt_at=now
        )
    else:
        op = LabelOperation.objects.create(cluster=cluster, node_name=node_name, reason=reason)
    transaction.on_commit(lambda: dispatch(op.pk))
    return op


def dispatch(op_id, countdown: float | None = None) -> None:
    from .tasks import apply_label_operation

    broker.send(apply_label_operation, (str(op_id),), countdown=countdown,
                what=f"label operation {op_id}")  # fmt: skip


def _labels(node: dict) -> dict[str, str]:
    return dict((node.get("metadata") or {}).get("labels") or {})


def run_operation(op_id, *, gateway: KubeGateway | None = None) -> str:
    """Claim and run one operation; returns its resulting status, "skipped" when it was
    not claimable, or "busy" when another operation of the node is running."""
    now = timezone.now()
    try:
        with transaction.atomic():
            claimed = LabelOperation.objects.filter(
                pk=op_id, status=LabelOperation.Status.PENDING, next_attempt_at__lte=now
            ).update(
                status=LabelOperation.Status.RUNNING,
                attempts=F("attempts") + 1,
                started_at=now,
                lease_until=now + lease(),
            )
    except IntegrityError:  # labelop_one_running_per_node: the node is being patched
        transaction.on_commit(lambda: dispatch(op_id, countdown=5))
        return "busy"
    if not claimed:
        return "skipped"
    op = LabelOperation.objects.select_related("cluster").get(pk=op_id)
    node = Node.objects.filter(cluster=op.cluster, name=op.node_name).first()
    desired = desired_labels(node) if node is not None else {}
    state, _ = NodeLabelState.objects.get_or_create(cluster=op.cluster, node_name=op.node_name)
    try:
        gw = gateway or KubeGateway(op.cluster)
        try:
            before = _labels(gw.get_node(op.node_name))
            patch = plan_patch(before, desired, state.applied)
            after = before
            if patch:
                gw.patch_node_labels(op.node_name, patch)
                after = _labels(gw.get_node(op.node_name))
                _confirm(after, patch)
        finally:
            if gateway is None:
                gw.close()
    except KubeError as err:
        return _failed(op, node, str(err), permanent=err.permanent)
    return _succeeded(op, node, state, desired, patch, before)


def _confirm(labels: dict[str, str], patch: dict[str, str | None]) -> None:
    wrong = {k: labels.get(k) for k, v in patch.items() if labels.get(k) != v}
    if wrong:
        raise KubeError(f"node labels read back differ from what was patched: {wrong}")


@transaction.atomic
def _succeeded(op, node, state, desired, patch, before) -> str:
    now = timezone.now()
    state.applied, state.applied_at = desired, now
    state.save(update_fields=["applied", "applied_at"])
    removed = sorted(k for k, v in patch.items() if v is None)
    LabelOperation.objects.filter(pk=op.pk).update(
        status=LabelOperation.Status.SUCCEEDED,
        finished_at=now,
        lease_until=None,
        desired=desired,
        removed=removed,
        last_error="",
    )
    if patch:
        audit.record(
            None,
            "nodelabel.applied",
            node or state,
            before={k: before.get(k) for k in patch},
            after=patch,
            note=f"node {op.node_name}: operation {op.pk} ({op.reason})",
        )
    return LabelOperation.Status.SUCCEEDED


@transaction.atomic
def _failed(op: LabelOperation, node, error: str, *, permanent: bool) -> str:
    now = timezone.now()
    op = LabelOperation.objects.select_for_update().get(pk=op.pk)
    op.retry_or_fail(error, permanent=permanent, now=now, delay=backoff(op.attempts))
    op.save(update_fields=["status", "finished_at", "next_attempt_at", "last_error", "lease_until"])
    give_up = op.status == LabelOperation.Status.FAILED
    log.warning("label operation %s attempt %d failed%s: %s", op.pk, op.attempts,
                " (giving up)" if give_up else "", error)  # fmt: skip
    if give_up:
        audit.record(None, "nodelabel.apply_failed", node or op,
                     note=f"node {op.node_name}: operation {op.pk}: {error}")  # fmt: skip
    else:
        delay = (op.next_attempt_at - now).total_seconds()
        transaction.on_commit(lambda: dispatch(op.pk, countdown=delay))
    return op.status


def redispatch_due(now=None) -> int:
    """Re-send due pending operations and reclaim ones whose worker died (lease expired)."""
    return outbox.redispatch_due(LabelOperation, dispatch, now)


# -- drift ----------------------------------------------------------------------------------


def reconcile() -> dict[str, int]:
    """Compare every managed node's labels in the cluster with the label sets.

    A portal key whose value was changed or removed by hand is drift: audited as
    ``nodelabel.drift_reverted`` (before/after) and reverted through an operation. A node
    that newly matches a set (say, a new node of the product), or still carries a label of
    a removed set, gets an operation too. Nodes with an operation in flight are skipped.
    """
    counts = {"checked": 0, "drifted": 0, "queued": 0, "errors": 0}
    label_sets = list(LabelSet.objects.enabled())
    states = list(NodeLabelState.objects.exclude(applied={}))
    cluster_ids = {s.cluster_id for s in label_sets} | {s.cluster_id for s in states}
    for cluster in Cluster.objects.filter(pk__in=cluster_ids):
        _reconcile_cluster(
            cluster,
            [s for s in label_sets if s.cluster_id == cluster.pk],
            {s.node_name: s for s in states if s.cluster_id == cluster.pk},
            counts,
        )
    return counts


def _reconcile_cluster(cluster: Cluster, label_sets, states, counts) -> None:
    nodes = {n.name: n for n in Node.objects.present().filter(cluster=cluster)}
    desired = {name: desired_for(node, label_sets) for name, node in nodes.items()}
    busy = set(
        LabelOperation.objects.filter(cluster=cluster, status__in=LabelOperation.OPEN).values_list(
            "node_name", flat=True
        )
    )
    names = ({n for n, want in desired.items() if want} | set(states)) - busy
    if not names:
        return
    try:
        with KubeGateway(cluster) as gw:
            current = _read_labels(gw, names)
    except KubeError as err:
        log.warning("label drift check of %s failed: %s", cluster.slug, err)
        counts["errors"] += 1
        return
    now = timezone.now()
    for name in sorted(current):
        have, want = current[name], desired.get(name, {})
        applied = states[name].applied if name in states else {}
        counts["checked"] += 1
        patch = plan_patch(have, want, applied)
        if not patch:
            continue
        drift = sorted(k for k, v in applied.items() if k in want and have.get(k) != v)
        with transaction.atomic():
            if drift:
                audit.record(
                    None,
                    "nodelabel.drift_reverted",
                    nodes.get(name) or states[name],
                    before={k: have.get(k) for k in drift},
                    after={k: want[k] for k in drift},
                    note=f"labels of node {name} edited outside the portal",
                )
                reason = LabelOperation.Reason.DRIFT
                counts["drifted"] += 1
            elif all(v is None for v in patch.values()):
                reason = LabelOperation.Reason.REMOVE
            else:
                reason = LabelOperation.Reason.APPLY
            enqueue(cluster, name, reason)
            counts["queued"] += 1
    NodeLabelState.objects.filter(cluster=cluster, node_name__in=list(current)).update(
        checked_at=now
    )


def _read_labels(gw: KubeGateway, names: set[str]) -> dict[str, dict[str, str]]:
    """Current labels of ``names`` straight from the API server (never the inventory
    copy): one GET per node, or a paged LIST when there are many. Nodes that no longer
    exist are left out."""
    out: dict[str, dict[str, str]] = {}
    if len(names) > settings.NODELABEL_GET_NODE_LIMIT:
        for page in gw.list_pages("nodes"):
            for item in page.items:
                name = (item.get("metadata") or {}).get("name")
                if name in names:
                    out[name] = _labels(item)
        return out
    for name in sorted(names):
        try:
            out[name] = _labels(gw.get_node(name))
        except KubeError as err:
            if err.status != 404:
                raise
    return out


# -- what the pages and the API show --------------------------------------------------------


class NodeSync:
    """One node of a label set with the state of the set's labels on it."""

    IN_SYNC, PENDING, FAILED, DRIFTED, NOT_APPLIED = (
        "in sync",
        "pending",
        "failed",
        "drifted",
        "not applied",
    )

    def __init__(self, node: Node, status: str, error: str = "") -> None:
        self.node, self.status, self.error = node, status, error

    @property
    def name(self) -> str:
        return self.node.name


def sync_overview(label_sets: list[LabelSet]) -> dict[Any, list[NodeSync]]:
    """Per label set id: the nodes it selects, each with its sync state. Four queries
    whatever the number of sets and nodes."""
    cluster_ids = {s.cluster_id for s in label_sets}
    if not cluster_ids:
        return {}
    nodes = list(
        Node.objects.present()
        .filter(cluster_id__in=cluster_ids)
        .only("id", "cluster_id", "name", "gpu_product", "labels", "gone_at")
        .order_by("name")
    )
    states = {
        (s.cluster_id, s.node_name): s
        for s in NodeLabelState.objects.filter(cluster_id__in=cluster_ids)
    }
    latest = {
        (op.cluster_id, op.node_name): op
        for op in LabelOperation.objects.filter(cluster_id__in=cluster_ids)
        .order_by("cluster_id", "node_name", "-created_at")
        .distinct("cluster_id", "node_name")
        .only("cluster_id", "node_name", "status", "last_error", "created_at")
    }
    by_cluster: dict[Any, list[Node]] = defaultdict(list)
    for node in nodes:
        by_cluster[node.cluster_id].append(node)
    out = {}
    for label_set in label_sets:
        rows = []
        for node in by_cluster[label_set.cluster_id]:
            if not label_set.matches(node):
                continue
            key = (node.cluster_id, node.name)
            rows.append(_node_sync(label_set, node, states.get(key), latest.get(key)))
        out[label_set.pk] = rows
    return out


def _synced_since_apply(cluster: Cluster, state: NodeLabelState | None) -> bool:
    """Is the inventory's copy of the node's labels newer than the portal's last apply?"""
    synced = cluster.last_success_at
    return bool(state and state.applied_at and synced and synced > state.applied_at)


def _node_sync(label_set: LabelSet, node: Node, state: NodeLabelState | None, op) -> NodeSync:
    wanted = label_set.labels.items()
    applied = state.applied if state else {}
    if op is not None and op.is_open:
        return NodeSync(node, NodeSync.PENDING)
    if all(applied.get(k) == v for k, v in wanted):
        carried = all(node.labels.get(k) == v for k, v in wanted)
        if carried or not _synced_since_apply(label_set.cluster, state):
            return NodeSync(node, NodeSync.IN_SYNC)
        return NodeSync(node, NodeSync.DRIFTED)
    if op is not None and op.status == LabelOperation.Status.FAILED:
        return NodeSync(node, NodeSync.FAILED, op.last_error)
    return NodeSync(node, NodeSync.NOT_APPLIED)


def node_summary(node: Node) -> dict[str, Any]:
    """The portal-managed labels of one node, for its page: each wanted label with the
    set it comes from and whether the node carries it (as of the last inventory sync),
    keys still to be removed, and the latest operation. One query."""
    sets, state, op = _node_label_rows(node)
    applied = state.applied if state else {}
    fresh = _synced_since_apply(node.cluster, state)
    rows, seen = [], set()
    for label_set in sets:
        if node.gone_at is not None or not label_set.matches(node):
            continue
        for key, value in sorted(label_set.labels.items()):
            if key in seen:
                continue
            seen.add(key)
            on_node = node.labels.get(key)
            if applied.get(key) == value:
                status = "drifted" if fresh and on_node != value else "applied"
            else:
                status = "present" if on_node == value else "pending"
            rows.append(
                {"key": key, "value": value, "set": label_set, "on_node": on_node, "status": status}
            )
    leaving = sorted(k for k, v in applied.items() if k not in seen)
    return {"rows": rows, "leaving": leaving, "operation": op, "state": state}


def _node_label_rows(node: Node) -> tuple[list[LabelSet], NodeLabelState | None, Any]:
    """The cluster's enabled sets (oldest first), the node's state and latest operation,
    in one query: the node page has a fixed query budget."""
    op_fields = ("reason", "status", "last_error", "created_at")
    state_fields = ("applied", "applied_at", "checked_at")
    row = (
        Cluster.objects.filter(pk=node.cluster_id)
        .annotate(
            sets=ArraySubquery(
                LabelSet.objects.enabled()
                .filter(cluster_id=OuterRef("pk"))
                .order_by("created_at", "id")
                .values(
                    j=JSONObject(
                        id="id",
                        name="name",
                        labels="labels",
                        node_names="node_names",
                        gpu_product="gpu_product",
                        created_at="created_at",
                    )
                )
            ),
            op=Subquery(
                LabelOperation.objects.filter(cluster_id=OuterRef("pk"), node_name=node.name)
                .order_by("-created_at")
                .values(j=JSONObject(**{f: f for f in op_fields}))[:1]
            ),
            state=Subquery(
                NodeLabelState.objects.filter(
                    cluster_id=OuterRef("pk"), node_name=node.name
                ).values(j=JSONObject(**{f: f for f in state_fields}))[:1]
            ),
        )
        .values("sets", "op", "state")
        .first()
    ) or {"sets": [], "op": None, "state": None}
    sets = [
        LabelSet(
            id=uuid.UUID(d["id"]),
            cluster_id=node.cluster_id,
            name=d["name"],
            labels=d["labels"],
            node_names=d["node_names"],
            gpu_product=d["gpu_product"],
            created_at=parse_datetime(d["created_at"]),
            enabled=True,
        )
        for d in row["sets"] or []
    ]
    state = op = None
    if row["state"]:
        d = row["state"]
        state = NodeLabelState(
            cluster_id=node.cluster_id, node_name=node.name, applied=d["applied"] or {},
            applied_at=_when(d["applied_at"]), checked_at=_when(d["checked_at"]),
        )  # fmt: skip
    if row["op"]:
        d = row["op"]
        op = LabelOperation(
            cluster_id=node.cluster_id, node_name=node.name, reason=d["reason"],
            status=d["status"], last_error=d["last_error"], created_at=_when(d["created_at"]),
        )  # fmt: skip
    return sets, state, op


def _when(value: str | None):
    return parse_datetime(value) if value else None
