"""Agent reports: strict validation and a one-statement write (docs/agent-report.md).

``validate_report`` checks every field's type and bounds by hand (no serializer: at 500
reports/s on two cores the validation budget is tens of microseconds) and returns the
normalised report or raises ``ReportInvalid`` with one message per field path
(``gpus[2].memory_used_mib``).

``store_report`` writes an accepted report with ONE SQL statement (so one implicit
transaction, one round trip), made of data-modifying CTEs:

1. insert the idempotency key (node, timestamp) ``ON CONFLICT DO NOTHING``; everything
   below is gated on it, so a duplicate writes nothing;
2. upsert the node's ``NodeTelemetry`` row;
3. upsert every GPU's ``GpuState`` row (the GPUs travel as one jsonb parameter); an older
   report (an agent flushing its buffer) never overwrites a newer state;
4. accumulate every GPU's 5-minute history point: ``ON CONFLICT (gpu, bucket) DO UPDATE``
   adding sums and counts, so averages stay exact.

Telemetry is written with ``synchronous_commit = off``: a crash of PostgreSQL may lose the
last fraction of a second of acknowledged reports (never corrupt anything), and a report
does not wait for a WAL flush.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import connection
from django.utils import timezone

from portal.validation import InputRefused, text_problem, unique_keys

from .consistency import within_report

MAX_BODY_BYTES = 256 * 1024
MAX_GPUS = 64
MAX_MIG_DEVICES = 64
MAX_PROCESSES = 256
MAX_UNSUPPORTED = 32
# A current report: within this of the portal's clock (both ways).
CLOCK_WINDOW = timedelta(minutes=10)
# Older reports from an agent's buffer are still accepted (for history) up to this age.
MAX_REPORT_AGE = timedelta(hours=1)
BUCKET = timedelta(minutes=5)
STALE_INTERVALS = 3

TOPOLOGY_LINK = re.compile(r"^(X|NV[0-9]{1,3}|PIX|PXB|PHB|NODE|SYS)$")
TOP_LEVEL = {
    "node", "timestamp", "agent_version", "interval_s", "driver_version",
    "cuda_driver_version", "gpus", "topology",
}  # fmt: skip
GPU_KEYS = {
    "index", "uuid", "name", "lost", "memory_total_mib", "memory_used_mib",
    "utilization_gpu_pct", "utilization_memory_pct", "temperature_c", "power_w",
    "power_limit_w", "mig_mode", "mig_devices", "processes", "unsupported",
}  # fmt: skip
MIG_DEVICE_KEYS = {"index", "uuid", "profile", "memory_total_mib", "memory_used_mib"}
PROCESS_KEYS = {"pid", "used_memory_mib", "pod", "mig_uuid"}
MAX_MIB = 1 << 20  # 1 TiB of GPU memory
# name: (minimum, maximum, integer only)
GPU_METRICS = {
    "memory_total_mib": (0, MAX_MIB, True),
    "memory_used_mib": (0, MAX_MIB, True),
    "utilization_gpu_pct": (0, 100, True),
    "utilization_memory_pct": (0, 100, True),
    "temperature_c": (-50, 200, True),
    "power_w": (0, 10_000, False),
    "power_limit_w": (0, 10_000, False),
}


class ReportInvalid(Exception):
    """A report that breaks the contract; ``errors`` maps field paths to messages."""

    def __init__(self, errors: dict[str, str]):
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


class _Errors(dict):
    def add(self, path: str, message: str) -> None:
        self.setdefault(path, message)


def _no_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def parse_body(body: bytes) -> Any:
    """``json.loads`` that refuses NaN / Infinity (they are not JSON) and deep nesting.

    Strings are checked for NUL and lone surrogates where they are read (``_string``):
    walking the whole tree here would cost more than the rest of the validation.
    """
    try:
        return json.loads(body, parse_constant=_no_constant, object_pairs_hook=unique_keys)
    except RecursionError as err:
        raise ReportInvalid({"body": "JSON nested too deeply."}) from err
    except InputRefused as err:  # a duplicate key
        raise ReportInvalid({"body": str(err)}) from err
    except (ValueError, UnicodeDecodeError) as err:
        raise ReportInvalid({"body": f"Not valid JSON: {err}"}) from err


def _is_int(v: Any) -> bool:
    return type(v) is int  # bool is an int subclass: refuse it


def _is_number(v: Any) -> bool:
    return (type(v) is int or type(v) is float) and math.isfinite(v)


def _string(errors: _Errors, path: str, v: Any, max_len: int, *, nullable: bool) -> str | None:
    if v is None:
        if not nullable:
            errors.add(path, "This field may not be null.")
        return None
    if type(v) is not str:
        errors.add(path, "Must be a string.")
        return None
    if len(v) > max_len:
        errors.add(path, f"At most {max_len} characters.")
        return None
    problem = text_problem(v)  # PostgreSQL stores neither NUL nor lone surrogates
    if problem:
        errors.add(path, problem)
        return None
    return v


def _int(errors: _Errors, path: str, v: Any, lo: int, hi: int, *, nullable: bool) -> int | None:
    if v is None:
        if not nullable:
            errors.add(path, "This field may not be null.")
        return None
    if not _is_int(v):
        errors.add(path, "Must be an integer.")
        return None
    if not lo <= v <= hi:
        errors.add(path, f"Must be between {lo} and {hi}.")
        return None
    return v


def _unknown(errors: _Errors, path: str, obj: dict, allowed: set[str]) -> None:
    for key in obj.keys() - allowed:
        errors.add(f"{path}.{key}" if path else key, "Unknown field.")


def _parse_timestamp(errors: _Errors, v: Any, now: datetime) -> datetime | None:
    if type(v) is not str or len(v) > 40:
        errors.add("timestamp", "Must be an ISO 8601 date-time string with a time zone.")
        return None
    try:
        ts = datetime.fromisoformat(v)
    except ValueError:
        errors.add("timestamp", "Must be an ISO 8601 date-time string with a time zone.")
        return None
    if ts.tzinfo is None:
        errors.add("timestamp", "A time zone is required (e.g. 2026-11-30T14:00:00Z).")
        return None
    try:
        ts = ts.astimezone(UTC)
    except OverflowError:  # year 1 or 9999 with an offset: outside any window anyway
        errors.add("timestamp", "Outside the accepted window (an hour back, 10 minutes ahead).")
        return None
    if ts > now + CLOCK_WINDOW:
        errors.add("timestamp", "More than 10 minutes ahead of the portal's clock.")
    elif ts < now - MAX_REPORT_AGE:
        errors.add("timestamp", "Older than 1 hour: too old to be accepted.")
    return ts


def _gpu(errors: _Errors, p: str, g: Any) -> dict | None:
    if type(g) is not dict:
        errors.add(p, "Must be an object.")
        return None
    _unknown(errors, p, g, GPU_KEYS)
    out: dict[str, Any] = {}
    if "index" not in g:
        errors.add(f"{p}.index", "This field is required.")
    out["index"] = _int(errors, f"{p}.index", g.get("index"), 0, MAX_GPUS - 1, nullable=False)
    out["uuid"] = _string(errors, f"{p}.uuid", g.get("uuid"), 96, nullable=True) or ""
    out["name"] = _string(errors, f"{p}.name", g.get("name"), 96, nullable=True) or ""
    lost = g.get("lost", False)
    if type(lost) is not bool:
        errors.add(f"{p}.lost", "Must be a boolean.")
    out["lost"] = lost is True
    for key, (lo, hi, integer) in GPU_METRICS.items():
        v = g.get(key)
        if v is None:
            out[key] = None
        elif integer and not _is_int(v):
            errors.add(f"{p}.{key}", "Must be an integer or null.")
        elif not integer and not _is_number(v):
            errors.add(f"{p}.{key}", "Must be a number or null.")
        elif not lo <= v <= hi:
            errors.add(f"{p}.{key}", f"Must be between {lo} and {hi}.")
        else:
            out[key] = v
    mig = g.get("mig_mode")
    out["mig_current"] = out["mig_pending"] = None
    if mig is not None:
        if type(mig) is not dict or mig.keys() != {"current", "pending"}:
            errors.add(f"{p}.mig_mode", 'Must be null or {"current": bool, "pending": bool}.')
        elif type(mig["current"]) is not bool or type(mig["pending"]) is not bool:
            errors.add(f"{p}.mig_mode", "current and pending must be booleans.")
        else:
            out["mig_current"], out["mig_pending"] = mig["current"], mig["pending"]
    out["mig_devices"] = _list(errors, f"{p}.mig_devices", g.get("mig_devices"),
                               MAX_MIG_DEVICES, _mig_device)  # fmt: skip
    out["processes"] = _list(errors, f"{p}.processes", g.get("processes"),
                             MAX_PROCESSES, _process)  # fmt: skip
    unsupported = g.get("unsupported")
    out["unsupported"] = []
    if unsupported is not None:
        if type(unsupported) is not list or len(unsupported) > MAX_UNSUPPORTED:
            errors.add(f"{p}.unsupported", f"Must be a list of at most {MAX_UNSUPPORTED} names.")
        elif not all(
            type(u) is str and 0 < len(u) <= 64 and text_problem(u) is None for u in unsupported
        ):
            errors.add(
                f"{p}.unsupported",
                "Must hold field names (strings up to 64 characters, no NUL or surrogates).",
            )
        else:
            out["unsupported"] = unsupported
    return out


def _list(errors: _Errors, p: str, v: Any, limit: int, item) -> list:
    if v is None:
        return []
    if type(v) is not list:
        errors.add(p, "Must be a list or null.")
        return []
    if len(v) > limit:
        errors.add(p, f"At most {limit} entries.")
        return []
    return [item(errors, f"{p}[{i}]", x) for i, x in enumerate(v)]


def _mig_device(errors: _Errors, p: str, d: Any) -> dict | None:
    if type(d) is not dict:
        errors.add(p, "Must be an object.")
        return None
    _unknown(errors, p, d, MIG_DEVICE_KEYS)
    return {
        "index": _int(errors, f"{p}.index", d.get("index"), 0, MAX_MIG_DEVICES - 1,
                      nullable=False),
        "uuid": _string(errors, f"{p}.uuid", d.get("uuid"), 96, nullable=True),
        "profile": _string(errors, f"{p}.profile", d.get("profile"), 32, nullable=True),
        "memory_total_mib": _int(errors, f"{p}.memory_total_mib", d.get("memory_total_mib"),
                                 0, MAX_MIB, nullable=True),
        "memory_used_mib": _int(errors, f"{p}.memory_used_mib", d.get("memory_used_mib"),
                                0, MAX_MIB, nullable=True),
    }  # fmt: skip


def _process(errors: _Errors, p: str, d: Any) -> dict | None:
    if type(d) is not dict:
        errors.add(p, "Must be an object.")
        return None
    _unknown(errors, p, d, PROCESS_KEYS)
    return {
        "pid": _int(errors, f"{p}.pid", d.get("pid"), 0, 2**31 - 1, nullable=False),
        "used_memory_mib": _int(errors, f"{p}.used_memory_mib", d.get("used_memory_mib"),
                                0, MAX_MIB, nullable=True),
        # "namespace/name"
        "pod": _string(errors, f"{p}.pod", d.get("pod"), 317, nullable=True),
        "mig_uuid": _string(errors, f"{p}.mig_uuid", d.get("mig_uuid"), 96, nullable=True),
    }  # fmt: skip


def _topology(errors: _Errors, v: Any) -> list | None:
    if v is None:
        return None
    if type(v) is not list or len(v) > MAX_GPUS:
        errors.add("topology", f"Must be null or a square matrix of at most {MAX_GPUS} rows.")
        return None
    n = len(v)
    for i, row in enumerate(v):
        if type(row) is not list or len(row) != n:
            errors.add(f"topology[{i}]", f"Must be a list of {n} links (a square matrix).")
            return None
        for j, link in enumerate(row):
            if link is not None and (type(link) is not str or not TOPOLOGY_LINK.fullmatch(link)):
                message = "Must be null or one of X, NV<n>, PIX, PXB, PHB, NODE, SYS."
                errors.add(f"topology[{i}][{j}]", message)
                return None
    return v


def validate_report(data: Any, now: datetime | None = None) -> dict:
    """The normalised report, or ``ReportInvalid`` with a message per field path."""
    now = now or timezone.now()
    if type(data) is not dict:
        raise ReportInvalid({"body": "Must be a JSON object."})
    errors = _Errors()
    _unknown(errors, "", data, TOP_LEVEL)
    for key in ("node", "timestamp", "gpus"):
        if key not in data:
            errors.add(key, "This field is required.")
    out: dict[str, Any] = {
        "node": _string(errors, "node", data.get("node"), 253, nullable=False),
        "timestamp": _parse_timestamp(errors, data.get("timestamp"), now)
        if "timestamp" in data
        else None,
        "agent_version": _string(errors, "agent_version", data.get("agent_version"), 64,
                                 nullable=True) or "",
        "interval_s": _int(errors, "interval_s", data.get("interval_s", 15), 1, 3600,
                           nullable=False),
        "driver_version": _string(errors, "driver_version", data.get("driver_version"), 32,
                                  nullable=True) or "",
        "cuda_driver_version": _int(errors, "cuda_driver_version",
                                    data.get("cuda_driver_version"), 0, 10**6, nullable=True),
        "topology": _topology(errors, data.get("topology")),
    }  # fmt: skip
    if out["node"] == "":
        errors.add("node", "May not be blank.")
    gpus = data.get("gpus")
    out["gpus"] = []
    if "gpus" in data:
        if type(gpus) is not list:
            errors.add("gpus", "Must be a list.")
        elif len(gpus) > MAX_GPUS:
            errors.add("gpus", f"At most {MAX_GPUS} GPUs per report.")
        else:
            out["gpus"] = [_gpu(errors, f"gpus[{i}]", g) for i, g in enumerate(gpus)]
            seen: set[int] = set()
            for i, g in enumerate(out["gpus"]):
                if g is not None and g["index"] is not None:
                    if g["index"] in seen:
                        errors.add(f"gpus[{i}].index", "Duplicate GPU index in this report.")
                    seen.add(g["index"])
            within_report(errors, out["gpus"])
    if errors:
        raise ReportInvalid(dict(errors))
    out["gpus"].sort(key=lambda g: g["index"])  # one lock order for concurrent reports
    return out


# -- storage ---------------------------------------------------------------------------------

_GPU_COLUMNS = [
    ("uuid", "text"), ("name", "text"), ("lost", "boolean"), ("memory_total_mib", "int"),
    ("memory_used_mib", "int"), ("utilization_gpu_pct", "smallint"),
    ("utilization_memory_pct", "smallint"), ("temperature_c", "smallint"),
    ("power_w", "double precision"), ("power_limit_w", "double precision"),
    ("mig_current", "boolean"), ("mig_pending", "boolean"), ("mig_devices", "jsonb"),
    ("processes", "jsonb"), ("unsupported", "jsonb"),
]  # fmt: skip
_NODE_COLUMNS = [
    "driver_version", "cuda_driver_version", "agent_version", "interval_s", "gpu_count",
    "topology", "last_report_at", "last_report_timestamp", "stale_after",
]  # fmt: skip


def _fresh_or_kept(column: str, newer: str) -> str:
    return f"{column} = CASE WHEN {newer} THEN EXCLUDED.{column} ELSE t.{column} END"


def _build_sql() -> str:
    gpu_cols = ", ".join(c for c, _ in _GPU_COLUMNS)
    recordset = ", ".join(f"{c} {t}" for c, t in [("index", "smallint"), *_GPU_COLUMNS])
    newer_gpu = "EXCLUDED.reported_at >= t.reported_at"
    gpu_updates = ", ".join(
        [_fresh_or_kept(c, newer_gpu) for c, _ in _GPU_COLUMNS if c not in ("uuid", "name")]
        + [
            f"{c} = CASE WHEN {newer_gpu} AND EXCLUDED.{c} <> '' THEN EXCLUDED.{c} ELSE t.{c} END"
            for c in ("uuid", "name")
        ]
        + [_fresh_or_kept(c, newer_gpu) for c in ("reported_at", "stale_after")]
    )
    node_updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in _NODE_COLUMNS)
    # Identifiers are this module's constants; every value is a parameter.
    return f"""
