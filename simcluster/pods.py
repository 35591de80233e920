"""Pods: defaulting and resource validation, QoS class, eviction with PodDisruptionBudgets."""

from __future__ import annotations

import json
import math
from typing import Any

from simcluster import quota as q
from simcluster.errors import ApiError, invalid
from simcluster.resources import RT


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class PodOps:
    """Evictions of :class:`~simcluster.cluster.SimCluster` (a mixin)."""

    # ------------------------------------------------------------- eviction
    def op_evict(self, ns: str, name: str, body: Any, params: dict[str, str]) -> tuple[int, bytes]:
        """policy/v1 Eviction: deletes the pod unless a PodDisruptionBudget forbids it (429)."""
        if isinstance(body, dict) and body.get("kind") not in (None, "Eviction"):
            raise ApiError(400, f"invalid Eviction body kind {body.get('kind')!r}")
        with self.store.lock:
            rec = self._existing(RT["pods"], ns, name)
            pod = rec.obj()
            if (pod.get("status") or {}).get("phase") == "Running":
                self._check_pdbs(ns, pod)
            if not params.get("dryRun"):
                self._delete(RT["pods"], ns, name)
        return 201, _dumps(
            {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
        )

    def _check_pdbs(self, ns: str, pod: dict[str, Any]) -> None:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        for pdb_rec in self.store.in_namespace("poddisruptionbudgets", ns):
            pdb = pdb_rec.obj()
            spec = pdb.get("spec") or {}
            match = _label_selector_matcher(spec.get("selector") or {})
            if not match(labels):
                continue
            expected = healthy = 0
            for prec in self.store.in_namespace("pods", ns):
                if prec.info is not None and prec.info.terminal:
                    continue
                if match(prec.labels):
                    expected += 1
                    if prec.fields.get("status.phase") == "Running":
                        healthy += 1
            if "minAvailable" in spec:
                desired = _scaled(spec["minAvailable"], expected)
                allowed = healthy - desired
            elif "maxUnavailable" in spec:
                desired = expected - _scaled(spec["maxUnavailable"], expected)
                allowed = _scaled(spec["maxUnavailable"], expected) - (expected - healthy)
            else:
                continue
            if allowed < 1:
                pname = pdb["metadata"]["name"]
                raise ApiError(
                    429,
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                    "TooManyRequests",
                    {
                        "causes": [
                            {
                                "reason": "DisruptionBudget",
                                "message": f"The disruption budget {pname} needs {desired} "
                                f"healthy pods and has {healthy} currently",
                            }
                        ]
                    },
                )


def prepare_pod(obj: dict[str, Any]) -> None:
    """Pod defaulting (requests from limits) and the resource validation the API server does."""
    spec = obj.setdefault("spec", {})
    name = obj["metadata"]["name"]
    containers = spec.get("containers") or []
    if not containers:
        raise ApiError(
            422,
            f'Pod "{name}" is invalid: spec.containers: Required value',
            "Invalid",
            {"name": name, "kind": "Pod"},
        )
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    for field_name in ("initContainers", "containers"):
        for idx, c in enumerate(spec.get(field_name) or []):
            res = c.setdefault("resources", {})
            lim = res.get("limits") or {}
            req = res.get("requests") or {}
            for k, v in lim.items():
                req.setdefault(k, v)
            for k, v in req.items():
                try:
                    rq = q.parse_quantity(v)
                except ValueError:
                    raise invalid(
                        "Pod",
                        name,
                        f"spec.{field_name}[{idx}].resources.requests[{k}]",
                        v,
                        "must be a valid quantity",
                    ) from None
                if q.is_native(k):
                    continue
                if k not in lim:
                    raise ApiError(
                        422,
                        f'Pod "{name}" is invalid: spec.{field_name}[{idx}].resources.limits: '
                        "Required value: Limit must be set for non overcommitable resources",
                        "Invalid",
                        {"name": name, "kind": "Pod"},
                    )
                if q.parse_quantity(lim[k]).value != rq.value:
                    raise ApiError(
                        422,
                        f'Pod "{name}" is invalid: spec.{field_name}[{idx}].resources.'
                        f'requests[{k}]: Invalid value: "{v}": must be equal to {k} limit of '
                        f"{lim[k]}",
                        "Invalid",
                        {"name": name, "kind": "Pod"},
                    )
            if req:
                res["requests"] = req


def qos(spec: dict[str, Any]) -> str:
    cs = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    any_set = False
    guaranteed = True
    for c in cs:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        for r in ("cpu", "memory"):
            if r in req or r in lim:
                any_set = True
            if r not in lim or q.parse_quantity(lim[r]) != q.parse_quantity(req.get(r, lim[r])):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _label_selector_matcher(sel: dict[str, Any]) -> Any:
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
            if op == "NotIn" and labels.get(k) in vals:
                return False
            if op == "Exists" and k not in labels:
                return False
            if op == "DoesNotExist" and k in labels:
                return False
        return True

    return match


def _scaled(val: Any, total: int) -> int:
    if isinstance(val, str) and val.endswith("%"):
        return math.ceil(int(val[:-1]) * total / 100)
    return int(val)
