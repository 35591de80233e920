"""PodDisruptionBudgets: the strategy, the disruption controller and the Eviction API.

- ``pkg/registry/policy/poddisruptionbudget/strategy.go``: a new PDB has ``generation`` 1
  and an empty status; a spec change bumps ``generation``; status is kept on spec writes.
- ``pkg/controller/disruption/disruption.go``: ``status`` (``currentHealthy`` = Ready pods
  that are not being deleted or recently evicted, ``desiredHealthy``, ``expectedPods``,
  ``disruptionsAllowed``, ``disruptedPods``, ``observedGeneration``, the
  ``DisruptionAllowed`` condition) is recomputed ``pdb_sync_s`` after a PDB or a selected
  pod changes. ``maxUnavailable`` and percentage ``minAvailable`` count the scale of the
  pods' controllers: bare pods count for nothing there, and pods owned by a workload the
  simulator does not serve make the sync fail (``failSafe``: ``SyncFailed``, nothing
  allowed). Entries in ``disruptedPods`` expire after 2 minutes (``DeletionTimeout``).
- ``pkg/registry/core/pod/storage/eviction.go`` (v1.32): ``POST pods/{name}/eviction``.
"""

from __future__ import annotations

import copy
import math
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from simcluster.resources import RT

if TYPE_CHECKING:
    from simcluster.cluster import SimCluster

DELETION_TIMEOUT_S = 120.0
MAX_DISRUPTED_PODS = 2000
CONTROLLER = "kube-controller-manager"
APISERVER = "kube-apiserver"
_EMPTY_STATUS = {
    "disruptionsAllowed": 0,
    "currentHealthy": 0,
    "desiredHealthy": 0,
    "expectedPods": 0,
}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------- strategy
def prepare_create(obj: dict[str, Any]) -> None:
    """``PrepareForCreate``: generation 1, status cleared."""
    obj["metadata"]["generation"] = 1
    obj["status"] = dict(_EMPTY_STATUS)


def prepare_update(old: dict[str, Any], new: dict[str, Any]) -> None:
    """``PrepareForUpdate`` (spec writes): keep generation unless the spec changed."""
    gen = int(old["metadata"].get("generation") or 0)
    if (new.get("spec") or {}) != (old.get("spec") or {}):
        gen += 1
    new["metadata"]["generation"] = gen


# ------------------------------------------------------------- selection
def selector_matcher(sel: dict[str, Any] | None) -> Any:
    """``metav1.LabelSelectorAsSelector``: nil selects nothing, ``{}`` everything."""
    if sel is None:
        return lambda labels: False
    ml = sel.get("matchLabels") or {}
    exprs = sel.get("matchExpressions") or []

    def match(labels: dict[str, str]) -> bool:
        for k, v in ml.items():
            if labels.get(k) != v:
                return False
        for e in exprs:
            k, op, vals = e.get("key"), e.get("operator"), e.get("values") or []
            if op == "In" and labels.get(k) not in vals:
                return False
            if op == "NotIn" and k in labels and labels[k] in vals:
                return False
            if op == "Exists" and k not in labels:
                return False
            if op == "DoesNotExist" and k in labels:
                return False
        return True

    return match


def matching_pdbs(cluster: SimCluster, ns: str, labels: dict[str, str]) -> list[dict[str, Any]]:
    """PDBs of ``ns`` whose selector selects ``labels`` (sorted by name)."""
    out = []
    for rec in cluster.store.in_namespace("poddisruptionbudgets", ns):
        pdb = rec.obj()
        if selector_matcher((pdb.get("spec") or {}).get("selector"))(labels):
            out.append(pdb)
    return sorted(out, key=lambda p: p["metadata"]["name"])


def scaled(val: Any, total: int, round_up: bool = True) -> int:
    """``intstr.GetScaledValueFromIntOrPercent``."""
    if isinstance(val, int) and not isinstance(val, bool):
        return val
    s = str(val)
    if not s.endswith("%"):
        raise SyncError("invalid value for IntOrString: invalid type: string is not a percentage")
    try:
        v = int(s[:-1])
    except ValueError:
        raise SyncError(
            f'invalid value "{s}": strconv.Atoi: parsing "{s[:-1]}": invalid syntax'
        ) from None
    return math.ceil(v * total / 100) if round_up else math.floor(v * total / 100)


