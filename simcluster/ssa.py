"""Server-side apply and ``metadata.managedFields``, as the v1.32 field manager keeps them.

Follows ``staging/src/k8s.io/apimachinery/pkg/util/managedfields/internal/``:
``structuredmerge.go`` (Apply/Update through sigs.k8s.io/structured-merge-diff
``merge/update.go``: merge, prune, conflicts; emulated in :mod:`simcluster.smd`),
``managedfieldsupdater.go`` (an Update manager's set is merged with its previous one and
timestamped when it changed anything; an applier's time moves when the object changed),
``stripmeta.go`` (apiVersion, kind, metadata.name/namespace/uid/... are never owned),
``capmanagers.go`` (beyond 10 Update managers the oldest merge into ``ancient-changes``),
``managedfields.go`` (entry identity = manager, operation, apiVersion for updates,
subresource; entries sorted by operation, time, manager, apiVersion, subresource) and
``conflict.go`` (the 409 message and causes; managers printed ``"name"``, ``with
subresource "status"``, ``using v1`` for Update managers -- the identity holds no time).

What an applier owns is exactly the field set of its configuration: sending an empty or
smaller map keeps the keys other managers own, and drops (prunes) only the keys this
applier applied before, no longer sends, and nobody else owns. Writes to the main resource
of a type with a status subresource ignore ``status`` (its reset fields); writes to
``/status`` own only ``status`` and are recorded with ``subresource: status``.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from simcluster.errors import ApiError
from simcluster.fielderrors import go_quote
from simcluster.resources import RESOURCES
from simcluster.smd import (
    Path,
    TypeRef,
    compare,
    ensure_named,
    fields_v1,
    filter_paths,
    merge,
    parse_fields_v1,
    path_order,
    path_string,
    remove_items,
    root_type,
    to_field_set,
)

MAX_UPDATE_MANAGERS = 10
ANCIENT = "ancient-changes"
_STRIP: frozenset[Path] = frozenset(
    [("apiVersion",), ("kind",), ("metadata",)]
    + [
        ("metadata", f)
        for f in (
            "name",
            "namespace",
            "creationTimestamp",
            "selfLink",
            "uid",
            "clusterName",
            "generation",
            "managedFields",
            "resourceVersion",
        )
    ]
)
# set by the server (graceful deletion), never through the field manager
_SERVER_SET = frozenset(
    [("metadata", "deletionTimestamp"), ("metadata", "deletionGracePeriodSeconds")]
)
_HAS_STATUS = {(r.api_version, r.kind): r.has_status for r in RESOURCES}
_API_VERSION = {r.name: r.api_version for r in RESOURCES}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Entry:
    """One ``ManagedFieldsEntry`` in decoded form."""

    manager: str
    operation: str
    api_version: str
    subresource: str
    time: str | None
    paths: set[Path]

    @property
    def ident(self) -> tuple[str, str, str, str]:
        """``BuildManagerIdentifier``: appliers are one manager whatever their apiVersion."""
        version = "" if self.operation == "Apply" else self.api_version
        return (self.manager, self.operation, version, self.subresource)

    def encode(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
        }
        if self.time:
            out["time"] = self.time
        out["fieldsType"] = "FieldsV1"
        out["fieldsV1"] = fields_v1(self.paths)
        if self.subresource:
            out["subresource"] = self.subresource
        return out

    def printed(self) -> str:
        """``printManager``: how a conflict message names this manager."""
        s = go_quote(self.manager)
        if self.subresource:
            s += f" with subresource {go_quote(self.subresource)}"
        if self.operation == "Update":
            s += f" using {self.api_version}"
        return s


Managers = dict[tuple[str, str, str, str], Entry]


def decode_managers(obj: dict[str, Any] | None) -> Managers:
    """The managers recorded in ``obj.metadata.managedFields``."""
    out: Managers = {}
    for m in ((obj or {}).get("metadata") or {}).get("managedFields") or []:
        if not isinstance(m, dict) or m.get("operation") not in ("Apply", "Update"):
            continue
        e = Entry(
            str(m.get("manager", "")),
            m["operation"],
            str(m.get("apiVersion", "")),
            str(m.get("subresource", "")),
            m.get("time"),
            parse_fields_v1(m.get("fieldsV1") or {}),
        )
        out[e.ident] = e
    return out


def encode_managers(managers: Managers) -> list[dict[str, Any]]:
    """``encodeManagedFields``: non-empty entries in ``sortEncodedManagedFields`` order."""
    entries = [e for e in managers.values() if e.paths]
    entries.sort(key=lambda e: (e.operation, e.time or "", e.manager, e.api_version, e.subresource))
    return [e.encode() for e in entries]


def _store(obj: dict[str, Any], managers: Managers) -> None:
    meta = obj.setdefault("metadata", {})
    encoded = encode_managers(managers)
    if encoded:
        meta["managedFields"] = encoded
    else:
        meta.pop("managedFields", None)


def _scoped(paths: set[Path], api_version: str, kind: str, subresource: str) -> set[Path]:
    """Reset fields (the strategy's) and stripped metadata are nobody's."""
    paths = {p for p in paths if p not in _STRIP and p[:2] not in _SERVER_SET}
    if subresource == "status":
        return filter_paths(paths, keep="status")
    if _HAS_STATUS.get((api_version, kind)):
        return filter_paths(paths, drop="status")
    return paths


def _view(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without its managed fields (never compared)."""
    out = dict(obj)
    meta = dict(out.get("metadata") or {})
    meta.pop("managedFields", None)
    out["metadata"] = meta
    return out


def _empty_like(obj: dict[str, Any]) -> dict[str, Any]:
    """The zero value of the object's type, as the field manager compares a create against."""
    out: dict[str, Any] = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind")}
    out["metadata"] = {}
    for k in ("spec", "status"):
        if isinstance(obj.get(k), dict):
            out[k] = {}
    return out


# --------------------------------------------------------------------- update
def record_update(
    old: dict[str, Any] | None, new: dict[str, Any], manager: str, subresource: str = ""
) -> None:
    """Update ``new.metadata.managedFields`` for a create, update or non-apply patch.

    The writer owns what it added or changed (merged with what it owned before); every
    other manager loses those fields and every manager loses the fields removed.
    """
    api_version, kind = str(new.get("apiVersion", "")), str(new.get("kind", ""))
    t = root_type(api_version, kind)
    managers = decode_managers(old)
    base = _view(old) if old is not None else _empty_like(new)
    c = compare(base, _view(new), t)
    changed = _scoped(c.added | c.modified, api_version, kind, subresource)
    removed = _scoped(c.removed, api_version, kind, subresource)
    if changed or removed:
        for e in managers.values():
            e.paths -= changed
            e.paths -= removed
    if changed:
        ident = (manager, "Update", api_version, subresource)
        prev = managers.get(ident)
        paths = changed | (prev.paths if prev else set())
        managers[ident] = Entry(manager, "Update", api_version, subresource, _now(), paths)
    _cap_updaters(managers)
    _store(new, managers)


def _cap_updaters(managers: Managers) -> None:
    """``capUpdateManagers``: merge the oldest Update entries into ``ancient-changes``."""
    updaters = [k for k, e in managers.items() if e.operation == "Update" and e.paths]
    if len(updaters) <= MAX_UPDATE_MANAGERS:
        return
    updaters.sort(key=lambda k: (managers[k].time or "", json.dumps(k)))
    first: dict[str, tuple[str, str, str, str]] = {}
    length = len(updaters)
    for k in updaters:
        if length <= MAX_UPDATE_MANAGERS:
            break
        e = managers[k]
        bucket = (ANCIENT, "Update", e.api_version, "")
        if e.api_version in first:
            if bucket not in managers:
                b = managers.pop(first[e.api_version])
                managers[bucket] = Entry(ANCIENT, "Update", e.api_version, "", b.time, b.paths)
            managers[bucket].paths = managers[bucket].paths | e.paths
            managers[bucket].time = e.time
            del managers[k]
            length -= 1
        else:
            first[e.api_version] = k


# ---------------------------------------------------------------------- apply
def server_side_apply(
    live: dict[str, Any] | None,
    applied: dict[str, Any],
    manager: str,
    force: bool,
    resource: str,
    name: str,
    subresource: str = "",
) -> dict[str, Any]:
    """Merge an applied configuration into the live object and return the new object.

    Raises the real 409 when another manager owns a field the configuration changes
    (unless ``force``: the fields then move to this applier).
    """
    meta = applied.get("metadata") or {}
    if "managedFields" in meta:
        raise ApiError(400, "metadata.managedFields must be nil", "BadRequest")
    expected = (live or {}).get("apiVersion") or _API_VERSION.get(resource, "")
    version = str(applied.get("apiVersion", ""))
    if expected and version != expected:
        raise ApiError(
            400,
            f"Incorrect version specified in apply patch. Specified patch version: {version}, "
            f"expected: {expected}",
            "BadRequest",
        )
    kind = str(applied.get("kind", ""))
    t = root_type(version, kind)
    managers = decode_managers(live)
    base = _view(live) if live is not None else _empty_like(applied)
    config = copy.deepcopy(applied)
    merged = merge(base, config, t)
    ident = (manager, "Apply", "", subresource)
    prev = managers.get(ident)
    last = prev.paths if prev else set()
    mine = _scoped(to_field_set(config, t), version, kind, subresource)
    managers[ident] = Entry(
        manager, "Apply", version, subresource, prev.time if prev else None, mine
    )
    if last:
        _prune(merged, last, managers, t)
    c = compare(base, merged, t)
    changed = _scoped(c.added | c.modified, version, kind, subresource)
    removed = _scoped(c.removed, version, kind, subresource)
    conflicts = {
        k: e.paths & changed for k, e in managers.items() if k != ident and e.paths & changed
    }
    if conflicts and not force:
        raise conflict_error([(managers[k], paths) for k, paths in conflicts.items()])
    for k, e in managers.items():
        if k != ident:
            e.paths = e.paths - changed - removed
    if changed or removed:
        managers[ident].time = _now()
    merged.setdefault("metadata", {}).setdefault("name", name)
    _store(merged, managers)
    return merged


def _prune(merged: dict[str, Any], last: set[Path], managers: Managers, t: TypeRef) -> None:
    """``Updater.prune``: remove what this applier applied before, dropped now, and nobody
    else (appliers or updaters) owns -- named struct fields count as owned when anything
    below them is (EnsureNamedFieldsAreMembers)."""
    owned: set[Path] = set()
    for e in managers.values():
        owned |= e.paths
    owned = ensure_named(owned, t)
    remove_items(merged, ensure_named(last, t) - owned, t)


def conflict_error(conflicts: list[tuple[Entry, set[Path]]]) -> ApiError:
    """``NewConflictError``: 409 Conflict with one cause per conflicting field."""
    flat = [(e, p) for e, paths in conflicts for p in sorted(paths, key=path_order)]
    flat.sort(key=lambda ep: (ep[0].printed(), path_order(ep[1])))
    causes = [
        {
            "reason": "FieldManagerConflict",
            "message": f"conflict with {e.printed()}",
            "field": path_string(p),
        }
        for e, p in flat
    ]
    if len(flat) == 1:
        e, p = flat[0]
        msg = f"Apply failed with 1 conflict: conflict with {e.printed()}: {path_string(p)}"
    else:
        lines: list[str] = []
        seen: list[str] = []
        for e, _ in flat:
            if e.printed() not in seen:
                seen.append(e.printed())
        for who in sorted(seen):
            lines.append(f"conflicts with {who}:")
            lines.extend(f"- {path_string(p)}" for e, p in flat if e.printed() == who)
        msg = f"Apply failed with {len(flat)} conflicts: " + "\n".join(lines)
    return ApiError(409, msg, "Conflict", {"causes": causes})


def force_forbidden() -> ApiError:
    """``ValidatePatchOptions``: ``force`` on a patch that is not an apply patch."""
    from simcluster.fielderrors import forbidden, invalid_error

    err = forbidden("force", "may not be specified for non-apply patch")
    return invalid_error("PatchOptions", "meta.k8s.io", "", [err])
