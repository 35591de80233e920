"""``Table`` output for ``kubectl get`` (``Accept: ...;as=Table;...``).

Column sets, order and cell values follow kubernetes ``pkg/printers/internalversion/
printers.go`` (1.32): the API server always prints the wide form
(``GenerateOptions{Wide: true}``) and marks wide-only columns ``priority: 1``; kubectl
shows those with ``-o wide`` only. Ages are ``duration.HumanDuration``
(k8s.io/apimachinery ``pkg/util/duration``). Types without a printer get the default
``Name`` / ``Created At`` table (k8s.io/apiserver ``pkg/registry/rest/table.go``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from simcluster.gofmt import human_duration
from simcluster.kueue_tables import PRINTERS as KUEUE_PRINTERS
from simcluster.resources import ResourceType
from simcluster.tables_apps import PRINTERS as WORKLOAD_PRINTERS


def _parse_ts(ts: str | None) -> datetime | None:
    if not ts:
        return None
    for fmt in ("%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S.%fZ"):
        try:
            return datetime.strptime(ts, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


def _age(ts: str | None) -> str:
    """``translateTimestampSince``: ``<unknown>`` for a zero time."""
    t = _parse_ts(ts)
    if t is None:
        return "<unknown>"
    return human_duration((datetime.now(UTC) - t).total_seconds())


def _created_at(meta: dict[str, Any]) -> str:
    t = _parse_ts(meta.get("creationTimestamp"))
    return t.strftime("%Y-%m-%dT%H:%M:%SZ") if t else "0001-01-01T00:00:00Z"


def _col(name: str, typ: str = "string", fmt: str = "", priority: int = 0) -> dict[str, Any]:
    return {"name": name, "type": typ, "format": fmt, "description": name, "priority": priority}


def _name() -> dict[str, Any]:
    return _col("Name", fmt="name")


def _format_labels(labels: dict[str, str] | None) -> str:
    """``labels.FormatLabels``: sorted ``k=v`` pairs, ``<none>`` when empty."""
    if not labels:
        return "<none>"
    return ",".join(f"{k}={labels[k]}" for k in sorted(labels))


# ------------------------------------------------------------------ pods
def _finished_at(c: dict[str, Any]) -> str:
    """``lastState.terminated.finishedAt`` of a container status ('' when none)."""
    term = (c.get("lastState") or {}).get("terminated") or {}
    return str(term.get("finishedAt") or "")


def _pod_cells(obj: dict[str, Any]) -> tuple[list[Any], list[dict[str, str]]]:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    containers = spec.get("containers") or []
    total = len(containers)
    init_specs = {c.get("name"): c for c in spec.get("initContainers") or []}
    total += sum(1 for c in init_specs.values() if c.get("restartPolicy") == "Always")
    ready = 0
    restarts = 0
    phase = status.get("phase") or ""
    reason = status.get("reason") or phase
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"
    initializing = False
    sidecar_restarts = 0
    last_restart = sidecar_last_restart = ""  # RFC 3339 UTC strings order as times do
    init_statuses = status.get("initContainerStatuses") or []
    for i, c in enumerate(init_statuses):
        restarts += int(c.get("restartCount") or 0)
        last_restart = max(last_restart, _finished_at(c))
        sidecar = (init_specs.get(c.get("name")) or {}).get("restartPolicy") == "Always"
        if sidecar:
            sidecar_restarts += int(c.get("restartCount") or 0)
            sidecar_last_restart = max(sidecar_last_restart, _finished_at(c))
        state = c.get("state") or {}
        term, wait = state.get("terminated"), state.get("waiting")
        if term is not None and term.get("exitCode", 0) == 0:
            continue
        if sidecar and c.get("started"):
            ready += 1 if c.get("ready") else 0
            continue
        if term is not None:
            if not term.get("reason"):
                sig = term.get("signal") or 0
                reason = f"Init:Signal:{sig}" if sig else f"Init:ExitCode:{term.get('exitCode', 0)}"
            else:
                reason = "Init:" + term["reason"]
        elif wait is not None and wait.get("reason") and wait.get("reason") != "PodInitializing":
            reason = "Init:" + wait["reason"]
        else:
            reason = f"Init:{i}/{len(init_specs)}"
        initializing = True
        break
    initialized = any(
        c.get("type") == "Initialized" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    if not initializing or initialized:
        restarts = sidecar_restarts
        last_restart = sidecar_last_restart
        has_running = False
        for c in reversed(status.get("containerStatuses") or []):
            restarts += int(c.get("restartCount") or 0)
            last_restart = max(last_restart, _finished_at(c))
            state = c.get("state") or {}
            term, wait = state.get("terminated"), state.get("waiting")
            if wait is not None and wait.get("reason"):
                reason = wait["reason"]
            elif term is not None and term.get("reason"):
                reason = term["reason"]
            elif term is not None:
                sig = term.get("signal") or 0
                reason = f"Signal:{sig}" if sig else f"ExitCode:{term.get('exitCode', 0)}"
            elif c.get("ready") and state.get("running") is not None:
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            pod_ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or []
            )
            reason = "Running" if pod_ready else "NotReady"
    if meta.get("deletionTimestamp") and status.get("reason") == "NodeLost":
        reason = "Unknown"
    elif meta.get("deletionTimestamp") and phase not in ("Succeeded", "Failed"):
        reason = "Terminating"
    ips = status.get("podIPs") or []
    pod_ip = (ips[0].get("ip") if ips else "") or "<none>"
    gates = spec.get("readinessGates") or []
    gates_cell = "<none>"
    if gates:
        conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        true = sum(1 for g in gates if conds.get(g.get("conditionType")) == "True")
        gates_cell = f"{true}/{len(gates)}"
    restarts_cell = str(restarts)
    if restarts and _parse_ts(last_restart) is not None:
        restarts_cell = f"{restarts} ({_age(last_restart)} ago)"
    cells = [
        meta.get("name"),
        f"{ready}/{total}",
        reason,
        restarts_cell,
        _age(meta.get("creationTimestamp")),
        pod_ip,
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        gates_cell,
    ]
    row_conditions = []
    if phase == "Succeeded":
        row_conditions = [
            {
                "type": "Completed",
                "status": "True",
                "reason": "Succeeded",
                "message": "The pod has completed successfully.",
            }
        ]
    elif phase == "Failed":
        row_conditions = [
            {
                "type": "Completed",
                "status": "True",
                "reason": "Failed",
                "message": "The pod failed.",
            }
        ]
    return cells, row_conditions


# ----------------------------------------------------------------- nodes
def _node_cells(obj: dict[str, Any]) -> list[Any]:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    states = []
    for c in status.get("conditions") or []:
        if c.get("type") == "Ready":
            states = ["Ready" if c.get("status") == "True" else "NotReady"]
    if not states:
        states = ["Unknown"]
    if spec.get("unschedulable"):
        states.append("SchedulingDisabled")
    labels = meta.get("labels") or {}
    roles = set()
    for k, v in labels.items():
        if k.startswith("node-role.kubernetes.io/") and k[len("node-role.kubernetes.io/") :]:
            roles.add(k[len("node-role.kubernetes.io/") :])
        elif k == "kubernetes.io/role" and v:
            roles.add(v)
    info = status.get("nodeInfo") or {}
    addresses = status.get("addresses") or []

    def addr(kind: str) -> str:
        return next((a.get("address") for a in addresses if a.get("type") == kind), "<none>")

    return [
        meta.get("name"),
        ",".join(states),
        ",".join(sorted(roles)) or "<none>",
        _age(meta.get("creationTimestamp")),
        info.get("kubeletVersion", ""),
        addr("InternalIP"),
        addr("ExternalIP"),
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


# ----------------------------------------------------------------- others
def _quota_cells(obj: dict[str, Any]) -> list[Any]:
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    hard, used = status.get("hard") or {}, status.get("used") or {}
    req, lim = [], []
    for k in sorted(hard):
        pieces = k.split(".")
        target = lim if len(pieces) > 1 and pieces[0] == "limits" else req
        target.append(f"{k}: {used.get(k, '0')}/{hard[k]}")
    return [meta.get("name"), _age(meta.get("creationTimestamp")), ", ".join(req), ", ".join(lim)]


def _service_cells(obj: dict[str, Any]) -> list[Any]:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    typ = spec.get("type") or ""
    ips = spec.get("clusterIPs") or []
    external = spec.get("externalIPs") or []
    if typ in ("ClusterIP", "NodePort"):
        ext = ",".join(external) or "<none>"
    elif typ == "LoadBalancer":
        ingress = (status.get("loadBalancer") or {}).get("ingress") or []
        lb = sorted(
            {i.get("ip") or i.get("hostname") for i in ingress if i.get("ip") or i.get("hostname")}
        )
        lb_s = ",".join(lb)
        ext = ",".join([*lb, *external]) if external else lb_s or "<pending>"
    elif typ == "ExternalName":
        ext = spec.get("externalName", "")
    else:
        ext = "<unknown>"
    ports = []
    for p in spec.get("ports") or []:
        proto = p.get("protocol") or ""
        if p.get("nodePort"):
            ports.append(f"{p.get('port')}:{p['nodePort']}/{proto}")
        else:
            ports.append(f"{p.get('port')}/{proto}")
    return [
        meta.get("name"),
        typ,
        ips[0] if ips else "<none>",
        ext,
        ",".join(ports) or "<none>",
        _age(meta.get("creationTimestamp")),
        _format_labels(spec.get("selector")),
    ]


def _event_cells(obj: dict[str, Any]) -> list[Any]:
    inv = obj.get("involvedObject") or {}
    first = (
        _age(obj.get("firstTimestamp")) if obj.get("firstTimestamp") else _age(obj.get("eventTime"))
    )
    last = _age(obj.get("lastTimestamp")) if obj.get("lastTimestamp") else first
    count = obj.get("count") or 0
    series = obj.get("series")
    if series:
        last = _age(series.get("lastObservedTime"))
        count = series.get("count") or 0
    elif count == 0:
        count = 1
    kind = (inv.get("kind") or "").lower()
    target = f"{kind}/{inv['name']}" if inv.get("name") else kind
    src = obj.get("source") or {}
    component = src.get("component") or obj.get("reportingComponent") or ""
    instance = src.get("host") or obj.get("reportingInstance") or ""
    source = f"{component}, {instance}" if instance else component
    return [
        last,
        obj.get("type", ""),
        obj.get("reason", ""),
        target,
        inv.get("fieldPath", ""),
        source,
        (obj.get("message") or "").strip(),
        first,
        int(count),
        (obj.get("metadata") or {}).get("name"),
    ]


def _binding_cells(obj: dict[str, Any]) -> list[Any]:
    meta, ref = obj.get("metadata") or {}, obj.get("roleRef") or {}
    users, groups, sas = [], [], []
    for s in obj.get("subjects") or []:
        if s.get("kind") == "User":
            users.append(s.get("name", ""))
        elif s.get("kind") == "Group":
            groups.append(s.get("name", ""))
        elif s.get("kind") == "ServiceAccount":
            sas.append(f"{s.get('namespace', '')}/{s.get('name', '')}")
    return [
        meta.get("name"),
        f"{ref.get('kind', '')}/{ref.get('name', '')}",
        _age(meta.get("creationTimestamp")),
        ", ".join(users),
        ", ".join(groups),
        ", ".join(sas),
    ]


def _int_or_str(v: Any) -> str:
    return "N/A" if v is None else str(v)


_Printer = tuple[list[dict[str, Any]], Callable[[dict[str, Any]], list[Any]]]


def _meta_cells(*getters: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], list[Any]]:
    def cells(obj: dict[str, Any]) -> list[Any]:
        meta = obj.get("metadata") or {}
        return [meta.get("name"), *(g(obj) for g in getters), _age(meta.get("creationTimestamp"))]

    return cells


_PRINTERS: dict[str, _Printer] = {
    "nodes": (
        [
            _name(),
            _col("Status"),
            _col("Roles"),
            _col("Age"),
            _col("Version"),
            _col("Internal-IP", priority=1),
            _col("External-IP", priority=1),
            _col("OS-Image", priority=1),
            _col("Kernel-Version", priority=1),
            _col("Container-Runtime", priority=1),
        ],
        _node_cells,
    ),
    "resourcequotas": (
        [_name(), _col("Age"), _col("Request"), _col("Limit")],
        _quota_cells,
    ),
    "namespaces": (
        [_name(), _col("Status"), _col("Age")],
        _meta_cells(lambda o: (o.get("status") or {}).get("phase", "")),
    ),
    "configmaps": (
        [_name(), _col("Data"), _col("Age")],
        _meta_cells(lambda o: len(o.get("data") or {}) + len(o.get("binaryData") or {})),
    ),
    "secrets": (
        [_name(), _col("Type"), _col("Data"), _col("Age")],
        _meta_cells(lambda o: o.get("type", ""), lambda o: len(o.get("data") or {})),
    ),
    "serviceaccounts": (
        [_name(), _col("Secrets"), _col("Age")],
        _meta_cells(lambda o: len(o.get("secrets") or [])),
    ),
    "services": (
        [
            _name(),
            _col("Type"),
            _col("Cluster-IP"),
            _col("External-IP"),
            _col("Port(s)"),
            _col("Age"),
            _col("Selector", priority=1),
        ],
        _service_cells,
    ),
    "events": (
        [
            _col("Last Seen"),
            _col("Type"),
            _col("Reason"),
            _col("Object"),
            _col("Subobject", priority=1),
            _col("Source", priority=1),
            _col("Message"),
            _col("First Seen", priority=1),
            _col("Count", priority=1),
            _col("Name", fmt="name", priority=1),
        ],
        _event_cells,
    ),
    "poddisruptionbudgets": (
        [
            _name(),
            _col("Min Available"),
            _col("Max Unavailable"),
            _col("Allowed Disruptions", "integer"),
            _col("Age"),
        ],
        _meta_cells(
            lambda o: _int_or_str((o.get("spec") or {}).get("minAvailable")),
            lambda o: _int_or_str((o.get("spec") or {}).get("maxUnavailable")),
            lambda o: int((o.get("status") or {}).get("disruptionsAllowed") or 0),
        ),
    ),
    "priorityclasses": (
        [
            _name(),
            _col("Value", "integer"),
            _col("Global-Default", "boolean"),
            _col("Age"),
            _col("PreemptionPolicy"),
        ],
        lambda o: [
            (o.get("metadata") or {}).get("name"),
            int(o.get("value") or 0),
            bool(o.get("globalDefault")),
            _age((o.get("metadata") or {}).get("creationTimestamp")),
            o.get("preemptionPolicy") or "",
        ],
    ),
    "leases": (
        [_name(), _col("Holder"), _col("Age")],
        _meta_cells(lambda o: (o.get("spec") or {}).get("holderIdentity") or ""),
    ),
    "rolebindings": (
        [
            _name(),
            _col("Role"),
            _col("Age"),
            _col("Users", priority=1),
            _col("Groups", priority=1),
            _col("ServiceAccounts", priority=1),
        ],
        _binding_cells,
    ),
}
_PRINTERS["clusterrolebindings"] = _PRINTERS["rolebindings"]
_PRINTERS.update(WORKLOAD_PRINTERS)  # apps, batch, networking (tables_apps.py)
_PRINTERS.update(KUEUE_PRINTERS)  # Kueue CRDs (kueue_tables.py)
# the CRD's additionalPrinterColumns (gpu-operator nvidia.com_clusterpolicies.yaml): Age is
# declared `type: string` there, so kubectl shows the timestamp itself
_PRINTERS["clusterpolicies"] = (
    [_name(), _col("Status"), _col("Age")],
    lambda o: [
        (o.get("metadata") or {}).get("name"),
        (o.get("status") or {}).get("state"),
        (o.get("metadata") or {}).get("creationTimestamp"),
    ],
)
_POD_COLUMNS = [
    _name(),
    _col("Ready"),
    _col("Status"),
    _col("Restarts"),
    _col("Age"),
    _col("IP", priority=1),
    _col("Node", priority=1),
    _col("Nominated Node", priority=1),
    _col("Readiness Gates", priority=1),
]
_DEFAULT_COLUMNS = [_name(), _col("Created At", "date")]


def _columns(rt: ResourceType) -> list[dict[str, Any]]:
    if rt.name == "pods":
        return _POD_COLUMNS
    printer = _PRINTERS.get(rt.name)
    return printer[0] if printer else _DEFAULT_COLUMNS


def table(rt: ResourceType, items: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    """The ``meta.k8s.io/v1`` Table of ``items`` (rows carry PartialObjectMetadata)."""
    rows = []
    printer = _PRINTERS.get(rt.name)
    for obj in items:
        m = dict(obj.get("metadata") or {})
        m.pop("managedFields", None)
        row: dict[str, Any] = {}
        if rt.name == "pods":
            cells, conditions = _pod_cells(obj)
            row["cells"] = cells
            if conditions:
                row["conditions"] = conditions
        elif printer is not None:
            row["cells"] = printer[1](obj)
        else:
            row["cells"] = [m.get("name"), _created_at(m)]
        row["object"] = {
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": m,
        }
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": _columns(rt),
        "rows": rows,
    }
