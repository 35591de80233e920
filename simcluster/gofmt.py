"""Go's text renderings that API error messages embed, for JSON-shaped Python values.

The API server builds messages with ``fmt`` and ``encoding/json``: ``%v`` of a decoded
patch (``map[spec:map[foo:bar]]``), ``strconv.Quote`` of a value (``%q``), and
``json.Marshal`` output (sorted map keys, ``<``/``>``/``&`` escaped). Clients show these
messages verbatim, so the simulator renders them the same way.
"""

from __future__ import annotations

import json
import math
from typing import Any

_SHORT_ESC = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_QUOTE_ESC = {
    '"': '\\"',
    "\\": "\\\\",
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}


def quote(s: str) -> str:
    """``strconv.Quote``: double-quoted, Go escapes, printable Unicode kept as is."""
    out = ['"']
    for ch in s:
        if ch in _QUOTE_ESC:
            out.append(_QUOTE_ESC[ch])
        elif ch == " " or ch.isprintable():
            out.append(ch)
        else:
            cp = ord(ch)
            if cp < 0x80:
                out.append(f"\\x{cp:02x}")
            elif cp <= 0xFFFF:
                out.append(f"\\u{cp:04x}")
            else:
                out.append(f"\\U{cp:08x}")
    out.append('"')
    return "".join(out)


def float_v(f: float) -> str:
    """``%v`` of a float64 (strconv 'g', shortest): ``1.5``, ``1e+06``, ``1e-05``."""
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    if math.isnan(f):
        return "NaN"
    if f == 0:
        return "-0" if math.copysign(1, f) < 0 else "0"
    r = repr(f)
    mant, _, exp_s = r.partition("e")
    neg = mant.startswith("-")
    mant = mant.lstrip("-")
    int_part, _, frac = mant.partition(".")
    if frac == "0":
        frac = ""
    digits = (int_part + frac).lstrip("0")
    exp = int(exp_s or 0) + len(int_part.lstrip("0") or "") - 1
    if not int_part.strip("0"):
        lead = len(frac) - len(frac.lstrip("0"))
        exp = int(exp_s or 0) - lead - 1
    digits = digits.rstrip("0") or "0"
    sign = "-" if neg else ""
    if exp < -4 or exp >= 6:
        m = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{m}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if exp >= 0:
        if len(digits) <= exp + 1:
            return sign + digits + "0" * (exp + 1 - len(digits))
        return sign + digits[: exp + 1] + "." + digits[exp + 1 :]
    return sign + "0." + "0" * (-exp - 1) + digits


def value_v(v: Any) -> str:
    """``%v`` / ``%+v`` of a JSON value decoded as Go's ``interface{}``."""
    if v is None:
        return "<nil>"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return float_v(v)
    if isinstance(v, str):
        return v
    if isinstance(v, dict):
        return "map[" + " ".join(f"{k}:{value_v(v[k])}" for k in sorted(v)) + "]"
    if isinstance(v, list):
        return "[" + " ".join(value_v(x) for x in v) + "]"
    return str(v)


def _json_str(s: str) -> str:
    out = ['"']
    for ch in s:
        if ch in _SHORT_ESC:
            out.append(_SHORT_ESC[ch])
        elif ch in "<>&\u2028\u2029" or ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def marshal(v: Any) -> str:
    """``json.Marshal`` of a decoded JSON value: compact, map keys sorted, HTML-escaped."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v == int(v) and abs(v) < 1e21:
            return str(int(v))
        return json.dumps(v)
    if isinstance(v, str):
        return _json_str(v)
    if isinstance(v, dict):
        return "{" + ",".join(f"{_json_str(k)}:{marshal(v[k])}" for k in sorted(v)) + "}"
    if isinstance(v, list):
        return "[" + ",".join(marshal(x) for x in v) + "]"
    return _json_str(str(v))


RFC3339 = "2006-01-02T15:04:05Z07:00"
RFC3339_MICRO = "2006-01-02T15:04:05.000000Z07:00"
_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def time_error(value: str, micro: bool = False) -> str | None:
    """The error ``time.Parse(RFC3339[Micro], value)`` returns, or None when it parses.

    Walks the layout elements the way Go's parser does so that the message names the same
    remaining input and layout element (``cannot parse "x" as "2006"``).
    """
    layout = RFC3339_MICRO if micro else RFC3339
    head = f"parsing time {quote(value)}"

    def bad(rest: str, elem: str) -> str:
        return f"{head} as {quote(layout)}: cannot parse {quote(rest)} as {quote(elem)}"

    v = value
    nums: dict[str, int] = {}
    steps = [("2006", 4), ("-", 0), ("01", 2), ("-", 0), ("02", 2), ("T", 0), ("15", -2)]
    steps += [(":", 0), ("04", 2), (":", 0), ("05", 2)]
    if micro:
        steps.append((".000000", 7))
    steps.append(("Z07:00", 0))
    for elem, width in steps:
        if width == 0 and elem != "Z07:00":
            if not v.startswith(elem):
                return bad(v, elem)
            v = v[len(elem) :]
        elif elem == "Z07:00":
            if v.startswith("Z"):
                v = v[1:]
            elif len(v) < 6 or v[3] != ":" or v[0] not in "+-" or not (v[1:3] + v[4:6]).isdigit():
                return bad(v, elem)
            else:
                v = v[6:]
        elif elem == ".000000":
            if len(v) < 7 or v[0] not in ".," or not v[1:7].isdigit():
                return bad(v, elem)
            v = v[7:]
        else:
            n = abs(width)
            if width < 0 and not (len(v) > 1 and v[1].isdigit()):
                n = 1
            if len(v) < n or not v[:n].isdigit():
                return bad(v, elem)
            nums[elem] = int(v[:n])
            v = v[n:]
            if elem == "05" and not micro and len(v) > 1 and v[0] in ".," and v[1].isdigit():
                i = 1
                while i < len(v) and v[i].isdigit():
                    i += 1
                v = v[i:]
    for elem, name, lo, hi in (("01", "month", 1, 12), ("15", "hour", 0, 23)):
        if not lo <= nums[elem] <= hi:
            return f"{head}: {name} out of range"
    if not 0 <= nums["04"] <= 59:
        return f"{head}: minute out of range"
    if not 0 <= nums["05"] <= 59:
        return f"{head}: second out of range"
    if v:
        return f"{head}: extra text: {quote(v)}"
    year, month, day = nums["2006"], nums["01"], nums["02"]
    days = _DAYS[month - 1] + (
        1 if month == 2 and year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 0
    )
    if not 1 <= day <= days:
        return f"{head}: day out of range"
    return None


def human_duration(seconds: float) -> str:
    """``duration.HumanDuration``."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rem = s % 60
        return f"{minutes}m" if rem == 0 else f"{minutes}m{rem}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rem = minutes % 60
        return f"{hours}h" if rem == 0 else f"{hours}h{rem}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rem = hours % 24
        return f"{hours // 24}d" if rem == 0 else f"{hours // 24}d{rem}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        years = hours // 24 // 365
        return f"{years}y" if dy == 0 else f"{years}y{dy}d"
    return f"{hours // 24 // 365}y"