class SyncError(Exception):
    """A failed sync; the controller falls back to ``failSafe``."""


def set_condition(
    status: dict[str, Any], status_value: str, reason: str, message: str = ""
) -> None:
    """``apimeta.SetStatusCondition`` for ``DisruptionAllowed``."""
    conds = status.setdefault("conditions", [])
    gen = status.get("observedGeneration")
    cur = next((c for c in conds if c.get("type") == "DisruptionAllowed"), None)
    if cur is None:
        cond: dict[str, Any] = {"type": "DisruptionAllowed", "status": status_value}
        if gen:
            cond["observedGeneration"] = gen
        cond.update({"lastTransitionTime": _now(), "reason": reason, "message": message})
        conds.append(cond)
        return
    if cur.get("status") != status_value:
        cur["status"] = status_value
        cur["lastTransitionTime"] = _now()
    cur["reason"] = reason
    cur["message"] = message
    if gen:
        cur["observedGeneration"] = gen
    else:
        cur.pop("observedGeneration", None)


def update_allowed_condition(status: dict[str, Any]) -> None:
    """``pdbhelper.UpdateDisruptionAllowedCondition``."""
    if status.get("disruptionsAllowed", 0) > 0:
        set_condition(status, "True", "SufficientPods")
    else:
        set_condition(status, "False", "InsufficientPods")


def _conditions_up_to_date(pdb: dict[str, Any]) -> bool:
    st = pdb.get("status") or {}
    cond = next(
        (c for c in st.get("conditions") or [] if c.get("type") == "DisruptionAllowed"), None
    )
    if cond is None or st.get("observedGeneration", 0) != pdb["metadata"].get("generation", 0):
        return False
    if st.get("disruptionsAllowed", 0) > 0:
        return cond.get("status") == "True" and cond.get("reason") == "SufficientPods"
    return cond.get("status") == "False" and cond.get("reason") == "InsufficientPods"


def _ordered_status(st: dict[str, Any]) -> dict[str, Any]:
    """Fields in the order of ``PodDisruptionBudgetStatus`` (omitempty ones dropped)."""
    out: dict[str, Any] = {}
    if st.get("observedGeneration"):
        out["observedGeneration"] = st["observedGeneration"]
    if st.get("disruptedPods"):
        out["disruptedPods"] = st["disruptedPods"]
    for k in ("disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods"):
        out[k] = int(st.get(k) or 0)
    if st.get("conditions"):
        out["conditions"] = st["conditions"]
    return out


