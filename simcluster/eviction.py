"""The Eviction API, ``POST pods/{name}/eviction``, as ``pkg/registry/core/pod/storage/eviction.go``
(v1.32) implements it.

- ``deleteOptions.dryRun`` in the body, or ``?dryRun=All``, evicts nothing (and writes
  nothing, not even the PDB).
- Pods that are terminal, ``Pending`` or already terminating ignore PDBs and are deleted
  (``canIgnorePDB``).
- More than one PDB selecting the pod: HTTP 500, a ``Status`` without a reason.
- One PDB: a pod that is not Ready may go without using the budget when the PDB says
  ``unhealthyPodEvictionPolicy: AlwaysAllow`` or when ``currentHealthy >= desiredHealthy >
  0`` (IfHealthyBudget, the default); otherwise ``checkAndDecrement``: 429 while the
  controller has not observed the PDB's generation (``Retry-After: 10``), 403 when
  ``disruptionsAllowed`` is negative or ``disruptedPods`` is too big, 429 without
  ``Retry-After`` when no disruption is allowed; else ``disruptionsAllowed`` is decremented
  and the pod recorded in ``disruptedPods`` (written by ``kube-apiserver``).
- The pod gets the ``DisruptionTarget`` condition and is deleted gracefully, like a DELETE
  with the Eviction's ``deleteOptions``.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from simcluster import deletion
from simcluster.disruption import (
    APISERVER,
    MAX_DISRUPTED_PODS,
    _ordered_status,
    matching_pdbs,
    update_allowed_condition,
)
from simcluster.errors import ApiError
from simcluster.namespaces import terminating_forbidden
from simcluster.resources import RT

if TYPE_CHECKING:
    from simcluster.cluster import SimCluster

_TOO_MANY = "Cannot evict pod as it would violate the pod's disruption budget."


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def too_many_requests(message: str, cause: str, retry_after: int = 0) -> ApiError:
    """``errors.NewTooManyRequests`` plus a ``DisruptionBudget`` cause."""
    details: dict[str, Any] = {"causes": [{"reason": "DisruptionBudget", "message": cause}]}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
    return ApiError(429, message, "TooManyRequests", details)


def _still_processing(pdb_name: str) -> ApiError:
    """``createTooManyRequestsError``: 429 with a 10 s retry hint."""
    return too_many_requests(
        _TOO_MANY, f"The disruption budget {pdb_name} is still being processed by the server.", 10
    )


def _pdb_forbidden(name: str, why: str) -> ApiError:
    return ApiError(
        403,
        f'poddisruptionbudget.policy "{name}" is forbidden: {why}',
        "Forbidden",
        {"name": name, "group": "policy", "kind": "poddisruptionbudget"},
    )


def evict(
    cluster: SimCluster, ns: str, name: str, body: Any, params: dict[str, str]
) -> tuple[int, bytes]:
    """Handle one eviction; returns ``(code, body)`` or raises :class:`ApiError`."""
    eviction = body if isinstance(body, dict) else {}
    if eviction.get("kind") not in (None, "Eviction") or eviction.get("apiVersion") not in (
        None,
        "policy/v1",
        "policy/v1beta1",
    ):
        raise ApiError(
            400,
            f"not a Eviction object: {eviction.get('apiVersion')}, Kind={eviction.get('kind')}",
            "BadRequest",
        )
    if (eviction.get("metadata") or {}).get("name") != name:
        raise ApiError(400, "name in URL does not match name in Eviction object", "BadRequest")
    raw_opts = eviction.get("deleteOptions")
    query_dry = (params["dryRun"],) if params.get("dryRun") else ()
    opts = deletion.parse_options(raw_opts if isinstance(raw_opts, dict) else {}, {})
    if not opts.dry_run_values:
        if query_dry:
            opts = deletion.parse_options({**(raw_opts or {}), "dryRun": list(query_dry)}, {})
    elif query_dry and tuple(opts.dry_run_values) != query_dry:
        raise ApiError(
            500,
            "Internal error occurred: Non-matching dry-run options in request and content: "
            f"[{' '.join(query_dry)}] and [{' '.join(opts.dry_run_values)}]",
            "InternalError",
        )
    with cluster.store.lock:
        nsrec = cluster.store.get("namespaces", "", ns)
        if nsrec is not None and nsrec.fields.get("status.phase") == "Terminating":
            raise terminating_forbidden("pods", RT["pods"], name, ns)
        pod = cluster._existing(RT["pods"], ns, name).obj()
        if _can_ignore_pdb(pod):
            run = copy.copy(opts)
            if _enforce_rv(pod) and run.resource_version is None:
                run.resource_version = pod["metadata"].get("resourceVersion")
            _add_condition_and_delete(cluster, ns, name, run)
            return 201, _success()
        labels = pod["metadata"].get("labels") or {}
        pdbs = matching_pdbs(cluster, ns, labels)
        if len(pdbs) > 1:
            return 500, _dumps(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": "This pod has more than one PodDisruptionBudget, which the "
                    "eviction subresource does not support.",
                    "code": 500,
                }
            )
        update_rv = False
        pdb_name = ""
        if pdbs:
            pdb = pdbs[0]
            pdb_name = pdb["metadata"]["name"]
            st = pdb.get("status") or {}
            if not _ready(pod):
                policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy")
                current, desired = st.get("currentHealthy", 0), st.get("desiredHealthy", 0)
                if policy == "AlwaysAllow" or (current >= desired and desired > 0):
                    update_rv = True
            if not update_rv:
                _check_and_decrement(cluster, ns, name, pdb, opts.dry_run)
        run = copy.copy(opts)
        if update_rv:
            run.resource_version = pod["metadata"].get("resourceVersion")
        try:
            _add_condition_and_delete(cluster, ns, name, run)
        except ApiError as err:
            if err.code == 409 and update_rv and opts.resource_version is None:
                raise _still_processing(pdb_name) from None
            raise
    return 201, _success()


def _success() -> bytes:
    return _dumps(
        {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
    )


def _ready(pod: dict[str, Any]) -> bool:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def _can_ignore_pdb(pod: dict[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed", "Pending") or bool(
        pod["metadata"].get("deletionTimestamp")
    )


def _enforce_rv(pod: dict[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp")


def _check_and_decrement(
    cluster: SimCluster, ns: str, pod_name: str, pdb: dict[str, Any], dry_run: bool
) -> None:
    name = pdb["metadata"]["name"]
    st = copy.deepcopy(pdb.get("status") or {})
    if st.get("observedGeneration", 0) < pdb["metadata"].get("generation", 0):
        raise _still_processing(name)
    allowed = int(st.get("disruptionsAllowed") or 0)
    if allowed < 0:
        raise _pdb_forbidden(name, "pdb disruptions allowed is negative")
    if len(st.get("disruptedPods") or {}) > MAX_DISRUPTED_PODS:
        raise _pdb_forbidden(
            name, "DisruptedPods map too big - too many evictions not confirmed by PDB controller"
        )
    if allowed == 0:
        raise too_many_requests(
            _TOO_MANY,
            f"The disruption budget {name} needs {st.get('desiredHealthy', 0)} healthy pods and "
            f"has {st.get('currentHealthy', 0)} currently",
        )
    st["disruptionsAllowed"] = allowed - 1
    if st["disruptionsAllowed"] == 0:
        update_allowed_condition(st)
    if dry_run:
        return
    st.setdefault("disruptedPods", {})[pod_name] = _now()
    cluster._write_status(RT["poddisruptionbudgets"], ns, name, _ordered_status(st), APISERVER)


def _add_condition_and_delete(
    cluster: SimCluster, ns: str, name: str, opts: deletion.DeleteOptions
) -> None:
    """``addConditionAndDeletePod``: mark ``DisruptionTarget``, then delete."""
    rt = RT["pods"]
    if not opts.dry_run:
        rec = cluster._existing(rt, ns, name)
        old = rec.obj()
        deletion.check_preconditions(rt, old, opts)
        new = copy.deepcopy(old)
        conds = new.setdefault("status", {}).setdefault("conditions", [])
        cond = {
            "type": "DisruptionTarget",
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": _now(),
            "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting",
        }
        cur = next((c for c in conds if c.get("type") == "DisruptionTarget"), None)
        if cur is None:
            conds.append(cond)
        else:
            if cur.get("status") == "True":
                cond["lastTransitionTime"] = cur.get("lastTransitionTime")
            cur.clear()
            cur.update(cond)
        written = deletion._store_update(cluster, rt, ns, old, new)
        if opts.resource_version is not None:
            opts.resource_version = written["metadata"]["resourceVersion"]
    deletion.delete_object(cluster, rt, ns, name, opts)
