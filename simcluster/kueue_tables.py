"""``kubectl get`` tables of Kueue's CRDs: their ``additionalPrinterColumns``.

kubernetes-sigs/kueue ``config/components/crd/bases/kueue.x-k8s.io_*.yaml`` (v1beta2):
ClusterQueue ``Cohort``, ``Strategy`` (priority 1), ``Pending Workloads``, ``Admitted
Workloads`` (priority 1); LocalQueue ``ClusterQueue``, ``Pending Workloads``, ``Admitted
Workloads``; Workload ``Queue``, ``Reserved in``, ``Admitted``, ``Finished``, ``Age``;
ResourceFlavor and Cohort declare none, so they get the CRD default ``Age``. The cells are
what kubernetes ``staging/src/k8s.io/apiextensions-apiserver/pkg/registry/customresource/
tableconvertor/tableconvertor.go`` makes of the JSON paths: nil when a path finds nothing
(kubectl prints ``<none>``), a date column as the age.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from simcluster.gofmt import human_duration


def _col(name: str, typ: str = "string", fmt: str = "", priority: int = 0) -> dict[str, Any]:
    return {"name": name, "type": typ, "format": fmt, "description": name, "priority": priority}


def _age(obj: dict[str, Any]) -> str:
    ts = (obj.get("metadata") or {}).get("creationTimestamp")
    if not ts:
        return "<unknown>"
    t = datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return human_duration((datetime.now(UTC) - t).total_seconds())


def _path(obj: dict[str, Any], *keys: str) -> Any:
    cur: Any = obj
    for k in keys:
        if not isinstance(cur, dict) or k not in cur:
            return None
        cur = cur[k]
    return cur


def _condition(obj: dict[str, Any], typ: str) -> Any:
    for c in _path(obj, "status", "conditions") or []:
        if isinstance(c, dict) and c.get("type") == typ:
            return c.get("status")
    return None


def _cells(*getters: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], list[Any]]:
    return lambda o: [_path(o, "metadata", "name"), *(g(o) for g in getters)]


_NAME = _col("Name", fmt="name")
_AGE = _col("Age", "date")
PRINTERS: dict[str, tuple[list[dict[str, Any]], Callable[[dict[str, Any]], list[Any]]]] = {
    "clusterqueues": (
        [
            _NAME,
            _col("Cohort"),
            _col("Strategy", priority=1),
            _col("Pending Workloads", "integer"),
            _col("Admitted Workloads", "integer", priority=1),
        ],
        _cells(
            lambda o: _path(o, "spec", "cohortName"),
            lambda o: _path(o, "spec", "queueingStrategy"),
            lambda o: _path(o, "status", "pendingWorkloads"),
            lambda o: _path(o, "status", "admittedWorkloads"),
        ),
    ),
    "localqueues": (
        [
            _NAME,
            _col("ClusterQueue"),
            _col("Pending Workloads", "integer"),
            _col("Admitted Workloads", "integer"),
        ],
        _cells(
            lambda o: _path(o, "spec", "clusterQueue"),
            lambda o: _path(o, "status", "pendingWorkloads"),
            lambda o: _path(o, "status", "admittedWorkloads"),
        ),
    ),
    "workloads": (
        [_NAME, _col("Queue"), _col("Reserved in"), _col("Admitted"), _col("Finished"), _AGE],
        _cells(
            lambda o: _path(o, "spec", "queueName"),
            lambda o: _path(o, "status", "admission", "clusterQueue"),
            lambda o: _condition(o, "Admitted"),
            lambda o: _condition(o, "Finished"),
            _age,
        ),
    ),
    "resourceflavors": ([_NAME, _AGE], _cells(_age)),
    "cohorts": ([_NAME, _AGE], _cells(_age)),
}
