"""``kubectl get`` columns of the workload types, after ``pkg/printers/internalversion/
printers.go`` (1.32): printDaemonSet, printDeployment, printReplicaSet, printStatefulSet,
printJob, printCronJob, printIngress, printIngressClass (wide-only columns ``priority: 1``).
:mod:`simcluster.tables` merges :data:`PRINTERS` into its own.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from simcluster.gofmt import human_duration


def _d(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _col(name: str, typ: str = "string", fmt: str = "", priority: int = 0) -> dict[str, Any]:
    return {"name": name, "type": typ, "format": fmt, "description": name, "priority": priority}


def _ts(ts: Any) -> datetime | None:
    try:
        return datetime.strptime(str(ts), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def _since(ts: Any, none: str = "<unknown>") -> str:
    t = _ts(ts) if ts else None
    return none if t is None else human_duration((datetime.now(UTC) - t).total_seconds())


def _labels(labels: Any) -> str:
    labels = _d(labels)
    return ",".join(f"{k}={labels[k]}" for k in sorted(labels)) or "<none>"


def selector_string(sel: Any) -> str:
    """``metav1.FormatLabelSelector``: ``<none>`` for an empty one."""
    sel = _d(sel)
    parts = [f"{k}={v}" for k, v in sorted(_d(sel.get("matchLabels")).items())]
    for e in sel.get("matchExpressions") or []:
        e = _d(e)
        key, op, vals = e.get("key", ""), e.get("operator", ""), sorted(e.get("values") or [])
        if op in ("In", "NotIn"):
            parts.append(f"{key} {op.lower()} ({','.join(vals)})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(sorted(parts)) or "<none>"


def _containers(tpl_spec: Any) -> tuple[str, str]:
    cs = _d(tpl_spec).get("containers") or []
    return ",".join(str(_d(c).get("name")) for c in cs), ",".join(
        str(_d(c).get("image")) for c in cs
    )


_WIDE = [_col("Containers", priority=1), _col("Images", priority=1)]
_SELECTOR = [_col("Selector", priority=1)]


def _head(o: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    return _d(o.get("metadata")), _d(o.get("spec")), _d(o.get("status"))


def _ds(o: dict[str, Any]) -> list[Any]:
    m, s, st = _head(o)
    tspec = _d(_d(s.get("template")).get("spec"))
    names, images = _containers(tspec)
    return [
        m.get("name"),
        int(st.get("desiredNumberScheduled") or 0),
        int(st.get("currentNumberScheduled") or 0),
        int(st.get("numberReady") or 0),
        int(st.get("updatedNumberScheduled") or 0),
        int(st.get("numberAvailable") or 0),
        _labels(tspec.get("nodeSelector")),
        _since(m.get("creationTimestamp")),
        names,
        images,
        selector_string(s.get("selector")),
    ]


def _deploy(o: dict[str, Any]) -> list[Any]:
    m, s, st = _head(o)
    names, images = _containers(_d(s.get("template")).get("spec"))
    return [
        m.get("name"),
        f"{int(st.get('readyReplicas') or 0)}/{int(s.get('replicas') or 0)}",
        int(st.get("updatedReplicas") or 0),
        int(st.get("availableReplicas") or 0),
        _since(m.get("creationTimestamp")),
        names,
        images,
        selector_string(s.get("selector")),
    ]


def _rs(o: dict[str, Any]) -> list[Any]:
    m, s, st = _head(o)
    names, images = _containers(_d(s.get("template")).get("spec"))
    return [
        m.get("name"),
        int(s.get("replicas") or 0),
        int(st.get("replicas") or 0),
        int(st.get("readyReplicas") or 0),
        _since(m.get("creationTimestamp")),
        names,
        images,
        selector_string(s.get("selector")),
    ]


def _sts(o: dict[str, Any]) -> list[Any]:
    m, s, st = _head(o)
    names, images = _containers(_d(s.get("template")).get("spec"))
    ready = f"{int(st.get('readyReplicas') or 0)}/{int(s.get('replicas') or 0)}"
    return [m.get("name"), ready, _since(m.get("creationTimestamp")), names, images]


def _has(conds: Any, typ: str) -> bool:
    return any(_d(c).get("type") == typ and _d(c).get("status") == "True" for c in conds or [])


def _job(o: dict[str, Any]) -> list[Any]:
    m, s, st = _head(o)
    conds = st.get("conditions")
    status = "Running"
    if _has(conds, "Complete"):
        status = "Complete"
    elif _has(conds, "Failed"):
        status = "Failed"
    elif m.get("deletionTimestamp"):
        status = "Terminating"
    elif _has(conds, "Suspended"):
        status = "Suspended"
    elif _has(conds, "FailureTarget"):
        status = "FailureTarget"
    elif _has(conds, "SuccessCriteriaMet"):
        status = "SuccessCriteriaMet"
    done = int(st.get("succeeded") or 0)
    if s.get("completions") is not None:
        completions = f"{done}/{int(s['completions'])}"
    elif int(s.get("parallelism") or 0) > 1:
        completions = f"{done}/1 of {int(s['parallelism'])}"
    else:
        completions = f"{done}/1"
    start, end = _ts(st.get("startTime") or ""), _ts(st.get("completionTime") or "")
    duration = ""
    if start is not None:
        duration = human_duration(((end or datetime.now(UTC)) - start).total_seconds())
    names, images = _containers(_d(s.get("template")).get("spec"))
    return [
        m.get("name"),
        status,
        completions,
        duration,
        _since(m.get("creationTimestamp")),
        names,
        images,
        selector_string(s.get("selector")),
    ]


def _cronjob(o: dict[str, Any]) -> list[Any]:
    m, s, st = _head(o)
    tspec = _d(_d(_d(s.get("jobTemplate")).get("spec")).get("template")).get("spec")
    names, images = _containers(tspec)
    return [
        m.get("name"),
        s.get("schedule") or "",
        s.get("timeZone") or "<none>",
        bool(s.get("suspend")),
        len(st.get("active") or []),
        _since(st.get("lastScheduleTime"), "<none>"),
        _since(m.get("creationTimestamp")),
        names,
        images,
        selector_string(_d(_d(s.get("jobTemplate")).get("spec")).get("selector")),
    ]


def _ingress(o: dict[str, Any]) -> list[Any]:
    m, s, st = _head(o)
    rules = s.get("rules") or []
    hosts: list[str] = []
    more = False
    for r in rules:
        if len(hosts) == 3:
            more = True
        if not more and _d(r).get("host"):
            hosts.append(str(r["host"]))
    host_text = ",".join(hosts) or "*"
    if more:
        host_text += f" + {len(rules) - 3} more..."
    lb = _d(st.get("loadBalancer")).get("ingress") or []
    address = ",".join(str(_d(i).get("ip") or _d(i).get("hostname") or "") for i in lb)
    return [
        m.get("name"),
        s.get("ingressClassName") or "<none>",
        host_text,
        address,
        "80, 443" if s.get("tls") else "80",
        _since(m.get("creationTimestamp")),
    ]


def _ingressclass(o: dict[str, Any]) -> list[Any]:
    m, s, _ = _head(o)
    params = "<none>"
    p = s.get("parameters")
    if isinstance(p, dict):
        params = str(p.get("kind") or "")
        if p.get("apiGroup") is not None:
            params += "." + str(p["apiGroup"])
        params += "/" + str(p.get("name") or "")
    return [m.get("name"), s.get("controller") or "", params, _since(m.get("creationTimestamp"))]


_I = "integer"
PRINTERS: dict[str, tuple[list[dict[str, Any]], Callable[[dict[str, Any]], list[Any]]]] = {
    "daemonsets": (
        [_col("Name", fmt="name"), _col("Desired", _I), _col("Current", _I), _col("Ready", _I),
         _col("Up-to-date", _I), _col("Available", _I), _col("Node Selector"), _col("Age"),
         *_WIDE, *_SELECTOR],
        _ds,
    ),
    "deployments": (
        [_col("Name", fmt="name"), _col("Ready"), _col("Up-to-date", _I), _col("Available", _I),
         _col("Age"), *_WIDE, *_SELECTOR],
        _deploy,
    ),
    "replicasets": (
        [_col("Name", fmt="name"), _col("Desired", _I), _col("Current", _I), _col("Ready", _I),
         _col("Age"), *_WIDE, *_SELECTOR],
        _rs,
    ),
    "statefulsets": ([_col("Name", fmt="name"), _col("Ready"), _col("Age"), *_WIDE], _sts),
    "jobs": (
        [_col("Name", fmt="name"), _col("Status"), _col("Completions"), _col("Duration"),
         _col("Age"), *_WIDE, *_SELECTOR],
        _job,
    ),
    "cronjobs": (
        [_col("Name", fmt="name"), _col("Schedule"), _col("Timezone"), _col("Suspend", "boolean"),
         _col("Active", _I), _col("Last Schedule"), _col("Age"), *_WIDE, *_SELECTOR],
        _cronjob,
    ),
    "ingresses": (
        [_col("Name", fmt="name"), _col("Class"), _col("Hosts"), _col("Address"), _col("Ports"),
         _col("Age")],
        _ingress,
    ),
    "ingressclasses": (
        [_col("Name", fmt="name"), _col("Controller"), _col("Parameters"), _col("Age")],
        _ingressclass,
    ),
}  # fmt: skip
