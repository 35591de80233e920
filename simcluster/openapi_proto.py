"""``/openapi/v2`` as protobuf: the swagger JSON turned into gnostic's ``openapi.v2.Document``.

kubectl asks for ``/openapi/v2`` with ``Accept: application/com.github.proto-openapi.spec.v2
@v1.0+protobuf`` only (client-go ``discovery/discovery_client.go``, ``OpenAPISchema``) when
it validates a ``kind: List`` client-side (k8s.io/kubectl ``pkg/validation/schema.go``), and
``kubectl explain --output=plaintext-openapiv2``; a 406 fails ``kubectl apply -f`` of a List.
The real server answers the protobuf that k8s.io/kube-openapi ``pkg/handler/handler.go``
(``ToProtoBinary``) makes of its own JSON: github.com/google/gnostic-models v0.7.0
``openapiv2/document.go`` (``ParseDocument``: the JSON read as YAML by go.yaml.in/yaml/v3)
and ``openapiv2/OpenAPIv2.go`` (``NewDocument`` and the other ``New*`` constructors), then
``proto.Marshal`` (google.golang.org/protobuf: fields in number order, proto3 zero values
left out, a set message field written even when empty).

:func:`encode` does the same for any swagger 2.0 JSON document: the message layouts are the
field numbers of ``openapiv2/OpenAPIv2.proto``; the oneofs are chosen as the constructors
try them (``ParametersItem``: a parameter, else a ``$ref``; ``Parameter``: ``in: body`` or
one of the non-body sub-schemas by ``in``; ``ResponseValue``: a response, else a ``$ref``;
``SchemaItem``: a file schema only for ``type: file``); values of type ``Any`` (vendor
extensions ``x-*``, ``default``, ``enum``, ``example``) carry the YAML that gnostic's
``compiler.Marshal`` writes (yaml.v3: indent 4, no line width, go.yaml.in/yaml/v3
``emitterc.go`` and ``encode.go``; :func:`yaml_text`). Checked byte for byte against a real
kube-apiserver's answer by ``tests/differential/test_openapi.py``.
"""

from __future__ import annotations

import json
import math
import re
import struct
from typing import Any

MEDIA_TYPE = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"

# ------------------------------------------------------------------ protobuf wire format


