"""Field errors and the 422 ``Invalid`` Status, as apimachinery builds them.

Follows ``staging/src/k8s.io/apimachinery/pkg/util/validation/field/errors.go`` (v0.36):
an error is (type, field path, bad value, detail); ``ErrorBody()`` renders the value by its
Go type: ``%v`` for int64, int32, float and bool, ``%q`` for a string, and anything else as
``json.Marshal`` writes it (a Quantity ``"500m"``, an IntOrString ``1`` or ``"50%"``, an
internal struct ``{"Key":"k","Value":"",...}`` with its Go field names, a nil ``null``), or,
when it cannot be marshalled, ``String()`` and then ``%#v``.
``apimachinery/pkg/api/errors/errors.go`` ``NewInvalid`` turns a list into one 422 with
``details.causes`` and the message ``<Kind>[.<group>] "<name>" is invalid: <aggregate>``
where the aggregate (``util/errors`` ``aggregate.Error``) is the one message, or
``[m1, m2]`` for several distinct ones.

The validators pass Python values; where the real code passes a Go struct, slice or map,
they wrap it in :class:`GoValue`, which knows its JSON (:meth:`GoValue.json`) and its
``%#v`` (:meth:`GoValue.sharp`, still used where Go formats values itself).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from simcluster.errors import ApiError

REQUIRED = "FieldValueRequired"
INVALID = "FieldValueInvalid"
DUPLICATE = "FieldValueDuplicate"
NOT_SUPPORTED = "FieldValueNotSupported"
FORBIDDEN = "FieldValueForbidden"
TOO_LONG = "FieldValueTooLong"
TOO_MANY = "FieldValueTooMany"
NOT_FOUND = "FieldValueNotFound"
INTERNAL = "InternalError"

_TYPE_TEXT = {
    NOT_FOUND: "Not found",
    REQUIRED: "Required value",
    DUPLICATE: "Duplicate value",
    INVALID: "Invalid value",
    NOT_SUPPORTED: "Unsupported value",
    FORBIDDEN: "Forbidden",
    TOO_LONG: "Too long",
    TOO_MANY: "Too many",
    INTERNAL: "Internal error",
}
# Types whose body never shows the value (ErrorBody's first cases).
_NO_VALUE = frozenset({REQUIRED, FORBIDDEN, TOO_LONG, INTERNAL})


class _Omit:
    """``field.omitValue``: the value is left out of the message."""


OMIT = _Omit()


def go_quote(s: str) -> str:
    """``strconv.Quote``: Go's double-quoted string literal (``%q``)."""
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\a":
            out.append("\\a")
        elif ch == "\b":
            out.append("\\b")
        elif ch == "\f":
            out.append("\\f")
        elif ch == "\v":
            out.append("\\v")
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\x{o:02x}")
        elif o >= 0x80 and not ch.isprintable():
            out.append(f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


class GoValue:
    """A value whose Go type matters for rendering (JSON, ``%#v``, or ``String()``)."""

    stringer = False

    def sharp(self) -> str:
        """What ``fmt.Sprintf("%#v", v)`` prints."""
        raise NotImplementedError

    def string(self) -> str:
        """``String()`` for values that implement ``fmt.Stringer``."""
        return self.sharp()

    def json(self) -> str:
        """What ``json.Marshal(v)`` writes; NotImplementedError where it would fail."""
        raise NotImplementedError


def go_json(value: Any) -> str:
    """``json.Marshal`` of a value (maps with sorted keys, HTML characters escaped)."""
    if isinstance(value, GoValue):
        return value.json()
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_json_float(value)
    if isinstance(value, str):
        return _json_string(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(go_json(v) for v in value) + "]"
    if isinstance(value, dict):
        items = sorted((str(k), v) for k, v in value.items())
        return "{" + ",".join(f"{_json_string(k)}:{go_json(v)}" for k, v in items) + "}"
    return _json_string(str(value))


def _json_string(s: str) -> str:
    """encoding/json ``appendString`` with HTML escaping (``<``, ``>``, ``&``, U+2028/9)."""
    import json

    out = json.dumps(s, ensure_ascii=False)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                    ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):  # fmt: skip
        out = out.replace(ch, esc)
    return out


def _go_json_float(f: float) -> str:
    """encoding/json ``floatEncoder``: 'f' format, 'e' below 1e-6 or from 1e21."""
    from decimal import Decimal

    a = abs(f)
    if a != 0 and (a < 1e-6 or a >= 1e21):
        mant, _, exp = (repr(f) if "e" in repr(f) else f"{f:e}").partition("e")
        sign, digits = (exp[0], exp[1:]) if exp[0] in "+-" else ("+", exp)
        digits = digits.lstrip("0") or "0"
        return f"{mant}e{'-' if sign == '-' else '+'}{digits}"
    if f == int(f):
        return str(int(f))
    return format(Decimal(repr(f)), "f")


def sharp(value: Any) -> str:
    """``%#v`` of an element inside a struct, slice or map."""
    if isinstance(value, GoValue):
        return value.sharp()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, str):
        return go_quote(value)
    if value is None:
        return "<nil>"
    return go_quote(str(value))


