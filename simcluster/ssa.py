"""Server-side apply and ``metadata.managedFields`` (field ownership per manager).

Ownership is tracked at leaf level (scalars and whole lists); map keys such as
``spec.hard["requests.nvidia.com/gpu"]`` are separate fields, so two managers can own
different keys of the same map, as on a real server.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from simcluster.errors import ApiError

Path = tuple[str, ...]

_UNTRACKED_META = {
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "generation",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
}


def leaves(obj: dict[str, Any], track_status: bool = False) -> dict[Path, Any]:
    """Flatten an object into tracked leaf paths -> values (what a manager can own)."""
    out: dict[Path, Any] = {}
    for k, v in obj.items():
        if k in ("apiVersion", "kind"):
            continue
        if k == "status" and not track_status:
            continue
        if k == "metadata" and isinstance(v, dict):
            for mk, mv in v.items():
                if mk in _UNTRACKED_META:
                    continue
                _flatten(("metadata", mk), mv, out)
            continue
        _flatten((k,), v, out)
    return out


def _flatten(prefix: Path, v: Any, out: dict[Path, Any]) -> None:
    if isinstance(v, dict) and v:
        for k, sub in v.items():
            _flatten((*prefix, k), sub, out)
    else:
        out[prefix] = v


def fields_v1(paths: list[Path] | set[Path]) -> dict[str, Any]:
    """Render paths in the ``FieldsV1`` shape (``{"f:spec":{"f:hard":{"f:cpu":{}}}}``)."""
    root: dict[str, Any] = {}
    for p in sorted(paths):
        node = root
        for part in p:
            node = node.setdefault(f"f:{part}", {})
    return root


def parse_fields_v1(fv: dict[str, Any], prefix: Path = ()) -> set[Path]:
    """Inverse of :func:`fields_v1` for the shapes this server writes (and ``.`` markers)."""
    out: set[Path] = set()
    for k, v in (fv or {}).items():
        if not k.startswith("f:"):
            continue
        p = (*prefix, k[2:])
        children = {ck: cv for ck, cv in (v or {}).items() if ck.startswith("f:")}
        if children:
            out |= parse_fields_v1(children, p)
        else:
            out.add(p)
    return out


def _path_str(p: Path) -> str:
    return "".join(f".{x}" for x in p)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _get_managers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list((obj.get("metadata") or {}).get("managedFields") or [])


def _owned(entry: dict[str, Any]) -> set[Path]:
    return parse_fields_v1(entry.get("fieldsV1") or {})


def _set_entry(
    managers: list[dict[str, Any]],
    manager: str,
    operation: str,
    api_version: str,
    paths: set[Path],
    subresource: str = "",
) -> list[dict[str, Any]]:
    out = [
        m
        for m in managers
        if not (
            m.get("manager") == manager
            and m.get("operation") == operation
            and m.get("subresource", "") == subresource
        )
    ]
    if paths:
        entry: dict[str, Any] = {
            "manager": manager,
            "operation": operation,
            "apiVersion": api_version,
            "time": _now(),
            "fieldsType": "FieldsV1",
            "fieldsV1": fields_v1(paths),
        }
        if subresource:
            entry["subresource"] = subresource
        out.append(entry)
    return out


def _strip(managers: list[dict[str, Any]], paths: set[Path]) -> list[dict[str, Any]]:
    out = []
    for m in managers:
        owned = _owned(m)
        if owned & paths:
            rest = owned - paths
            if not rest:
                continue
            m = dict(m)
            m["fieldsV1"] = fields_v1(rest)
        out.append(m)
    return out


def record_update(
    old: dict[str, Any] | None, new: dict[str, Any], manager: str, subresource: str = ""
) -> None:
    """Update ``new.metadata.managedFields`` for a non-apply write (create/update/patch).

    The writer takes ownership of every field it changed; fields it removed are dropped
    from every manager. This is how a hand edit ``steals`` a field from an applier.
    """
    track_status = subresource == "status"
    new_leaves = leaves(new, track_status)
    old_leaves = leaves(old, track_status) if old else {}
    changed = {p for p, v in new_leaves.items() if p not in old_leaves or old_leaves[p] != v}
    removed = set(old_leaves) - set(new_leaves)
    managers = _get_managers(old) if old else []
    managers = _strip(managers, changed | removed)
    if changed:
        mine = next(
            (
                m
                for m in managers
                if m.get("manager") == manager
                and m.get("operation") == "Update"
                and m.get("subresource", "") == subresource
            ),
            None,
        )
        paths = (_owned(mine) if mine else set()) | changed
        managers = _set_entry(
            managers, manager, "Update", new.get("apiVersion", "v1"), paths, subresource
        )
    new.setdefault("metadata", {})["managedFields"] = managers
    if not managers:
        new["metadata"].pop("managedFields", None)


def server_side_apply(
    live: dict[str, Any] | None,
    applied: dict[str, Any],
    manager: str,
    force: bool,
    resource: str,
    name: str,
) -> dict[str, Any]:
    """Merge an applied configuration into the live object and return the new object.

    Conflicts (a field owned by another manager with a different value) raise 409 unless
    ``force``; forced fields move to ``manager``. Fields this manager applied before but
    omits now are removed unless another manager also owns them.
    """
    applied_leaves = leaves(applied)
    base = copy.deepcopy(live) if live else {}
    managers = _get_managers(base)
    live_leaves = leaves(base) if live else {}
    conflicts: dict[str, list[Path]] = {}
    for m in managers:
        if m.get("manager") == manager or m.get("subresource"):
            continue
        for p in _owned(m) & set(applied_leaves):
            if p in live_leaves and live_leaves[p] != applied_leaves[p]:
                conflicts.setdefault(m.get("manager", ""), []).append(p)
    if conflicts and not force:
        raise _conflict_error(conflicts, resource, name)
    prev = next(
        (m for m in managers if m.get("manager") == manager and m.get("operation") == "Apply"),
        None,
    )
    prev_owned = _owned(prev) if prev else set()
    if force and conflicts:
        taken = {p for ps in conflicts.values() for p in ps}
        mine = [m for m in managers if m.get("manager") == manager]
        managers = _strip([m for m in managers if m.get("manager") != manager], taken) + mine
    others: set[Path] = set()
    for m in managers:
        if not (m.get("manager") == manager and m.get("operation") == "Apply"):
            others |= _owned(m)
    result = base
    for p in prev_owned - set(applied_leaves) - others:
        _delete_path(result, p)
    for p, v in applied_leaves.items():
        _set_path(result, p, copy.deepcopy(v))
    for k in ("apiVersion", "kind"):
        if k in applied:
            result[k] = applied[k]
    meta = result.setdefault("metadata", {})
    meta.setdefault("name", name)
    managers = _set_entry(
        managers, manager, "Apply", applied.get("apiVersion", "v1"), set(applied_leaves)
    )
    meta["managedFields"] = managers
    return result


def _conflict_error(conflicts: dict[str, list[Path]], resource: str, name: str) -> ApiError:
    total = sum(len(v) for v in conflicts.values())
    lines = []
    causes = []
    for mgr, paths in sorted(conflicts.items()):
        for p in sorted(paths):
            causes.append(
                {
                    "reason": "FieldManagerConflict",
                    "message": f'conflict with "{mgr}"',
                    "field": _path_str(p),
                }
            )
        if len(paths) == 1:
            lines.append(f'conflict with "{mgr}": {_path_str(paths[0])}')
        else:
            lines.append(
                f'conflicts with "{mgr}":\n' + "\n".join(f"- {_path_str(p)}" for p in paths)
            )
    plural = "conflict" if total == 1 else "conflicts"
    msg = f"Apply failed with {total} {plural}: " + "\n".join(lines)
    return ApiError(409, msg, "Conflict", {"name": name, "kind": resource, "causes": causes})


def _set_path(obj: dict[str, Any], p: Path, value: Any) -> None:
    node = obj
    for part in p[:-1]:
        nxt = node.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            node[part] = nxt
        node = nxt
    node[p[-1]] = value


def _delete_path(obj: dict[str, Any], p: Path) -> None:
    node: Any = obj
    for part in p[:-1]:
        if not isinstance(node, dict) or part not in node:
            return
        node = node[part]
    if isinstance(node, dict):
        node.pop(p[-1], None)