def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _tag(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _bytes_field(number: int, data: bytes) -> bytes:
    return _tag(number, 2) + _varint(len(data)) + data


# ------------------------------------------------------------------ message layouts

# A field: (JSON key, field number, kind). Kinds: "str", "bool", "double", "int64",
# "strs" (a YAML sequence of strings), "any", "anys", "ext" (the object's ``x-*`` keys as
# NamedAny), a message name, "[]" + a message name (a sequence), "{}" + a value kind (a
# wrapper message: ``repeated Named<value> additional_properties = 1``).
_EXT = "ext"
_PRIMITIVE_COMMON = (
    ("type", "str"), ("format", "str"), ("items", "PrimitivesItems"),
    ("collectionFormat", "str"), ("default", "any"), ("maximum", "double"),
    ("exclusiveMaximum", "bool"), ("minimum", "double"), ("exclusiveMinimum", "bool"),
    ("maxLength", "int64"), ("minLength", "int64"), ("pattern", "str"),
    ("maxItems", "int64"), ("minItems", "int64"), ("uniqueItems", "bool"),
    ("enum", "anys"), ("multipleOf", "double"),
)  # fmt: skip


def _numbered(*fields: tuple[str, str]) -> tuple[tuple[str, int, str], ...]:
    return tuple((key, i, kind) for i, (key, kind) in enumerate(fields, 1))


_QUERY_LIKE = _numbered(
    ("required", "bool"), ("in", "str"), ("description", "str"), ("name", "str"),
    ("allowEmptyValue", "bool"), *_PRIMITIVE_COMMON, ("", _EXT),
)  # fmt: skip
_PATH_LIKE = _numbered(
    ("required", "bool"), ("in", "str"), ("description", "str"), ("name", "str"),
    *_PRIMITIVE_COMMON, ("", _EXT),
)  # fmt: skip
_OAUTH2_FLOW = ("type", "str"), ("flow", "str"), ("scopes", "{}str")

MESSAGES: dict[str, tuple[tuple[str, int, str], ...]] = {
    "Document": _numbered(
        ("swagger", "str"), ("info", "Info"), ("host", "str"), ("basePath", "str"),
        ("schemes", "strs"), ("consumes", "strs"), ("produces", "strs"), ("paths", "Paths"),
        ("definitions", "{}Schema"), ("parameters", "{}Parameter"),
        ("responses", "{}Response"), ("security", "[]SecurityRequirement"),
        ("securityDefinitions", "{}SecurityDefinitionsItem"), ("tags", "[]Tag"),
        ("externalDocs", "ExternalDocs"), ("", _EXT),
    ),
    "Info": _numbered(
        ("title", "str"), ("version", "str"), ("description", "str"),
        ("termsOfService", "str"), ("contact", "Contact"), ("license", "License"), ("", _EXT),
    ),
    "Contact": _numbered(("name", "str"), ("url", "str"), ("email", "str"), ("", _EXT)),
    "License": _numbered(("name", "str"), ("url", "str"), ("", _EXT)),
    "ExternalDocs": _numbered(("description", "str"), ("url", "str"), ("", _EXT)),
    "Tag": _numbered(
        ("name", "str"), ("description", "str"), ("externalDocs", "ExternalDocs"), ("", _EXT)
    ),
    "Xml": _numbered(
        ("name", "str"), ("namespace", "str"), ("prefix", "str"), ("attribute", "bool"),
        ("wrapped", "bool"), ("", _EXT),
    ),
    "PathItem": _numbered(
        ("$ref", "str"), ("get", "Operation"), ("put", "Operation"), ("post", "Operation"),
        ("delete", "Operation"), ("options", "Operation"), ("head", "Operation"),
        ("patch", "Operation"), ("parameters", "[]ParametersItem"), ("", _EXT),
    ),
    "Operation": _numbered(
        ("tags", "strs"), ("summary", "str"), ("description", "str"),
        ("externalDocs", "ExternalDocs"), ("operationId", "str"), ("produces", "strs"),
        ("consumes", "strs"), ("parameters", "[]ParametersItem"), ("responses", "Responses"),
        ("schemes", "strs"), ("deprecated", "bool"), ("security", "[]SecurityRequirement"),
        ("", _EXT),
    ),
    "Schema": _numbered(
        ("$ref", "str"), ("format", "str"), ("title", "str"), ("description", "str"),
        ("default", "any"), ("multipleOf", "double"), ("maximum", "double"),
        ("exclusiveMaximum", "bool"), ("minimum", "double"), ("exclusiveMinimum", "bool"),
        ("maxLength", "int64"), ("minLength", "int64"), ("pattern", "str"),
        ("maxItems", "int64"), ("minItems", "int64"), ("uniqueItems", "bool"),
        ("maxProperties", "int64"), ("minProperties", "int64"), ("required", "strs"),
        ("enum", "anys"), ("additionalProperties", "AdditionalPropertiesItem"),
        ("type", "TypeItem"), ("items", "ItemsItem"), ("allOf", "[]Schema"),
        ("properties", "{}Schema"), ("discriminator", "str"), ("readOnly", "bool"),
        ("xml", "Xml"), ("externalDocs", "ExternalDocs"), ("example", "any"), ("", _EXT),
    ),
    "FileSchema": _numbered(
        ("format", "str"), ("title", "str"), ("description", "str"), ("default", "any"),
        ("required", "strs"), ("type", "str"), ("readOnly", "bool"),
        ("externalDocs", "ExternalDocs"), ("example", "any"), ("", _EXT),
    ),
    "BodyParameter": _numbered(
        ("description", "str"), ("name", "str"), ("in", "str"), ("required", "bool"),
        ("schema", "Schema"), ("", _EXT),
    ),
    "QueryParameterSubSchema": _QUERY_LIKE,
    "FormDataParameterSubSchema": _QUERY_LIKE,
    "PathParameterSubSchema": _PATH_LIKE,
    "HeaderParameterSubSchema": _PATH_LIKE,
    "PrimitivesItems": _numbered(*_PRIMITIVE_COMMON, ("", _EXT)),
    "Header": _numbered(*_PRIMITIVE_COMMON, ("description", "str"), ("", _EXT)),
    "Response": _numbered(
        ("description", "str"), ("schema", "SchemaItem"), ("headers", "{}Header"),
        ("examples", "{}any"), ("", _EXT),
    ),
    "JsonReference": _numbered(("$ref", "str"), ("description", "str")),
    "ApiKeySecurity": _numbered(
        ("type", "str"), ("name", "str"), ("in", "str"), ("description", "str"), ("", _EXT)
    ),
    "BasicAuthenticationSecurity": _numbered(("type", "str"), ("description", "str"), ("", _EXT)),
    "Oauth2ImplicitSecurity": _numbered(
        *_OAUTH2_FLOW, ("authorizationUrl", "str"), ("description", "str"), ("", _EXT)
    ),
    "Oauth2PasswordSecurity": _numbered(
        *_OAUTH2_FLOW, ("tokenUrl", "str"), ("description", "str"), ("", _EXT)
    ),
    "Oauth2ApplicationSecurity": _numbered(
        *_OAUTH2_FLOW, ("tokenUrl", "str"), ("description", "str"), ("", _EXT)
    ),
    "Oauth2AccessCodeSecurity": _numbered(
        *_OAUTH2_FLOW, ("authorizationUrl", "str"), ("tokenUrl", "str"), ("description", "str"),
        ("", _EXT),
    ),
}  # fmt: skip

_SUBSCHEMAS = {"header": 1, "formData": 2, "query": 3, "path": 4}
_SUBSCHEMA_NAMES = {
    1: "HeaderParameterSubSchema",
    2: "FormDataParameterSubSchema",
    3: "QueryParameterSubSchema",
    4: "PathParameterSubSchema",
}
_SECURITY = {
    "basic": (1, "BasicAuthenticationSecurity"),
    "apiKey": (2, "ApiKeySecurity"),
}
_OAUTH2 = {
    "implicit": (3, "Oauth2ImplicitSecurity"),
    "password": (4, "Oauth2PasswordSecurity"),
    "application": (5, "Oauth2ApplicationSecurity"),
    "accessCode": (6, "Oauth2AccessCodeSecurity"),
}
_RESPONSE_CODE = re.compile(r"^([0-9]{3})$|^(default)$")


def encode(document: dict[str, Any]) -> bytes:
    """The ``openapi.v2.Document`` message of a swagger 2.0 document (parsed JSON)."""
    return _message("Document", document)


def _message(name: str, obj: Any) -> bytes:
    special = _SPECIAL.get(name)
    if special is not None:
        return special(obj)
    if not isinstance(obj, dict):
        return b""
    out = bytearray()
    for key, number, kind in MESSAGES[name]:
        if kind == _EXT:
            for k, v in obj.items():
                if k.startswith("x-"):
                    out += _named_any(number, k, v)
            continue
        if key not in obj:
            continue
        out += _field(number, kind, obj[key])
    return bytes(out)


def _field(number: int, kind: str, value: Any) -> bytes:
    if kind == "str":
        text = _scalar_text(value)
        return _bytes_field(number, text.encode()) if text else b""
    if kind == "bool":
        return _tag(number, 0) + b"\x01" if value is True else b""
    if kind == "int64":
        n = int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0
        return _tag(number, 0) + _varint(n) if n else b""
    if kind == "double":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return b""
        f = float(value)
        if f == 0 and not math.copysign(1, f) < 0:
            return b""
        return _tag(number, 1) + struct.pack("<d", f)
    if kind == "strs":
        items = value if isinstance(value, list) else []
        return b"".join(_bytes_field(number, _scalar_text(v).encode()) for v in items)
    if kind == "any":
        return _bytes_field(number, _any(value))
    if kind == "anys":
        items = value if isinstance(value, list) else []
        return b"".join(_bytes_field(number, _any(v)) for v in items)
    if kind.startswith("[]"):
        items = value if isinstance(value, list) else []
        return b"".join(_bytes_field(number, _message(kind[2:], v)) for v in items)
    if kind.startswith("{}"):
        return _bytes_field(number, _named_map(kind[2:], value))
    return _bytes_field(number, _message(kind, value))


def _named_map(value_kind: str, obj: Any) -> bytes:
    """A wrapper whose field 1 is ``repeated Named<value> {name = 1; value = 2}``."""
    out = bytearray()
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _bytes_field(1, _named(k, value_kind, v))
    return bytes(out)


def _named(name: str, value_kind: str, value: Any) -> bytes:
    head = _bytes_field(1, name.encode()) if name else b""
    return head + _field(2, value_kind, value)


def _named_any(number: int, name: str, value: Any) -> bytes:
    return _bytes_field(number, _named(name, "any", value))


def _any(value: Any) -> bytes:
    """``openapi.v2.Any``: only ``yaml`` (= 2) is set by the parser."""
    return _bytes_field(2, yaml_text(value).encode())


def _scalar_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, (dict, list)):
        return ""
    return _json_scalar(value)


