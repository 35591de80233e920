"""DELETE like the generic registry: options, preconditions, grace periods, finalizers.

Follows ``staging/src/k8s.io/apiserver/pkg/endpoints/handlers/delete.go`` (options from
the body, else from the query), ``apimachinery/pkg/apis/meta/v1/validation``
(``ValidateDeleteOptions``), ``staging/src/k8s.io/apiserver/pkg/registry/rest/delete.go``
(``BeforeDelete``) and ``staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go``
(``Delete``, ``updateForGracefulDeletionAndFinalizers``, ``markAsDeleting``,
``deletionFinalizersForGarbageCollection``, ``ShouldDeleteDuringUpdate``,
``DeleteCollection``, ``finalizeDelete``), with the pod strategy's ``CheckGracefulDelete``
(``pkg/registry/core/pod/strategy.go``):

- a pod bound to a node and not terminal gets ``deletionTimestamp`` = now + grace and
  ``deletionGracePeriodSeconds`` (``gracePeriodSeconds`` of the request, else the pod's
  ``terminationGracePeriodSeconds``) and stays until the kubelet removes it; unscheduled
  and terminal pods, and ``gracePeriodSeconds=0``, go at once (after one update that records
  the deletion, as the real store writes it before deleting);
- a second DELETE may only shorten the grace period; otherwise it changes nothing;
- an object with ``metadata.finalizers`` is marked deleting and stays until an update
  empties its finalizers (``propagationPolicy: Orphan|Foreground`` add ``orphan`` /
  ``foregroundDeletion``, which :mod:`simcluster.gc` processes);
- ``dryRun`` changes nothing and answers what would have been written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from simcluster import fielderrors as fe
from simcluster.errors import ApiError, not_found
from simcluster.resources import ResourceType

if TYPE_CHECKING:
    from simcluster.cluster import SimCluster

GRACEFUL = frozenset({"pods"})  # strategies implementing RESTGracefulDeleteStrategy
# stores with ReturnDeletedObject (pkg/registry/core/{pod,namespace,service,serviceaccount,
# resourcequota}/storage/storage.go)
RETURNS_OBJECT = frozenset({"pods", "namespaces", "services", "serviceaccounts", "resourcequotas"})
ORPHAN = "orphan"
FOREGROUND = "foregroundDeletion"
_PROPAGATION = ("Foreground", "Background", "Orphan")


@dataclass
class DeleteOptions:
    """``metav1.DeleteOptions`` after decoding."""

    grace: int | None = None
    uid: str | None = None
    resource_version: str | None = None
    propagation: str | None = None
    orphan: bool | None = None
    dry_run: bool = False
    dry_run_values: tuple[str, ...] = ()


def _utc(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_ts(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def parse_options(body: Any, params: dict[str, str]) -> DeleteOptions:
    """The request's DeleteOptions: from a non-empty body, else from the query string."""
    opts = DeleteOptions()
    if isinstance(body, dict) and body:
        kind = body.get("kind")
        if kind not in (None, "DeleteOptions"):
            raise ApiError(400, f"decoded object cannot be converted to DeleteOptions: {kind}")
        grace = body.get("gracePeriodSeconds")
        if grace is not None:
            if isinstance(grace, bool) or not isinstance(grace, int):
                raise ApiError(
                    400,
                    f"json: cannot unmarshal {type(grace).__name__} into Go "
                    "struct field DeleteOptions.gracePeriodSeconds of type int64",
                )
            opts.grace = grace
        pre = body.get("preconditions") or {}
        opts.uid = pre.get("uid")
        opts.resource_version = pre.get("resourceVersion")
        opts.propagation = body.get("propagationPolicy")
        opts.orphan = body.get("orphanDependents")
        opts.dry_run_values = tuple(body.get("dryRun") or ())
    else:
        if params.get("gracePeriodSeconds") not in (None, ""):
            raw = params["gracePeriodSeconds"]
            try:
                opts.grace = int(raw)
            except ValueError:
                raise ApiError(
                    400, f'strconv.ParseInt: parsing "{raw}": invalid syntax', "BadRequest"
                ) from None
        opts.propagation = params.get("propagationPolicy") or None
        if params.get("orphanDependents") not in (None, ""):
            opts.orphan = params["orphanDependents"].lower() in ("true", "1")
        if params.get("dryRun"):
            opts.dry_run_values = (params["dryRun"],)
    errs: list[fe.FieldError] = []
    if opts.orphan is not None and opts.propagation is not None:
        errs.append(
            fe.invalid(
                "propagationPolicy",
                opts.propagation,
                "orphanDependents and deletionPropagation cannot be both set",
            )
        )
    if opts.propagation is not None and opts.propagation not in _PROPAGATION:
        errs.append(fe.not_supported("propagationPolicy", opts.propagation, [*_PROPAGATION, "nil"]))
    bad = [v for v in opts.dry_run_values if v != "All"]
    if bad:
        errs.append(fe.not_supported("dryRun", fe.go_strings(list(opts.dry_run_values)), ["All"]))
    if errs:
        raise fe.invalid_error("DeleteOptions", "meta.k8s.io", "", errs)
    opts.dry_run = bool(opts.dry_run_values)
    return opts