# ------------------------------------------------------------ controller
class DisruptionController:
    """Keeps every PDB's status current, ``sync_s`` after the events that matter."""

    def __init__(self, cluster: SimCluster, sync_s: float = 0.1) -> None:
        self.cluster = cluster
        self.sync_s = sync_s

    def enqueue(self, ns: str, name: str, delay: float | None = None) -> None:
        self.cluster.controllers.add_after(
            ("pdb", ns, name),
            self.sync_s if delay is None else delay,
            lambda: self._sync_task(ns, name),
        )

    def on_pdb_write(self, new: dict[str, Any] | None) -> None:
        if new is not None:
            self.enqueue(new["metadata"].get("namespace", ""), new["metadata"]["name"])

    def on_pod_write(self, ns: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        """addPod/updatePod/deletePod: the PDBs selecting the pod (old labels too)."""
        if not self.cluster.store.count("poddisruptionbudgets", ns):
            return
        names: set[str] = set()
        for obj in (old, new):
            if obj is not None:
                labels = (obj.get("metadata") or {}).get("labels") or {}
                names.update(p["metadata"]["name"] for p in matching_pdbs(self.cluster, ns, labels))
        for name in names:
            self.enqueue(ns, name)

    def _sync_task(self, ns: str, name: str) -> None:
        with self.cluster.store.lock:
            self.sync(ns, name)

    def sync(self, ns: str, name: str) -> None:
        store = self.cluster.store
        rec = store.get("poddisruptionbudgets", ns, name)
        if rec is None:
            return
        pdb = rec.obj()
        match = selector_matcher((pdb.get("spec") or {}).get("selector"))
        pods = [r for r in store.in_namespace("pods", ns) if match(r.labels)]
        try:
            expected, desired = self._expected(pdb, pods)
        except SyncError as err:
            self._fail_safe(ns, name, pdb, str(err))
            return
        now = time.time()
        disrupted, recheck = self._disrupted_map(pods, pdb, now)
        current = 0
        for r in pods:
            info = r.info
            if info is None or info.deleting:
                continue
            at = disrupted.get(r.name)
            if at is not None and _epoch(at) + DELETION_TIMEOUT_S > now:
                continue
            if info.ready:
                current += 1
        allowed = current - desired
        if expected <= 0 or allowed <= 0:
            allowed = 0
        st = pdb.get("status") or {}
        gen = pdb["metadata"].get("generation", 0)
        same = (
            st.get("currentHealthy") == current
            and st.get("desiredHealthy") == desired
            and st.get("expectedPods") == expected
            and st.get("disruptionsAllowed") == allowed
            and (st.get("disruptedPods") or {}) == disrupted
            and st.get("observedGeneration", 0) == gen
            and _conditions_up_to_date(pdb)
        )
        if not same:
            new = {
                "currentHealthy": current,
                "desiredHealthy": desired,
                "expectedPods": expected,
                "disruptionsAllowed": allowed,
                "disruptedPods": disrupted,
                "observedGeneration": gen,
                "conditions": copy.deepcopy(st.get("conditions") or []),
            }
            update_allowed_condition(new)
            self.cluster._write_status(
                RT["poddisruptionbudgets"], ns, name, _ordered_status(new), CONTROLLER
            )
        if recheck is not None:
            self.enqueue(ns, name, max(0.0, recheck - now))

    def _expected(self, pdb: dict[str, Any], pods: list[Any]) -> tuple[int, int]:
        """``getExpectedPodCount``: (expectedCount, desiredHealthy)."""
        spec = pdb.get("spec") or {}
        if spec.get("maxUnavailable") is not None:
            expected = self._expected_scale(pods)
            desired = max(0, expected - scaled(spec["maxUnavailable"], expected))
            return expected, desired
        if spec.get("minAvailable") is not None:
            mv = spec["minAvailable"]
            if isinstance(mv, int) and not isinstance(mv, bool):
                return len(pods), mv
            expected = self._expected_scale(pods)
            return expected, scaled(mv, expected)
        return 0, 0

    def _expected_scale(self, pods: list[Any]) -> int:
        """``getExpectedScale``: unmanaged pods add nothing; this simulator serves no
        workload controllers, so a pod with a controller is one it cannot find."""
        for r in pods:
            for ref in r.obj()["metadata"].get("ownerReferences") or []:
                if ref.get("controller"):
                    raise SyncError(f'found no controllers for pod "{r.name}"')
        return 0

    def _disrupted_map(
        self, pods: list[Any], pdb: dict[str, Any], now: float
    ) -> tuple[dict[str, str], float | None]:
        """``buildDisruptedPodMap``: keep entries of live pods until the timeout."""
        have = (pdb.get("status") or {}).get("disruptedPods") or {}
        out: dict[str, str] = {}
        recheck: float | None = None
        for r in pods:
            if r.info is not None and r.info.deleting:
                continue
            at = have.get(r.name)
            if at is None:
                continue
            expiry = _epoch(at) + DELETION_TIMEOUT_S
            if expiry >= now:
                out[r.name] = at
                recheck = expiry if recheck is None else min(recheck, expiry)
        return out, recheck

    def _fail_safe(self, ns: str, name: str, pdb: dict[str, Any], message: str) -> None:
        st = copy.deepcopy(pdb.get("status") or {})
        st["disruptionsAllowed"] = 0
        set_condition(st, "False", "SyncFailed", message)
        self.cluster._write_status(
            RT["poddisruptionbudgets"], ns, name, _ordered_status(st), CONTROLLER
        )


def _epoch(ts: str) -> float:
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