# ------------------------------------------------------------------ oneofs and odd shapes


def _paths(obj: Any) -> bytes:
    out = bytearray()
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k.startswith("x-"):
                out += _named_any(1, k, v)
        for k, v in obj.items():
            if k.startswith("/"):
                out += _bytes_field(2, _named(k, "PathItem", v))
    return bytes(out)


def _responses(obj: Any) -> bytes:
    out = bytearray()
    if isinstance(obj, dict):
        for k, v in obj.items():
            if _RESPONSE_CODE.match(k):
                out += _bytes_field(1, _named(k, "ResponseValue", v))
        for k, v in obj.items():
            if k.startswith("x-"):
                out += _named_any(2, k, v)
    return bytes(out)


def _is_reference(obj: Any) -> bool:
    return isinstance(obj, dict) and "$ref" in obj


def _parameters_item(obj: Any) -> bytes:
    if isinstance(obj, dict) and "in" in obj:
        return _bytes_field(1, _parameter(obj))
    return _bytes_field(2, _message("JsonReference", obj))


def _parameter(obj: Any) -> bytes:
    if isinstance(obj, dict) and obj.get("in") == "body":
        return _bytes_field(1, _message("BodyParameter", obj))
    number = _SUBSCHEMAS.get(obj.get("in") if isinstance(obj, dict) else "", 3)
    inner = _bytes_field(number, _message(_SUBSCHEMA_NAMES[number], obj))
    return _bytes_field(2, inner)


