"""``Table`` output for ``kubectl get`` (``Accept: ...;as=Table;...``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from simcluster.resources import ResourceType


def _age(ts: str | None) -> str:
    if not ts:
        return "<unknown>"
    try:
        t = datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return "<unknown>"
    s = int((datetime.now(UTC) - t).total_seconds())
    if s < 120:
        return f"{max(s, 0)}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


def _col(name: str, typ: str = "string", fmt: str = "", priority: int = 0) -> dict[str, Any]:
    return {"name": name, "type": typ, "format": fmt, "description": name, "priority": priority}


def _cells(rt: ResourceType, obj: dict[str, Any]) -> list[Any]:
    meta = obj.get("metadata") or {}
    age = _age(meta.get("creationTimestamp"))
    status = obj.get("status") or {}
    spec = obj.get("spec") or {}
    if rt.name == "nodes":
        ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
        st = "Ready" if ready.get("status") == "True" else "NotReady"
        if spec.get("unschedulable"):
            st += ",SchedulingDisabled"
        labels = meta.get("labels") or {}
        roles = ",".join(
            sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))
        )
        version = (status.get("nodeInfo") or {}).get("kubeletVersion", "")
        return [meta.get("name"), st, roles or "<none>", age, version]
    if rt.name == "pods":
        n = len(spec.get("containers") or [])
        ready = n if status.get("phase") == "Running" else 0
        return [meta.get("name"), f"{ready}/{n}", status.get("phase", ""), 0, age]
    if rt.name == "resourcequotas":
        hard = status.get("hard") or {}
        used = status.get("used") or {}
        req = ", ".join(
            f"{k}: {used.get(k, '0')}/{v}"
            for k, v in sorted(hard.items())
            if not k.startswith("limits.")
        )
        lim = ", ".join(
            f"{k}: {used.get(k, '0')}/{v}"
            for k, v in sorted(hard.items())
            if k.startswith("limits.")
        )
        return [meta.get("name"), age, req, lim]
    if rt.name == "namespaces":
        return [meta.get("name"), status.get("phase", "Active"), age]
    return [meta.get("name"), age]


def _columns(rt: ResourceType) -> list[dict[str, Any]]:
    if rt.name == "nodes":
        return [
            _col("Name", fmt="name"),
            _col("Status"),
            _col("Roles"),
            _col("Age"),
            _col("Version"),
        ]
    if rt.name == "pods":
        return [
            _col("Name", fmt="name"),
            _col("Ready"),
            _col("Status"),
            _col("Restarts", "integer"),
            _col("Age"),
        ]
    if rt.name == "resourcequotas":
        return [_col("Name", fmt="name"), _col("Age"), _col("Request"), _col("Limit")]
    if rt.name == "namespaces":
        return [_col("Name", fmt="name"), _col("Status"), _col("Age")]
    return [_col("Name", fmt="name"), _col("Age")]


def table(rt: ResourceType, items: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    rows = []
    for obj in items:
        m = dict(obj.get("metadata") or {})
        m.pop("managedFields", None)
        rows.append(
            {
                "cells": _cells(rt, obj),
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": m,
                },
            }
        )
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": _columns(rt),
        "rows": rows,
    }
