"""Decoding request bodies into typed objects, strictly, as the API server does.

A built-in type's body is decoded into its Go struct: unknown fields are dropped, a value
of the wrong JSON type is an error, and ``fieldValidation`` (KEP-2885) decides what the
client hears about unknown and duplicate fields (``Strict``: 400, ``Warn`` (the default
when absent): ``Warning`` headers, ``Ignore``: nothing). This module walks a decoded JSON
value against :mod:`simcluster.schema` and reproduces:

- ``sigs.k8s.io/json`` strict decoding (``UnmarshalStrict``: case-sensitive,
  ``unknown field "spec.containers[0].resourcez"``, ``duplicate field "metadata.name"``)
  and ``encoding/json``'s ``UnmarshalTypeError`` text (``json: cannot unmarshal string
  into Go struct field PodSpec.spec.terminationGracePeriodSeconds of type int64``), and
  the custom unmarshalers (``resource.Quantity``, ``intstr.IntOrString``, ``metav1.Time``);
- ``runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation``
  (k8s.io/apimachinery ``pkg/runtime/converter.go``) for strategic merge patch results:
  ``cannot convert string to int64`` and sorted unknown-field errors;
- structured-merge-diff's typed validation (``typed/validate.go``) for apply patches:
  ``.spec.foo: field not declared in schema``.

The handlers that pick a mode and word the Status live in :mod:`simcluster.fieldvalidation`.
"""

from __future__ import annotations

import json
from typing import Any

from simcluster import gofmt
from simcluster.quantity import QuantityError, canonicalize
from simcluster.schema import Definition, Type, definition

_INT_RANGE = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


class GoNumber(float):
    """A JSON number that is not an integer literal, with its source text (``1.0``, ``1e3``)."""

    text: str

    def __new__(cls, text: str) -> GoNumber:
        obj = super().__new__(cls, text)
        obj.text = text
        return obj


class Pairs(dict):
    """A decoded JSON object that repeated a key: ``pairs`` keeps every (key, value)."""

    __slots__ = ("pairs",)


class Fatal(Exception):
    """A decoding error that stops decoding (a custom unmarshaler's returned error)."""


def _hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) == len(pairs):
        return d
    out = Pairs(d)
    out.pairs = pairs
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"invalid constant {name}")


_DECODER = json.JSONDecoder(
    object_pairs_hook=_hook, parse_float=GoNumber, parse_constant=_no_constant
)


def loads(raw: bytes | str) -> Any:
    """Parse JSON keeping duplicate keys (:class:`Pairs`) and number text (:class:`GoNumber`).

    Raises ``ValueError`` with Go's ``encoding/json`` syntax-error text.
    """
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    try:
        return _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise ValueError(go_syntax_error(text, exc)) from None
    except ValueError:
        raise ValueError(go_syntax_error(text, None)) from None


def go_syntax_error(text: str, exc: json.JSONDecodeError | None) -> str:
    """Go's ``encoding/json`` wording for a JSON syntax error."""
    if not text.strip():
        return "unexpected end of JSON input"
    pos = exc.pos if exc is not None else len(text) - len(text.lstrip())
    if pos >= len(text):
        return "unexpected end of JSON input"
    c = text[pos]
    shown = "'\\''" if c == "'" else "'" + gofmt.quote(c)[1:-1].replace('\\"', '"') + "'"
    msg = exc.msg if exc is not None else ""
    if msg.startswith("Expecting property name"):
        return f"invalid character {shown} looking for beginning of object key string"
    if msg.startswith("Expecting ':'"):
        return f"invalid character {shown} after object key"
    if msg.startswith("Expecting ','"):
        depth = []
        in_str = esc = False
        for ch in text[:pos]:
            if in_str:
                esc = (not esc) and ch == "\\"
                in_str = esc or ch != '"'
            elif ch == '"':
                in_str = True
            elif ch in "{[":
                depth.append(ch)
            elif ch in "}]" and depth:
                depth.pop()
        where = "object key:value pair" if depth and depth[-1] == "{" else "array element"
        return f"invalid character {shown} after {where}"
    if msg.startswith("Extra data"):
        return f"invalid character {shown} after top-level value"
    if "control character" in msg or msg.startswith("Unterminated string"):
        return f"invalid character {shown} in string literal"
    return f"invalid character {shown} looking for beginning of value"