def _response_value(obj: Any) -> bytes:
    if isinstance(obj, dict) and "description" in obj:
        return _bytes_field(1, _message("Response", obj))
    return _bytes_field(2, _message("JsonReference", obj))


def _schema_item(obj: Any) -> bytes:
    if isinstance(obj, dict) and obj.get("type") == "file":
        return _bytes_field(2, _message("FileSchema", obj))
    return _bytes_field(1, _message("Schema", obj))


def _additional_properties(obj: Any) -> bytes:
    if isinstance(obj, bool):
        return _tag(2, 0) + (b"\x01" if obj else b"\x00")
    return _bytes_field(1, _message("Schema", obj))


def _type_item(obj: Any) -> bytes:
    values = obj if isinstance(obj, list) else [obj]
    return b"".join(_bytes_field(1, _scalar_text(v).encode()) for v in values)


def _items_item(obj: Any) -> bytes:
    return _bytes_field(1, _message("Schema", obj)) if isinstance(obj, dict) else b""


def _security_requirement(obj: Any) -> bytes:
    out = bytearray()
    if isinstance(obj, dict):
        for k, v in obj.items():
            values = v if isinstance(v, list) else [v]
            array = b"".join(_bytes_field(1, _scalar_text(s).encode()) for s in values)
            out += _bytes_field(1, _bytes_field(1, k.encode()) + _bytes_field(2, array))
    return bytes(out)


