"""Patch formats and server-side apply field ownership.

Supported: JSON merge patch (RFC 7386), a strategic merge patch covering the list merge keys
that matter for nodes/pods (containers, conditions, taints, ...), JSON patch (RFC 6902), and
server-side apply with ``metadata.managedFields``. Ownership is tracked at leaf level (scalars
and whole lists); map keys such as ``spec.hard["requests.nvidia.com/gpu"]`` are separate
fields, so two managers can own different keys of the same map, as on a real server.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

from simcluster.errors import ApiError

Path = tuple[str, ...]

# Strategic merge keys for lists (patchMergeKey in the Kubernetes API types).
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "env": "name",
    "ports": "containerPort",
    "conditions": "type",
    "taints": "key",
    "addresses": "type",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "ownerReferences": "uid",
}

# Fields never tracked by managedFields.
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


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


def strategic_merge_patch(target: Any, patch: Any, field: str = "") -> Any:
    """Strategic merge patch: merge patch plus keyed list merging and ``$patch`` directives."""
    if isinstance(patch, list):
        key = MERGE_KEYS.get(field)
        if key and isinstance(target, list) and all(isinstance(x, dict) for x in patch):
            return _merge_keyed_list(target, patch, key, field)
        return copy.deepcopy([x for x in patch if not _is_directive(x)])
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return copy.deepcopy({k: v for k, v in patch.items() if not k.startswith("$")})
    result = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if k.startswith("$"):
            continue
        if v is None:
            result.pop(k, None)
            continue
        merged = strategic_merge_patch(result.get(k), v, k)
        if merged is None and isinstance(v, dict) and v.get("$patch") == "delete":
            result.pop(k, None)
        else:
            result[k] = merged
    return result


def _is_directive(x: Any) -> bool:
    return isinstance(x, dict) and "$patch" in x


def _merge_keyed_list(target: list[Any], patch: list[Any], key: str, field: str) -> list[Any]:
    if any(isinstance(x, dict) and x.get("$patch") == "replace" for x in patch):
        return copy.deepcopy([x for x in patch if not _is_directive(x)])
    result = [copy.deepcopy(x) for x in target]
    for item in patch:
        k = item.get(key)
        idx = next(
            (i for i, x in enumerate(result) if isinstance(x, dict) and x.get(key) == k), None
        )
        if item.get("$patch") == "delete":
            if idx is not None:
                result.pop(idx)
            continue
        if idx is None:
            result.append(strategic_merge_patch({}, item, field))
        else:
            result[idx] = strategic_merge_patch(result[idx], item, field)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, f"invalid JSON pointer: {path!r}", "Invalid")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _resolve(doc: Any, parts: list[str]) -> Any:
    for p in parts:
        if isinstance(doc, list):
            doc = doc[int(p)]
        elif isinstance(doc, dict):
            doc = doc[p]
        else:
            raise KeyError(p)
    return doc


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, move, copy, test)."""
    if not isinstance(ops, list):
        raise ApiError(400, "json patch must be a list of operations", "BadRequest")
    doc = copy.deepcopy(target)
    for op in ops:
        try:
            doc = _apply_op(doc, op)
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise ApiError(
                422, f"the server rejected our request due to an error in our request: {exc}"
            ) from exc
    return doc


def _apply_op(doc: Any, op: dict[str, Any]) -> Any:
    kind = op.get("op")
    parts = _pointer(op.get("path", ""))
    if kind == "test":
        if _resolve(doc, parts) != op.get("value"):
            raise ValueError(f"testing value {op.get('path')} failed")
        return doc
    if kind in ("move", "copy"):
        src = _pointer(op.get("from", ""))
        value = copy.deepcopy(_resolve(doc, src))
        if kind == "move":
            doc = _remove(doc, src)
        return _add(doc, parts, value)
    if kind == "remove":
        return _remove(doc, parts)
    if kind == "add":
        return _add(doc, parts, copy.deepcopy(op["value"]))
    if kind == "replace":
        _resolve(doc, parts)  # must exist
        doc = _remove(doc, parts)
        return _add(doc, parts, copy.deepcopy(op["value"]))
    raise ValueError(f"unknown json patch operation {kind!r}")


def _add(doc: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent = _resolve(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, list):
        if last == "-":
            parent.append(value)
        else:
            idx = int(last)
            if idx > len(parent):
                raise IndexError(f"index {idx} out of range")
            parent.insert(idx, value)
    elif isinstance(parent, dict):
        parent[last] = value
    else:
        raise KeyError(last)
    return doc


def _remove(doc: Any, parts: list[str]) -> Any:
    if not parts:
        return None
    parent = _resolve(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, list):
        parent.pop(int(last))
    else:
        del parent[last]
    return doc


# ---------------------------------------------------------------- managed fields


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


def load_body(raw: bytes) -> Any:
    """Decode a JSON body; 400 with the API server's wording when it does not parse."""
    try:
        return json.loads(raw) if raw else {}
    except ValueError as exc:
        raise ApiError(400, f"error decoding request body: {exc}", "BadRequest") from exc