@dataclass(frozen=True)
class GoStruct(GoValue):
    """A Go struct value: ``pkg.Type{Field:value, ...}``."""

    type_name: str
    fields: tuple[tuple[str, Any], ...]

    def sharp(self) -> str:
        inner = ", ".join(f"{k}:{sharp(v)}" for k, v in self.fields)
        return f"{self.type_name}{{{inner}}}"

    def json(self) -> str:
        if self.type_name == "intstr.IntOrString":  # MarshalJSON: the int or the string
            values = dict(self.fields)
            return go_json(values["StrVal"] if values.get("Type") == 1 else values["IntVal"])
        tags = JSON_TAGS.get(self.type_name)
        parts = []
        for name, value in self.fields:
            if tags is None:  # an internal type: no json tags, every field by its Go name
                parts.append(f"{_json_string(name)}:{go_json(value)}")
                continue
            key, omitempty = tags[name]
            if omitempty and _json_empty(value):
                continue
            parts.append(f"{_json_string(key)}:{go_json(value)}")
        return "{" + ",".join(parts) + "}"


@dataclass(frozen=True)
class GoPtr(GoValue):
    """A pointer field inside a struct: ``(*T)(nil)`` or ``(*T)(0xc...)``; ``value`` is
    what it points to (for JSON)."""

    type_name: str
    is_nil: bool
    value: Any = None

    def sharp(self) -> str:
        if self.is_nil:
            return f"(*{self.type_name})(nil)"
        # Go prints the address; any heap address looks like this one.
        return f"(*{self.type_name})(0xc000a1c2d0)"

    def json(self) -> str:
        if self.is_nil:
            return "null"
        if self.value is None:  # the pointee is not known here: Go's %#v instead
            raise NotImplementedError
        return go_json(self.value)


@dataclass(frozen=True)
class GoSlice(GoValue):
    """A Go slice: ``[]T{...}``, ``[]T(nil)`` when nil; elements print without type."""

    type_name: str
    items: tuple[Any, ...] | None

    def sharp(self) -> str:
        if self.items is None:
            return f"{self.type_name}(nil)"
        return f"{self.type_name}{{{', '.join(_elem(v) for v in self.items)}}}"

    def json(self) -> str:
        return "null" if self.items is None else go_json(list(self.items))


@dataclass(frozen=True)
class GoMap(GoValue):
    """A Go map: ``map[K]V{"k":v, ...}`` with sorted keys, as ``fmt`` prints maps."""

    type_name: str
    items: tuple[tuple[str, Any], ...] | None

    def sharp(self) -> str:
        if self.items is None:
            return f"{self.type_name}(nil)"
        inner = ", ".join(f"{go_quote(k)}:{_elem(v)}" for k, v in sorted(self.items))
        return f"{self.type_name}{{{inner}}}"

    def json(self) -> str:
        return "null" if self.items is None else go_json(dict(self.items))


# The external (tagged) structs that appear in bad values: Go field -> (json name, omitempty)
# (staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/types.go).
JSON_TAGS: dict[str, dict[str, tuple[str, bool]]] = {
    "v1.LabelSelector": {
        "MatchLabels": ("matchLabels", True),
        "MatchExpressions": ("matchExpressions", True),
    },
    "v1.LabelSelectorRequirement": {
        "Key": ("key", False),
        "Operator": ("operator", False),
        "Values": ("values", True),
    },
    "v1.OwnerReference": {
        "APIVersion": ("apiVersion", False),
        "Kind": ("kind", False),
        "Name": ("name", False),
        "UID": ("uid", False),
        "Controller": ("controller", True),
        "BlockOwnerDeletion": ("blockOwnerDeletion", True),
    },
}


def _json_empty(value: Any) -> bool:
    """encoding/json's ``isEmptyValue`` for omitempty."""
    if isinstance(value, GoPtr):
        return value.is_nil
    if isinstance(value, GoSlice | GoMap):
        return not value.items
    return value in (None, "", 0, False) or value == [] or value == {}


def _elem(v: Any) -> str:
    # Go's %#v prints the element type of struct elements too: []T{T{...}}.
    return sharp(v)