def _conflict(rt: ResourceType, name: str, why: str) -> ApiError:
    """``errors.NewConflict`` with ``GroupResource{Group: gvk.Group, Resource: gvk.Kind}``."""
    qualified = rt.kind + (f".{rt.group}" if rt.group else "")
    details: dict[str, Any] = {"name": name, "kind": rt.kind}
    if rt.group:
        details["group"] = rt.group
    return ApiError(
        409, f'Operation cannot be fulfilled on {qualified} "{name}": {why}', "Conflict", details
    )


def check_preconditions(rt: ResourceType, obj: dict[str, Any], opts: DeleteOptions) -> None:
    """``BeforeDelete``'s early precondition check."""
    meta = obj["metadata"]
    if opts.uid is not None and opts.uid != meta.get("uid"):
        raise _conflict(
            rt,
            meta["name"],
            f"the UID in the precondition ({opts.uid}) does not match the UID in record "
            f"({meta.get('uid')}). The object might have been deleted and then recreated",
        )
    if opts.resource_version is not None and opts.resource_version != meta.get("resourceVersion"):
        raise _conflict(
            rt,
            meta["name"],
            f"the ResourceVersion in the precondition ({opts.resource_version}) does not match "
            f"the ResourceVersion in record ({meta.get('resourceVersion')}). The object might "
            "have been modified",
        )


def _check_graceful_pod(obj: dict[str, Any], opts: DeleteOptions) -> None:
    """``podStrategy.CheckGracefulDelete``: decides the grace period."""
    spec = obj.get("spec") or {}
    period = opts.grace
    if period is None:
        period = int(spec.get("terminationGracePeriodSeconds") or 0)
    if not spec.get("nodeName"):
        period = 0
    if (obj.get("status") or {}).get("phase") in ("Failed", "Succeeded"):
        period = 0
    opts.grace = period


def before_delete(rt: ResourceType, obj: dict[str, Any], opts: DeleteOptions) -> tuple[bool, bool]:
    """``rest.BeforeDelete``: returns ``(graceful, pending)`` and updates ``obj`` / ``opts``."""
    check_preconditions(rt, obj, opts)
    meta = obj["metadata"]
    if opts.grace is not None and opts.grace < 0:
        opts.grace = 1
    if (
        meta.get("deletionGracePeriodSeconds") is not None
        and meta["deletionGracePeriodSeconds"] < 0
    ):
        meta["deletionGracePeriodSeconds"] = 1
    if rt.name not in GRACEFUL:
        return False, False
    if meta.get("deletionTimestamp"):
        current = meta.get("deletionGracePeriodSeconds")
        if not current:
            return False, False
        if opts.grace is not None:
            if opts.grace >= current:
                return False, True
            ts = _parse_ts(meta["deletionTimestamp"]) - timedelta(seconds=current)
            meta["deletionTimestamp"] = _utc(ts + timedelta(seconds=opts.grace))
            meta["deletionGracePeriodSeconds"] = opts.grace
            return True, False
        opts.grace = current
        return False, True
    _check_graceful_pod(obj, opts)
    assert opts.grace is not None
    meta["deletionTimestamp"] = _utc(datetime.now(UTC) + timedelta(seconds=opts.grace))
    meta["deletionGracePeriodSeconds"] = opts.grace
    if int(meta.get("generation") or 0) > 0:
        meta["generation"] = int(meta["generation"]) + 1
    return True, False


def _gc_finalizers(meta: dict[str, Any], opts: DeleteOptions) -> tuple[bool, list[str]]:
    """``deletionFinalizersForGarbageCollection`` (default policy: background)."""
    finalizers = list(meta.get("finalizers") or [])
    if opts.orphan is not None:
        orphan, foreground = opts.orphan, False
    elif opts.propagation == "Orphan":
        orphan, foreground = True, False
    elif opts.propagation in ("Background", "Foreground"):
        orphan, foreground = False, opts.propagation == "Foreground"
    else:
        orphan = ORPHAN in finalizers
        foreground = FOREGROUND in finalizers and not orphan
    new = [f for f in finalizers if f not in (ORPHAN, FOREGROUND)]
    if orphan:
        new.append(ORPHAN)
    if foreground:
        new.append(FOREGROUND)
    return set(new) != set(finalizers), new if set(new) != set(finalizers) else finalizers


def mark_as_deleting(meta: dict[str, Any]) -> None:
    """``markAsDeleting``: deletion timestamp now (never later), grace period 0."""
    now = datetime.now(UTC).replace(microsecond=0)
    if not meta.get("deletionTimestamp") and int(meta.get("generation") or 0) > 0:
        meta["generation"] = int(meta["generation"]) + 1
    cur = meta.get("deletionTimestamp")
    if not cur or _parse_ts(cur) > now:
        meta["deletionTimestamp"] = _utc(now)
    meta["deletionGracePeriodSeconds"] = 0