def clean(v: Any) -> Any:
    """A plain JSON value: :class:`Pairs` to dicts, :class:`GoNumber` to floats."""
    if isinstance(v, dict):
        return {k: clean(x) for k, x in v.items()}
    if isinstance(v, list):
        return [clean(x) for x in v]
    if isinstance(v, GoNumber):
        return float(v)
    if isinstance(v, int) and not isinstance(v, bool) and not -(2**63) <= v < 2**63:
        return float(v)
    return v


def json_kind(v: Any) -> str:
    """What ``encoding/json`` calls a JSON value in ``cannot unmarshal <kind>``."""
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, str):
        return "string"
    if isinstance(v, dict):
        return "object"
    if isinstance(v, list):
        return "array"
    return "number"


def _number_text(v: Any) -> str:
    return v.text if isinstance(v, GoNumber) else gofmt.value_v(v)


def _item_go(go: str, item: Type) -> str:
    if go.startswith("[]"):
        return go[2:]
    if go.startswith("map["):
        return go[go.index("]") + 1 :]
    return go_name(item)


def go_name(t: Type) -> str:
    """The Go type name of a schema type (``[]v1.Container``, ``map[string]string``)."""
    from simcluster.schema import _GO_SCALAR

    if t.kind == "list":
        return "[]" + go_name(t.item)  # type: ignore[arg-type]
    if t.kind == "map":
        return "map[string]" + go_name(t.item)  # type: ignore[arg-type]
    if t.kind == "ref":
        return "v1." + t.name.rsplit(".", 1)[1]
    return _GO_SCALAR[t.name]


def _zero(t: Type) -> Any:
    if t.kind == "ref":
        return {}
    if t.kind != "scalar":
        return None
    zeros = {"string": "", "boolean": False, "int32": 0, "int64": 0, "number": 0, "quantity": "0"}
    return zeros.get(t.name)


def _merge(t: Type, old: Any, new: Any) -> Any:
    """Decoding a repeated key into the same struct/map merges, as Go's decoder does."""
    if not isinstance(old, dict) or not isinstance(new, dict) or t.kind not in ("ref", "map"):
        return new
    out = dict(old)
    d = definition(t.name) if t.kind == "ref" else None
    for k, v in new.items():
        f = d.fields.get(k) if d else None
        out[k] = _merge(f.type, out[k], v) if f is not None and k in out else v
    return out


