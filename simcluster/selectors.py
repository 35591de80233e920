"""Label and field selectors, parsed once per request and matched per object.

Supported label syntax: ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x,y)``,
``a``, ``!a``, ``a>1``, ``a<1``, comma-joined. Field selectors: ``f=v``, ``f==v``, ``f!=v``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from simcluster.errors import ApiError

LabelMatcher = Callable[[Mapping[str, str]], bool]
FieldMatcher = Callable[[Mapping[str, str]], bool]

_SET_RE = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_OP_RE = re.compile(r"^\s*(!?)\s*([A-Za-z0-9_./-]+)\s*(?:(==|!=|=|>|<)\s*([A-Za-z0-9_./-]*))?\s*$")


def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in parts if p.strip()]


def parse_label_selector(text: str | None) -> LabelMatcher | None:
    """Compile a label selector; ``None`` when empty. Raises 400 on bad syntax."""
    if not text or not text.strip():
        return None
    reqs: list[LabelMatcher] = []
    for part in _split_top(text):
        m = _SET_RE.match(part)
        if m:
            key, op = m.group(1), m.group(2)
            values = frozenset(v.strip() for v in m.group(3).split(",") if v.strip())
            if op == "in":
                reqs.append(lambda lb, k=key, vs=values: lb.get(k) in vs)
            else:
                reqs.append(lambda lb, k=key, vs=values: lb.get(k) not in vs)
            continue
        m = _OP_RE.match(part)
        if not m:
            raise ApiError(400, f"unable to parse requirement: {part!r}", "BadRequest")
        neg, key, op, val = m.group(1), m.group(2), m.group(3), m.group(4) or ""
        if op is None:
            if neg:
                reqs.append(lambda lb, k=key: k not in lb)
            else:
                reqs.append(lambda lb, k=key: k in lb)
        elif neg:
            raise ApiError(400, f"unable to parse requirement: {part!r}", "BadRequest")
        elif op in ("=", "=="):
            reqs.append(lambda lb, k=key, v=val: lb.get(k) == v)
        elif op == "!=":
            reqs.append(lambda lb, k=key, v=val: lb.get(k) != v)
        else:
            reqs.append(_numeric(key, op, val, part))
    return lambda lb: all(r(lb) for r in reqs)


def _numeric(key: str, op: str, val: str, part: str) -> LabelMatcher:
    try:
        bound = int(val)
    except ValueError as exc:
        raise ApiError(400, f"unable to parse requirement: {part!r}", "BadRequest") from exc

    def match(lb: Mapping[str, str]) -> bool:
        try:
            n = int(lb[key])
        except (KeyError, ValueError):
            return False
        return n > bound if op == ">" else n < bound

    return match


def parse_field_selector(text: str | None, allowed: frozenset[str]) -> FieldMatcher | None:
    """Compile a field selector restricted to the fields the resource supports."""
    if not text or not text.strip():
        return None
    reqs: list[FieldMatcher] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        for op in ("!=", "==", "="):
            if op in part:
                field, val = part.split(op, 1)
                break
        else:
            raise ApiError(400, f"invalid selector: '{text}'; can't understand '{part}'")
        field = field.strip()
        if field not in allowed:
            raise ApiError(400, f"field label not supported: {field}", "BadRequest")
        val = val.strip()
        if op == "!=":
            reqs.append(lambda f, k=field, v=val: f.get(k, "") != v)
        else:
            reqs.append(lambda f, k=field, v=val: f.get(k, "") == v)
    if not reqs:
        return None
    return lambda f: all(r(f) for r in reqs)
