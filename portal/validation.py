"""Input that no layer below may see: the shared checks behind every parser and field.

PostgreSQL refuses some values that Python accepts, and a refusal there is a 500:

- ``NUL`` (U+0000) in ``text`` and in ``jsonb`` strings;
- lone UTF-16 surrogates (U+D800-U+DFFF: JSON can spell them, ``"\\ud800"``, UTF-8 cannot
  carry them) in ``text`` and ``jsonb``;
- time-zone offsets beyond +-15:59 in ``timestamptz`` (Python allows up to +-23:59).

And Python itself gives up on JSON nested about 1,000 deep (``RecursionError``).

So every JSON body is parsed by :func:`loads_json`, which refuses nesting deeper than
``API_JSON_MAX_DEPTH`` and any string or key holding NUL or a lone surrogate, and every
date-time parameter is converted to UTC (``portal.fields.strict_datetime``). Each raises
:class:`InputRefused` with a message a client can show; the parsers and fields turn it into
their own 400.
"""

from __future__ import annotations

import json
import re
from typing import Any

from django.conf import settings

# JSON the portal reads is at most a few levels deep (an agent report: 5). Deeper is an attack.
DEFAULT_MAX_DEPTH = 32
_BAD_CHARS = re.compile("[\x00\ud800-\udfff]")


class InputRefused(ValueError):
    """A value no layer below can store or process; ``str()`` is the client's message."""


def max_depth() -> int:
    return getattr(settings, "API_JSON_MAX_DEPTH", DEFAULT_MAX_DEPTH)


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as text, or None. Fast for the common ASCII case."""
    if value.isascii():
        return "NUL characters are not allowed." if "\x00" in value else None
    match = _BAD_CHARS.search(value)
    if match is None:
        return None
    if match.group() == "\x00":
        return "NUL characters are not allowed."
    return "Lone UTF-16 surrogates (\\ud800-\\udfff) are not allowed."


# What int(), float() and Decimal() read as a number although it is not one a client means
# to send: other scripts' digits ("٣" is 3, so is the full-width three) and underscores
# ("1_000"). Python's
# \d is Unicode; DRF's and Django's number fields call int() (#24 finding 8).
_NUMBER_LIKE = re.compile(r"\s*[+-]?(?=[\d_.]*\d)[\d_]*(?:\.[\d_]*)?(?:[eE][+-]?[\d_]+)?\s*")
DIGITS_MESSAGE = "Write numbers with the ASCII digits 0-9 (no other digits, no underscores)."


def digits_problem(value: str) -> str | None:
    """A message when ``value`` would be read as a number but is not plain ASCII digits."""
    if value.isascii() and "_" not in value:
        return None
    return DIGITS_MESSAGE if _NUMBER_LIKE.fullmatch(value) else None


def check_text(value: str) -> str:
    problem = text_problem(value) or digits_problem(value)
    if problem:
        raise InputRefused(problem)
    return value


def check_tree(data: Any, depth_limit: int | None = None) -> Any:
    """Walk parsed JSON without recursion: refuse deep nesting and unstorable strings."""
    limit = max_depth() if depth_limit is None else depth_limit
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            check_text(node)
        elif isinstance(node, dict | list):
            if depth > limit:
                raise InputRefused(f"JSON nested too deeply (at most {limit} levels).")
            if isinstance(node, dict):
                for key, value in node.items():
                    check_text(key)
                    stack.append((value, depth + 1))
            else:
                stack.extend((value, depth + 1) for value in node)
    return data


def _no_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are unique: ``{"amount": 1, "amount": 9}`` is refused (the
    standard library keeps the last silently; a proxy or a client library may keep the
    first, so the two would disagree on what was asked)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise InputRefused(f"Duplicate key {key!r} in a JSON object.")
        out[key] = value
    return out


def loads_json(text: str | bytes, depth_limit: int | None = None) -> Any:
    """``json.loads`` for untrusted input: no NaN/Infinity, bounded depth, storable text.

    Raises :class:`InputRefused` (a ``ValueError``) for every kind of bad input.
    """
    limit = max_depth() if depth_limit is None else depth_limit
    try:
        data = json.loads(text, parse_constant=_no_constant, object_pairs_hook=unique_keys)
    except RecursionError as err:
        raise InputRefused(f"JSON nested too deeply (at most {limit} levels).") from err
    except InputRefused:
        raise
    except (ValueError, UnicodeDecodeError) as err:
        raise InputRefused(f"Not valid JSON: {err}") from err
    return check_tree(data, limit)


# Error codes of validation messages that are not about the body's form (#24 finding 9). A
# body naming an object that does not exist or that the caller cannot see (DRF's related
# fields say "does_not_exist") answers 404, as the object's own URL would; a valid body
# that the object's current state refuses answers 409 (``portal.rest.validation_status``), as
# does a name already taken (Django's and DRF's "unique").
# Raise ``ValidationError(message, code=NOT_FOUND)`` (Django's or DRF's) or
# ``code=CONFLICT``; any other message among them keeps the whole answer a 400.
NOT_FOUND, CONFLICT = "does_not_exist", "conflict"


# White space as str.strip() removes it (Python's str.isspace()), spelt out for patterns: it
# is not what \s means in JSON Schema's (ECMA) patterns ("\x1c" is white space to Python only).
WHITE = (
    "\\t\\n\\u000b\\f\\r\\u001c-\\u001f \\u0085\\u00a0\\u1680\\u2000-\\u200a"
    "\\u2028\\u2029\\u202f\\u205f\\u3000"
)


# Text as DRF's CharField takes it (no NUL), and text with a visible character.
TEXT, VISIBLE_TEXT = "^[^\\u0000]*$", f"^[^\\u0000]*[^\\u0000{WHITE}][^\\u0000]*$"


def visible(message: str):
    """A validator: the text holds a character that is not white space (the schema shows
    its pattern, so "valid" means the same to a client as to the API)."""
    from django.core.validators import RegexValidator

    return RegexValidator(VISIBLE_TEXT, message)