class Walker:
    """One decode of a value against a definition; collects strict errors and the first
    type error (``encoding/json`` keeps decoding after one and reports the first).

    ``mode`` is ``"json"`` (request bodies, merge and JSON patch results) or
    ``"unstructured"`` (strategic merge patch results: converter messages, first error
    stops, unknown fields sorted).
    """

    def __init__(self, mode: str = "json", sort_keys: bool = False) -> None:
        self.mode = mode
        self.sort_keys = sort_keys
        self.strict: list[str] = []
        self.error: str | None = None

    def _strict(self, kind: str, path: str) -> None:
        msg = f'{kind} "{path}"'
        if msg not in self.strict and len(self.strict) < 100:
            self.strict.append(msg)

    def _type_error(self, v: Any, go: str, struct: str, fstack: tuple[str, ...]) -> None:
        if self.mode == "unstructured":
            raise Fatal(_convert_error(v, go))
        if self.error is None:
            kind = json_kind(v)
            if kind == "number" and go.lstrip("*") in _INT_RANGE:
                kind = "number " + _number_text(v)
            where = f"Go struct field {struct}.{'.'.join(fstack)}" if struct else "Go value"
            self.error = f"json: cannot unmarshal {kind} into {where} of type {go}"

    def decode(self, d: Definition, obj: dict[str, Any]) -> dict[str, Any]:
        """Decode a top-level object; returns the typed (pruned) copy."""
        out = self._struct(d, obj, "", (), d.short, d.go)
        return out if isinstance(out, dict) else {}

    def _struct(
        self, d: Definition, v: Any, spath: str, fstack: tuple[str, ...], struct: str, go: str
    ) -> Any:
        if v is None:
            return None
        if not isinstance(v, dict):
            if self.mode == "unstructured":
                raise Fatal(f"cannot restore struct from: {_src_kind(v)}")
            self._type_error(v, go, struct, fstack)
            return None
        items = v.pairs if isinstance(v, Pairs) else list(v.items())
        if self.sort_keys:
            items = sorted(items, key=lambda kv: kv[0])
        out: dict[str, Any] = {}
        seen: set[str] = set()
        for k, val in items:
            cpath = f"{spath}.{k}" if spath else k
            f = d.fields.get(k)
            if f is None:
                self._strict("unknown field", cpath)
                continue
            if k in seen:
                self._strict("duplicate field", cpath)
            nv = self.value(f.type, f.go, val, cpath, (*fstack, k), d.short)
            if nv is None or (nv in ({}, []) and f.type.kind != "ref" and not f.required):
                out.pop(k, None)  # nil, or empty map/slice under `omitempty`
            elif k in seen and k in out:
                out[k] = _merge(f.type, out[k], nv)
            else:
                out[k] = nv
            seen.add(k)
        return out

    def value(
        self, t: Type, go: str, v: Any, spath: str, fstack: tuple[str, ...], struct: str
    ) -> Any:
        """Decode ``v`` as type ``t`` (Go type ``go``); None means "leave the field out"."""
        if t.kind == "ref":
            return self._struct(definition(t.name), v, spath, fstack, struct, go)
        if t.kind == "list":
            return self._list(t, go, v, spath, fstack, struct)
        if t.kind == "map":
            return self._map(t, go, v, spath, fstack, struct)
        return self._scalar(t.name, go, v, fstack, struct)

    def _list(
        self, t: Type, go: str, v: Any, spath: str, fstack: tuple[str, ...], struct: str
    ) -> Any:
        if v is None:
            return None
        item = t.item
        assert item is not None
        if not isinstance(v, list):
            if go == "[]uint8" and isinstance(v, str):
                return self._scalar("byte", go, v, fstack, struct)
            if self.mode == "unstructured":
                raise Fatal(f"cannot restore slice from {_src_kind(v)}")
            self._type_error(v, go, struct, fstack)
            return None
        igo = _item_go(go, item)
        out = []
        for i, x in enumerate(v):
            nv = self.value(item, igo, x, f"{spath}[{i}]", fstack, struct)
            out.append(_zero(item) if nv is None else nv)
        return out

    def _map(
        self, t: Type, go: str, v: Any, spath: str, fstack: tuple[str, ...], struct: str
    ) -> Any:
        if v is None:
            return None
        item = t.item
        assert item is not None
        if not isinstance(v, dict):
            if self.mode == "unstructured":
                raise Fatal(f"cannot restore map from {_src_kind(v)}")
            self._type_error(v, go, struct, fstack)
            return None
        igo = _item_go(go, item)
        items = v.pairs if isinstance(v, Pairs) else list(v.items())
        out: dict[str, Any] = {}
        seen: set[str] = set()
        for k, x in items:
            cpath = f"{spath}.{k}" if spath else k
            if k in seen:
                self._strict("duplicate field", cpath)
            seen.add(k)
            nv = self.value(item, igo, x, cpath, fstack, struct)
            out[k] = _zero(item) if nv is None else nv
        return out

    def _scalar(self, name: str, go: str, v: Any, fstack: tuple[str, ...], struct: str) -> Any:
        if v is None:
            return None
        if name in ("object", "rawext", "fieldsv1"):
            return clean(v)
        if name == "quantity":
            return self._quantity(v)
        if name == "intstr":
            return self._intstr(v, fstack, struct)
        if name in ("time", "microtime"):
            return self._time(v, name == "microtime", fstack, struct)
        if name in ("string", "byte") and isinstance(v, str):
            if name == "byte":
                err = base64_error(v)
                if err:
                    self._fail(err if self.mode == "json" else f"error decoding from json: {err}")
            return v
        if name == "boolean" and isinstance(v, bool):
            return v
        if name in _INT_RANGE and isinstance(v, int | float) and not isinstance(v, bool):
            lo, hi = _INT_RANGE[name]
            ok = isinstance(v, int) or (self.mode == "unstructured" and float(v).is_integer())
            if ok and lo <= v <= hi:
                return int(v)
        if name == "number" and isinstance(v, int | float) and not isinstance(v, bool):
            return clean(v)
        self._type_error(v, go, struct, fstack)
        return None

    def _fail(self, message: str) -> None:
        if self.mode == "unstructured":
            raise Fatal(message)
        if self.error is None:
            self.error = message

    def _quantity(self, v: Any) -> Any:
        """``Quantity.UnmarshalJSON`` then ``MarshalJSON``: the canonical string."""
        try:
            return canonicalize(clean(v))
        except QuantityError as exc:
            raise Fatal(str(exc)) from None

    def _intstr(self, v: Any, fstack: tuple[str, ...], struct: str) -> Any:
        if isinstance(v, str):
            return v
        if isinstance(v, int) and not isinstance(v, bool) and -(2**31) <= v < 2**31:
            return v
        kind = json_kind(v)
        if kind == "number":
            kind = "number " + _number_text(v)
        if self.mode == "unstructured":
            raise Fatal(f"json: cannot unmarshal {kind} into Go value of type int32")
        raise Fatal(
            f"json: cannot unmarshal {kind} into Go struct field "
            f"{struct}.{'.'.join(fstack)} of type int32"
        )

    def _time(self, v: Any, micro: bool, fstack: tuple[str, ...], struct: str) -> Any:
        if not isinstance(v, str):
            where = (
                "Go value"
                if self.mode == "unstructured"
                else f"Go struct field {struct}.{'.'.join(fstack)}"
            )
            raise Fatal(f"json: cannot unmarshal {json_kind(v)} into {where} of type string")
        err = gofmt.time_error(v, micro)
        if err:
            raise Fatal(err)
        return v


