"""What one node's report may claim (#24, finding 7).

A node token lets its holder post reports for that node; the shape is checked in
``ingest.validate_report`` (memory used within total is checked there too). This module
checks a valid report against what the portal knows, so that a stolen node token cannot
rewrite other nodes' or teams' figures:

- **only its own GPUs**: a GPU UUID that another node currently reports (its state not
  stale) is refused; a GPU that really moved is accepted once its old node's state is
  stale;
- **processes only of pods on that node**: a process attributed to ``namespace/name`` must
  belong to a GPU pod the inventory places on the node (its namespace's GPU use would
  otherwise be made up);
- **not an empty list for a node with GPUs**: a GPU NVML cannot read is reported with
  ``lost: true``, not left out (an empty list would drop every GPU of the node).

Errors are keyed by the field path, like the schema's (``gpus[3].uuid``).
"""

from __future__ import annotations

from datetime import datetime

from django.db import connection

# One statement per report (ingest stays at three: token, this, the store): the report's
# GPU UUIDs that another node currently reports, the report's pods that run on the node,
# and, for an empty GPU list, the node's GPU count.
CHECK_SQL = """
SELECT 'uuid', g.uuid, n.name
  FROM telemetry_gpustate g JOIN inventory_node n ON n.id = g.node_id
 WHERE g.uuid = ANY(%(uuids)s) AND g.node_id <> %(node)s AND g.stale_after >= %(now)s
UNION ALL
SELECT 'pod', p.namespace || '/' || p.name, ''
  FROM inventory_gpupod p
 WHERE p.node_id = %(node)s AND p.namespace || '/' || p.name = ANY(%(pods)s)
UNION ALL
SELECT 'gpus', n.gpu_count::text, '' FROM inventory_node n WHERE n.id = %(node)s AND %(empty)s
"""


def inventory_errors(node_id, node_name: str, report: dict, now: datetime) -> dict[str, str]:
    gpus = report["gpus"]
    where = {g["uuid"]: i for i, g in enumerate(gpus) if g["uuid"]}
    claimed = {
        (i, j): p["pod"]
        for i, g in enumerate(gpus)
        for j, p in enumerate(g["processes"])
        if p and p.get("pod")
    }
    if not where and not claimed and gpus:
        return {}
    params = {"uuids": list(where), "pods": sorted(set(claimed.values())), "node": node_id,
              "now": now, "empty": not gpus}  # fmt: skip
    with connection.cursor() as cur:
        cur.execute(CHECK_SQL, params)
        rows = cur.fetchall()
    errors: dict[str, str] = {}
    on_node = {value for kind, value, _ in rows if kind == "pod"}
    for kind, value, other in rows:
        if kind == "uuid":
            errors[f"gpus[{where[value]}].uuid"] = (
                f"{value} is reported by node {other}: a node reports only its own GPUs."
            )
        elif kind == "gpus" and int(value):
            errors["gpus"] = (
                f"Node {node_name} has {value} GPUs in the inventory: report each of them "
                "(lost: true for a GPU NVML cannot read)."
            )
    for (i, j), pod in claimed.items():
        if pod not in on_node:
            errors[f"gpus[{i}].processes[{j}].pod"] = (
                f"No GPU pod {pod} runs on node {node_name} in the inventory."
            )
    return errors


def within_report(errors, gpus: list) -> None:
    """Within one report: a UUID once, memory used within total (GPU, MIG device, and a
    process within its GPU); #24 finding 7."""
    uuids: dict[str, int] = {}
    for i, g in enumerate(gpus):
        if g is None:
            continue
        if g["uuid"]:
            if g["uuid"] in uuids:
                errors.add(f"gpus[{i}].uuid", f"Also the UUID of gpus[{uuids[g['uuid']]}].")
            uuids.setdefault(g["uuid"], i)
        total = g.get("memory_total_mib")
        if total is not None and (g.get("memory_used_mib") or 0) > total:
            errors.add(f"gpus[{i}].memory_used_mib", f"More than memory_total_mib ({total}).")
        for j, d in enumerate(g["mig_devices"]):
            if (
                d
                and d["memory_total_mib"] is not None
                and (d["memory_used_mib"] or 0) > d["memory_total_mib"]
            ):
                errors.add(f"gpus[{i}].mig_devices[{j}].memory_used_mib",
                           f"More than memory_total_mib ({d['memory_total_mib']}).")  # fmt: skip
        for j, p in enumerate(g["processes"]):
            if p and total is not None and (p["used_memory_mib"] or 0) > total:
                errors.add(f"gpus[{i}].processes[{j}].used_memory_mib",
                           f"More than the GPU's memory_total_mib ({total}).")  # fmt: skip