def _security_definitions_item(obj: Any) -> bytes:
    if not isinstance(obj, dict):
        return b""
    if obj.get("type") == "oauth2":
        number, name = _OAUTH2.get(obj.get("flow", ""), (3, "Oauth2ImplicitSecurity"))
    else:
        number, name = _SECURITY.get(obj.get("type", ""), (2, "ApiKeySecurity"))
    return _bytes_field(number, _message(name, obj))


_SPECIAL = {
    "Paths": _paths,
    "Responses": _responses,
    "ParametersItem": _parameters_item,
    "Parameter": _parameter,
    "ResponseValue": _response_value,
    "SchemaItem": _schema_item,
    "AdditionalPropertiesItem": _additional_properties,
    "TypeItem": _type_item,
    "ItemsItem": _items_item,
    "SecurityRequirement": _security_requirement,
    "SecurityDefinitionsItem": _security_definitions_item,
}


# ------------------------------------------------------------------ YAML as yaml.v3 writes it


def yaml_text(value: Any) -> str:
    """``yaml.Marshal`` of the node the JSON value parses to, styles cleared (indent 4)."""
    lines = _block(value, 0)
    return "\n".join(lines) + "\n"


def _child_indent(indent: int, in_sequence: bool) -> int:
    """go.yaml.in/yaml/v3 ``yaml_emitter_increase_indent_compact`` (best_indent 4): a node
    inside a sequence item skips the ``- ``; anything else aligns to a multiple of 4."""
    return indent + 2 if in_sequence else 4 * ((indent + 4) // 4)


def _block(value: Any, indent: int) -> list[str]:
    """The lines of ``value`` as a block node at column ``indent``; the first line without
    its indentation (it follows a ``- `` or stands at ``indent``), the others absolute."""
    lines: list[str] = []
    if isinstance(value, dict) and value:
        for k, v in value.items():
            lead = "" if not lines else " " * indent
            key = _scalar(k, simple_key=True)
            if isinstance(v, (dict, list)) and v:
                child = _child_indent(indent, in_sequence=False)
                inner = _block(v, child)
                lines.append(f"{lead}{key}:")
                lines.append(" " * child + inner[0])
                lines += inner[1:]
            else:
                first, *rest = _inline(v, _child_indent(indent, in_sequence=False))
                lines.append(f"{lead}{key}: {first}")
                lines += rest
        return lines
    if isinstance(value, list) and value:
        for item in value:
            lead = "" if not lines else " " * indent
            if isinstance(item, (dict, list)) and item:
                inner = _block(item, indent + 2)
            else:
                inner = _inline(item, _child_indent(indent, in_sequence=True))
            lines.append(f"{lead}- {inner[0]}")
            lines += inner[1:]
        return lines
    return _inline(value, 4)


def _inline(value: Any, body_indent: int) -> list[str]:
    """A scalar or an empty collection; a literal block's lines follow at ``body_indent``."""
    if isinstance(value, dict):
        return ["{}"]
    if isinstance(value, list):
        return ["[]"]
    if isinstance(value, str) and "\n" in value:
        return _literal(value, body_indent)
    return [_scalar(value)]


def _literal(value: str, body_indent: int) -> list[str]:
    """``|``, ``|-`` or ``|+`` (``yaml_emitter_write_block_scalar_hints``), with the
    indentation hint before a leading space or break; double quotes where a block is not
    allowed (a space at the end or before a break, a non-printable character)."""
    if value.endswith(" ") or " \n" in value or any(not _printable(c) for c in value if c != "\t"):
        return [_double_quoted(value)]
    hint = "4" if value[:1] in (" ", "\n") else ""
    if not value.endswith("\n"):
        chomp = "-"
    elif value == "\n" or value.endswith("\n\n"):
        chomp = "+"
    else:
        chomp = ""
    text = value[:-1] if value.endswith("\n") else value
    body = [(" " * body_indent + line) if line else "" for line in text.split("\n")]
    return [f"|{hint}{chomp}", *body]


def _json_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    return json.dumps(value)


def _scalar(value: Any, simple_key: bool = False) -> str:
    if not isinstance(value, str):
        return _json_scalar(value)
    if _resolves_to_other_type(value) or (simple_key and "\n" in value):
        return _double_quoted(value)
    plain, single = _analyze(value)
    if plain:
        return value
    if single:
        return "'" + value.replace("'", "''") + "'"
    return _double_quoted(value)


_INT = re.compile(r"^[-+]?(0b[01_]+|0o[0-7_]+|0x[0-9a-fA-F_]+|[0-9][0-9_]*)$")
_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
_TIMESTAMP = re.compile(
    r"^[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}"
    r"([Tt ][0-9]{1,2}:[0-9]{2}:[0-9]{2}(\.[0-9]*)?\s*(Z|[-+][0-9]{1,2}(:[0-9]{2})?)?)?$"
)
_KEYWORDS = {
    "true", "True", "TRUE", "false", "False", "FALSE", "", "~", "null", "Null", "NULL",
    ".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf",
    "-.Inf", "-.INF",
}  # fmt: skip


def _resolves_to_other_type(s: str) -> bool:
    """yaml.v3 ``resolve``: a plain scalar that would not read back as a string."""
    if s in _KEYWORDS:
        return True
    if s[0] in "+-0123456789":
        plain = s.replace("_", "")
        if _TIMESTAMP.match(s) or _INT.match(plain) or _FLOAT.match(plain):
            return True
    elif s[0] == "." and _FLOAT.match(s):
        return True
    return False


def _printable(c: str) -> bool:
    o = ord(c)
    return (
        o == 0x0A
        or 0x20 <= o <= 0x7E
        or 0xA0 <= o <= 0xD7FF
        or (0xE000 <= o <= 0xFFFD and o != 0xFEFF)
    )  # yaml.v3 ``is_printable``: nothing outside the Basic Multilingual Plane


def _analyze(s: str) -> tuple[bool, bool]:
    """(block plain allowed, single quotes allowed): ``yaml_emitter_analyze_scalar``."""
    if not s:
        return True, True
    block_indicators = s.startswith(("---", "..."))
    breaks = {"\n", "\r", "\x85", "\u2028", "\u2029"}
    special = tabs = leading = trailing = break_space = space_break = line_breaks = False
    previous_space = previous_break = False
    preceded_by_ws = True
    n = len(s)
    for i, c in enumerate(s):
        followed_by_ws = i + 1 >= n or s[i + 1] in (" ", "\t", *breaks)
        if i == 0:
            if c in "#,[]{}&*!|>'\"%@`" or (c in "?:-" and followed_by_ws):
                block_indicators = True
        elif (c == ":" and followed_by_ws) or (c == "#" and preceded_by_ws):
            block_indicators = True
        if c == "\t":
            tabs = True
        elif not _printable(c):
            special = True
        if c == " ":
            leading = leading or i == 0
            trailing = trailing or i == n - 1
            break_space = break_space or previous_break
            previous_space, previous_break = True, False
        elif c in breaks:
            line_breaks = True
            leading = leading or i == 0
            trailing = trailing or i == n - 1
            space_break = space_break or previous_space
            previous_space, previous_break = False, True
        else:
            previous_space = previous_break = False
        preceded_by_ws = c in (" ", "\t", *breaks)
    plain = not (leading or trailing or break_space or space_break or tabs or special)
    plain = plain and not line_breaks and not block_indicators
    single = not (break_space or space_break or tabs or special)
    return plain, single


_ESCAPES = {
    "\0": "0", "\a": "a", "\b": "b", "\t": "t", "\n": "n", "\v": "v", "\f": "f", "\r": "r",
    "\x1b": "e", '"': '"', "\\": "\\", "\x85": "N", "\xa0": "_", "\u2028": "L", "\u2029": "P",
}  # fmt: skip


def _double_quoted(s: str) -> str:
    out = []
    for c in s:
        if c in _ESCAPES and (c in '"\\' or not _printable(c) or c in "\n\r\x85\u2028\u2029\xa0"):
            out.append("\\" + _ESCAPES[c])
        elif c == "\ufeff" or not _printable(c):
            o = ord(c)
            out.append(
                f"\\x{o:02X}" if o <= 0xFF else f"\\u{o:04X}" if o <= 0xFFFF else f"\\U{o:08X}"
            )
        else:
            out.append(c)
    return '"' + "".join(out) + '"'