def _deleted_response(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """``finalizeDelete``: the object for ReturnDeletedObject stores, else a Status."""
    if rt.name in RETURNS_OBJECT:
        return obj
    details: dict[str, Any] = {"name": obj["metadata"]["name"], "kind": rt.name}
    if rt.group:
        details["group"] = rt.group
    details["uid"] = obj["metadata"].get("uid")
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    }


def _store_update(
    cluster: SimCluster, rt: ResourceType, ns: str, old: dict[str, Any], new: dict[str, Any]
) -> dict[str, Any]:
    """A storage-level update (``GuaranteedUpdate``): no field manager, skipped if unchanged."""
    a = {k: v for k, v in old["metadata"].items() if k != "resourceVersion"}
    b = {k: v for k, v in new["metadata"].items() if k != "resourceVersion"}
    if a == b and {k: v for k, v in old.items() if k != "metadata"} == {
        k: v for k, v in new.items() if k != "metadata"
    }:
        return old
    rec = cluster.store.put(rt.name, new, "MODIFIED")
    cluster._after_write(rt, ns, old, new)
    return json.loads(rec.raw)


def remove_now(cluster: SimCluster, rt: ResourceType, ns: str, name: str) -> dict[str, Any]:
    """Delete from storage (a DELETED event) and run the write hooks; returns the last state."""
    key_ns = ns if rt.namespaced else ""
    rec = cluster.store.get(rt.name, key_ns, name)
    if rec is None:
        raise not_found(rt.name, name, rt.group)
    last = rec.obj()
    cluster.store.remove(rt.name, key_ns, name)
    cluster._after_write(rt, ns, last, None)
    return last


def delete_object(
    cluster: SimCluster, rt: ResourceType, ns: str, name: str, opts: DeleteOptions
) -> dict[str, Any]:
    """``Store.Delete``; returns the response object (caller holds the store lock)."""
    if rt.name == "namespaces":
        from simcluster.namespaces import delete_namespace

        return delete_namespace(cluster, name, opts)
    rec = cluster._existing(rt, ns, name)
    old = rec.obj()
    obj = rec.obj()
    graceful, pending = before_delete(rt, obj, opts)
    if pending:
        return _deleted_response(rt, old)
    meta = obj["metadata"]
    update_finalizers, finalizers = _gc_finalizers(meta, opts)
    out: dict[str, Any] | None = None
    if graceful or meta.get("finalizers") or update_finalizers:
        if update_finalizers:
            meta["finalizers"] = finalizers
            if not finalizers:
                meta.pop("finalizers", None)
        pending_finalizers = bool(meta.get("finalizers"))
        if not graceful and pending_finalizers:
            mark_as_deleting(meta)
        if graceful or pending_finalizers:
            out = obj if opts.dry_run else _store_update(cluster, rt, ns, old, obj)
            if pending_finalizers or (graceful and (opts.grace or 0) > 0):
                return out
    if opts.dry_run:
        return _deleted_response(rt, out or old)
    last = remove_now(cluster, rt, ns, name)
    return _deleted_response(rt, last)


def should_delete_during_update(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """``ShouldDeleteDuringUpdate``: the last finalizer of a deleting object went away."""
    om, nm = old.get("metadata") or {}, new.get("metadata") or {}
    if nm.get("finalizers") or not om.get("deletionTimestamp"):
        return False
    if new.get("kind") == "Namespace" and (new.get("spec") or {}).get("finalizers"):
        return False  # ShouldDeleteNamespaceDuringUpdate: spec.finalizers must be empty too
    return not om.get("deletionGracePeriodSeconds")


def delete_collection(
    cluster: SimCluster, rt: ResourceType, ns: str | None, params: dict[str, str], body: Any
) -> list[dict[str, Any]]:
    """``Store.DeleteCollection``: deletes each listed item with its own copy of the options;
    answers the items as they were listed."""
    from simcluster.resources import conversion_name
    from simcluster.selectors import parse_field_selector, parse_label_selector

    lsel = parse_label_selector(params.get("labelSelector"))
    fsel = parse_field_selector(params.get("fieldSelector"), rt.fields, conversion_name(rt))
    opts = parse_options(body, params)
    store = cluster.store
    keys, lo, hi = store.key_range(rt.name, ns)
    objs = store.objects[rt.name]
    victims = [
        objs[k]
        for k in keys[lo:hi]
        if (lsel is None or lsel(objs[k].labels)) and (fsel is None or fsel(objs[k].fields))
    ]
    listed = [v.obj() for v in victims]
    for v in victims:
        try:
            delete_object(cluster, rt, v.namespace, v.name, DeleteOptions(**vars(opts)))
        except ApiError as err:
            if err.code != 404:
                raise
    return listed