def _src_kind(v: Any) -> str:
    """reflect.Kind of an unstructured value (``string``, ``int64``, ``map``, ``slice``)."""
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, str):
        return "string"
    if isinstance(v, dict):
        return "map"
    if isinstance(v, list):
        return "slice"
    if isinstance(v, int):
        return "int64"
    return "float64"


def _convert_error(v: Any, go: str) -> str:
    """The unstructured converter's error for a scalar of the wrong kind."""
    src = _src_kind(v)
    if src in ("map", "slice"):
        return f"unrecognized type: {_go_kind(go)}"
    target = _go_kind(go)
    if src == "string" and target != "string":
        return f"unrecognized type: {target}"
    if src == "bool" and target != "bool":
        return f"unrecognized type: {target}"
    return f"cannot convert {src} to {go}"


def _go_kind(go: str) -> str:
    if go in ("int32", "int64", "bool", "float64"):
        return go
    return "string"


def base64_error(s: str) -> str | None:
    """``base64.StdEncoding.Decode``'s error (``illegal base64 data at input byte N``).

    Follows Go's ``decodeQuantum``: newlines are skipped, a short final quantum or bad
    padding is reported at the position Go reports it.
    """
    alphabet = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
    src, si, n = s, 0, len(s)

    def err(at: int) -> str:
        return f"illegal base64 data at input byte {at}"

    while si < n:
        j = 0
        while j < 4:
            if si == n:
                if j == 0:
                    return None
                return err(si - j)
            ch = src[si]
            si += 1
            if ch in "\r\n":
                continue
            if ch == "=":
                if j in (0, 1):
                    return err(si - 1)
                if j == 2:
                    while si < n and src[si] in "\r\n":
                        si += 1
                    if si == n:
                        return err(n)
                    if src[si] != "=":
                        return err(si - 1)
                    si += 1
                while si < n and src[si] in "\r\n":
                    si += 1
                return err(si) if si < n else None
            if ch not in alphabet:
                return err(si - 1)
            j += 1
    return None