def _go_float(f: float) -> str:
    """``%v`` of a float64 (shortest form; Python's repr agrees except for ``.0``)."""
    if f == int(f) and abs(f) < 1e21:
        return str(int(f))
    return repr(f)


def go_strings(values: Sequence[str] | None, type_name: str = "[]string") -> GoSlice:
    """A ``[]string`` (or named string slice) value."""
    return GoSlice(type_name, None if values is None else tuple(str(v) for v in values))


@dataclass
class FieldError:
    """``field.Error``: what is wrong, where, with which value."""

    type: str
    field: str
    bad_value: Any = ""
    detail: str = ""

    def body(self) -> str:
        """``ErrorBody()``: the message without the field path."""
        text = _TYPE_TEXT[self.type]
        if self.type in _NO_VALUE or self.bad_value is OMIT:
            s = text
        else:
            v = self.bad_value
            if isinstance(v, bool):
                s = f"{text}: {'true' if v else 'false'}"
            elif isinstance(v, int):
                s = f"{text}: {v}"
            elif isinstance(v, float):
                s = f"{text}: {_go_float(v)}"
            elif isinstance(v, str):
                s = f"{text}: {go_quote(v)}"
            else:  # json.Marshal, else String(), else %#v
                try:
                    s = f"{text}: {go_json(v)}"
                except NotImplementedError:
                    s = f"{text}: {v.string() if v.stringer else v.sharp()}"
        if self.detail:
            s += f": {self.detail}"
        return s

    def error(self) -> str:
        """``Error()``: ``<field>: <body>``."""
        return f"{self.field}: {self.body()}"


def required(path: str, detail: str = "") -> FieldError:
    return FieldError(REQUIRED, path, "", detail)


def invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(INVALID, path, value, detail)


def duplicate(path: str, value: Any) -> FieldError:
    return FieldError(DUPLICATE, path, value, "")


def not_found(path: str, value: Any) -> FieldError:
    return FieldError(NOT_FOUND, path, value, "")


def forbidden(path: str, detail: str) -> FieldError:
    return FieldError(FORBIDDEN, path, "", detail)


def not_supported(path: str, value: Any, valid: Iterable[str]) -> FieldError:
    """``field.NotSupported``: ``supported values: "a", "b"`` in the order given."""
    vals = list(valid)
    detail = "supported values: " + ", ".join(go_quote(v) for v in vals) if vals else ""
    return FieldError(NOT_SUPPORTED, path, value, detail)


def too_long(path: str, max_length: int) -> FieldError:
    """``field.TooLong`` as of v1.32: ``may not be more than N bytes``; no value shown."""
    detail = f"may not be more than {max_length} bytes" if max_length >= 0 else "value is too long"
    return FieldError(TOO_LONG, path, "<value omitted>", detail)


def too_many(path: str, actual: int, maximum: int) -> FieldError:
    detail = f"must have at most {maximum} items" if maximum >= 0 else "has too many items"
    return FieldError(TOO_MANY, path, actual if actual >= 0 else OMIT, detail)


def aggregate_message(errs: Sequence[FieldError]) -> str:
    """``errs.ToAggregate().Error()``: distinct messages; one, or ``[a, b]``."""
    seen: list[str] = []
    for e in errs:
        msg = e.error()
        if msg not in seen:
            seen.append(msg)
    if len(seen) == 1:
        return seen[0]
    return "[" + ", ".join(seen) + "]"


def invalid_error(kind: str, group: str, name: str, errs: Sequence[FieldError]) -> ApiError:
    """``errors.NewInvalid(GroupKind, name, errs)``: the 422 the API server answers."""
    qualified = f"{kind}.{group}" if group else kind
    causes = []
    for e in errs:
        cause: dict[str, str] = {"reason": e.type}
        body = e.body()
        if body:
            cause["message"] = body
        if e.field:
            cause["field"] = e.field
        causes.append(cause)
    if errs:
        message = f"{qualified} {go_quote(name)} is invalid: {aggregate_message(errs)}"
    else:
        message = f"{qualified} {go_quote(name)} is invalid"
    details: dict[str, Any] = {}  # StatusDetails: name, group and kind are omitempty
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    if kind:
        details["kind"] = kind
    details["causes"] = causes
    return ApiError(422, message, "Invalid", details)


# ----------------------------------------------------------------- field paths
def child(path: str, *names: str) -> str:
    """``Path.Child``: ``a.b``; the root has no dot."""
    for n in names:
        path = f"{path}.{n}" if path else n
    return path


def index(path: str, i: int) -> str:
    """``Path.Index``: ``a[0]``."""
    return f"{path}[{i}]"


def key(path: str, k: str) -> str:
    """``Path.Key``: ``a[k]`` (no quoting, as the real path printer)."""
    return f"{path}[{k}]"