SET LOCAL synchronous_commit TO OFF;
WITH k AS (
    INSERT INTO telemetry_agentreport (node_id, timestamp, received_at)
    VALUES (%(node)s, %(ts)s, %(now)s)
    ON CONFLICT (node_id, timestamp) DO NOTHING
    RETURNING 1
), v AS (
    SELECT * FROM jsonb_to_recordset(%(gpus)s::jsonb) AS v({recordset})
    WHERE EXISTS (SELECT FROM k)
), nt AS (
    INSERT INTO telemetry_nodetelemetry AS t (node_id, {", ".join(_NODE_COLUMNS)})
    SELECT %(node)s, %(driver_version)s, %(cuda_driver_version)s, %(agent_version)s,
           %(interval_s)s, %(gpu_count)s, %(topology)s::jsonb, %(now)s, %(ts)s, %(stale_after)s
    WHERE EXISTS (SELECT FROM k)
    ON CONFLICT (node_id) DO UPDATE SET {node_updates}
    WHERE t.last_report_timestamp <= EXCLUDED.last_report_timestamp
), g AS (
    INSERT INTO telemetry_gpustate AS t (node_id, index, {gpu_cols}, reported_at, stale_after)
    SELECT %(node)s, index, {gpu_cols}, %(ts)s, %(stale_after)s FROM v
    ON CONFLICT (node_id, index) DO UPDATE SET {gpu_updates}
    RETURNING t.id, t.index
), h AS (
    INSERT INTO telemetry_gpuhistory5m AS t (gpu_id, bucket, samples, util_sum, util_n,
        util_max, mem_used_sum, mem_n, temp_max, power_sum, power_n)
    SELECT g.id, %(bucket)s, 1,
        coalesce(v.utilization_gpu_pct, 0), (v.utilization_gpu_pct IS NOT NULL)::int,
        v.utilization_gpu_pct,
        coalesce(v.memory_used_mib, 0), (v.memory_used_mib IS NOT NULL)::int,
        v.temperature_c,
        coalesce(v.power_w, 0), (v.power_w IS NOT NULL)::int
    FROM g JOIN v ON v.index = g.index
    ON CONFLICT (gpu_id, bucket) DO UPDATE SET
        samples = t.samples + 1,
        util_sum = t.util_sum + EXCLUDED.util_sum, util_n = t.util_n + EXCLUDED.util_n,
        util_max = greatest(t.util_max, EXCLUDED.util_max),
        mem_used_sum = t.mem_used_sum + EXCLUDED.mem_used_sum,
        mem_n = t.mem_n + EXCLUDED.mem_n,
        temp_max = greatest(t.temp_max, EXCLUDED.temp_max),
        power_sum = t.power_sum + EXCLUDED.power_sum, power_n = t.power_n + EXCLUDED.power_n
    RETURNING 1
)
SELECT EXISTS (SELECT FROM k), (SELECT count(*) FROM h)
"""  # noqa: S608


# (name, type) of the statement's parameters, in $n order.
_PARAMS = [
    ("node", "uuid"), ("ts", "timestamptz"), ("now", "timestamptz"), ("gpus", "text"),
    ("driver_version", "text"), ("cuda_driver_version", "int"), ("agent_version", "text"),
    ("interval_s", "int"), ("gpu_count", "int"), ("topology", "text"),
    ("stale_after", "timestamptz"), ("bucket", "timestamptz"),
]  # fmt: skip
STORE_SQL = _build_sql()
_SET_ASYNC_COMMIT = STORE_SQL.split(";", 1)[0] + ";"
_BODY = STORE_SQL.split(";", 1)[1]
for _n, (_name, _) in enumerate(_PARAMS, start=1):
    _BODY = _BODY.replace(f"%({_name})s", f"${_n}")
# Planning this statement costs about as much as running it (0.6 of 1.6 ms), so each
# connection PREPAREs it once and EXECUTEs it after. Prepared statements outlive rollbacks;
# a pooler in transaction mode (PgBouncer) would need TELEMETRY_PREPARED_STATEMENTS=False.
PREPARE_SQL = f"PREPARE telemetry_store ({', '.join(t for _, t in _PARAMS)}) AS {_BODY}"
EXECUTE_SQL = (
    _SET_ASYNC_COMMIT
    + f" EXECUTE telemetry_store ({', '.join(f'%({name})s' for name, _ in _PARAMS)})"
)


def _execute_store(cur, params: dict) -> None:
    if not getattr(settings, "TELEMETRY_PREPARED_STATEMENTS", True):
        cur.execute(STORE_SQL, params)
        return
    raw = connection.connection
    # The DatabaseWrapper is per thread; remember which DB-API connection has it prepared.
    if getattr(connection, "_telemetry_prepared_on", None) is not raw:
        cur.execute(PREPARE_SQL)
        connection._telemetry_prepared_on = raw
    cur.execute(EXECUTE_SQL, params)


def bucket_of(ts: datetime, width: timedelta = BUCKET) -> datetime:
    epoch = datetime(2000, 1, 1, tzinfo=UTC)
    return ts - (ts - epoch) % width


@dataclass(frozen=True, slots=True)
class StoreResult:
    accepted: bool  # False: a duplicate (node, timestamp), nothing written
    history_points: int


def store_report(node_id: UUID, report: dict, now: datetime | None = None) -> StoreResult:
    """Write a validated report for ``node_id`` in one statement (see the module docstring)."""
    now = now or timezone.now()
    ts: datetime = report["timestamp"]
    # A current report keeps the node fresh from now; a buffered old one is stale already.
    fresh_from = now if ts >= now - CLOCK_WINDOW else ts
    stale_after = fresh_from + timedelta(seconds=STALE_INTERVALS * report["interval_s"])
    params = {
        "node": node_id,
        "ts": ts,
        "now": now,
        "bucket": bucket_of(ts),
        "stale_after": stale_after,
        "driver_version": report["driver_version"],
        "cuda_driver_version": report["cuda_driver_version"],
        "agent_version": report["agent_version"],
        "interval_s": report["interval_s"],
        "gpu_count": len(report["gpus"]),
        "topology": None if report["topology"] is None else json.dumps(report["topology"]),
        "gpus": json.dumps(report["gpus"]),
    }
    with connection.cursor() as cur:
        _execute_store(cur, params)
        accepted, points = cur.fetchone()
    return StoreResult(accepted=accepted, history_points=points)
