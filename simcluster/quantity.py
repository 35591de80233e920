"""Kubernetes resource quantities (``500m``, ``16Gi``, ``4``), parsed and printed like the API.

Follows ``staging/src/k8s.io/apimachinery/pkg/api/resource/quantity.go`` (v1.32):
``parseQuantityString`` / ``ParseQuantity`` (grammar, the three error texts, rounding up to
nano, the ``BinarySI`` clamp), ``CanonicalizeBytes`` (``1000m`` -> ``1``, ``2048Mi`` -> ``2Gi``,
``1.5Gi`` -> ``1536Mi``, exponents kept for ``DecimalExponent``) and the rule that a string
that is already canonical-looking is kept verbatim (``100m``, ``12e6``, ``100Mi``). The
``math.go`` / ``amount.go`` / ``scale_int.go`` details matter for ``MilliValue`` (the
"must be an integer" check), so :class:`GoQuantity` keeps the internal representation the
Go type would have (``int64Amount`` or ``inf.Dec``).

Quota arithmetic stays exact: :func:`parse_quantity` returns a :class:`Quantity` holding a
:class:`~fractions.Fraction`, and :func:`format_quantity` prints the canonical text.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any, NamedTuple

ERR_FORMAT = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
ERR_NUMERIC = "unable to parse numeric part of quantity"
ERR_SUFFIX = "unable to parse quantity's suffix"

DECIMAL_SI = "DecimalSI"
BINARY_SI = "BinarySI"
DECIMAL_EXPONENT = "DecimalExponent"

_SUFFIX_CHARS = frozenset("eEinumkKMGTP")
_DEC = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DEC_BY_EXP = {v: k for k, v in _DEC.items()}
_BIN = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_BIN_BY_EXP = {v // 10: k for k, v in _BIN.items()}
_MAX_INT64 = (1 << 63) - 1
_MAX_INT64_FACTORS = 18
_MAX_EXPONENT = 10_000  # not in Go: a guard against 10**(2**31) fractions


class QuantityError(ValueError):
    """A quantity the API server cannot decode; ``str()`` is the real error text."""


def _wrap64(x: int) -> int:
    """Two's-complement int64 wrap-around, as Go integer arithmetic does."""
    return ((x + (1 << 63)) % (1 << 64)) - (1 << 63)


def _ceil_div(n: int, d: int) -> int:
    return -(-n // d)


@dataclass(frozen=True, slots=True)
class GoQuantity:
    """A ``resource.Quantity`` as the Go struct holds it after ``ParseQuantity``.

    ``i`` is ``(value, scale)`` of the ``int64Amount`` fast path, ``dec`` is
    ``(unscaled, scale)`` of the ``inf.Dec`` slow path (one of them is set), ``s`` the
    original text when it is kept verbatim, ``fmt`` the ``Format``.
    """

    value: Fraction
    fmt: str
    s: str = ""
    i: tuple[int, int] | None = (0, 0)
    dec: tuple[int, int] | None = None

    def text(self) -> str:
        """What ``MarshalJSON`` writes: the kept text, else the canonical form."""
        return self.s or canonical_text(self.value, self.fmt)

    def milli_value(self) -> int:
        """``MilliValue()`` = ``ScaledValue(-3)``, with Go's int64 overflow behaviour."""
        if self.dec is None:
            value, scale = self.i or (0, 0)
            if scale < -3:
                return _negative_scale(value, -3 - scale)
            return _positive_scale(value, scale + 3)
        unscaled, scale = self.dec
        dif = scale - 3
        if dif == 0:
            return _wrap64(unscaled)
        if dif < 0:
            return _wrap64(_wrap64(unscaled) * 10 ** (-dif))
        if unscaled < _MAX_INT64 and dif < 19:
            u = _wrap64(unscaled)
            q = abs(u) // 10**dif * (1 if u >= 0 else -1)
            return q + 1 if u - q * 10**dif != 0 else q
        q, r = divmod(unscaled, 10**dif)
        return _wrap64(q + 1 if r else q)

    def go_repr(self) -> str:
        """``fmt.Sprintf("%#v", q)``: a ``Quantity`` value is no ``fmt.Stringer``."""
        if self.dec is None:
            v, sc = self.i or (0, 0)
            i = f"resource.int64Amount{{value:{v}, scale:{sc}}}"
            d = "resource.infDecAmount{Dec:(*inf.Dec)(nil)}"
        else:
            i = "resource.int64Amount{value:0, scale:0}"
            d = "resource.infDecAmount{Dec:(*inf.Dec)(0xc000a1c2d0)}"
        return f'resource.Quantity{{i:{i}, d:{d}, s:"{self.s}", Format:"{self.fmt}"}}'


def _positive_scale(base: int, scale: int) -> int:
    """``positiveScaleInt64``: 0 on overflow (the caller ignores ``ok``)."""
    result = base * 10**scale
    if result > _MAX_INT64 or result < -_MAX_INT64 - 1:
        return 0
    return result


def _negative_scale(base: int, scale: int) -> int:
    """``negativeScaleInt64``: divide by 10^scale, rounding away from zero."""
    sign = -1 if base < 0 else 1
    mag = abs(base)
    fraction = False
    for _ in range(scale):
        if not fraction and mag % 10:
            fraction = True
        mag //= 10
        if mag == 0:
            return sign if fraction else 0
    return sign * (mag + 1 if fraction else mag)


def _split(text: str) -> tuple[bool, str, str, str, str]:
    """``parseQuantityString``: (positive, value, num, denom, suffix)."""
    positive = True
    pos = 0
    end = len(text)
    if pos < end and text[0] in "+-":
        positive = text[0] != "-"
        pos += 1
    while True:  # leading zeroes
        if pos >= end:
            return positive, "0", "0", "", ""
        if text[pos] != "0":
            break
        pos += 1
    start = pos
    while pos < end and text[pos].isdigit() and text[pos].isascii():
        pos += 1
    num = text[start:pos]
    if pos >= end:
        return positive, text, num, "", ""
    if not num:
        num = "0"
    denom = ""
    if text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos].isdigit() and text[pos].isascii():
            pos += 1
        denom = text[start:pos]
        if pos >= end:
            return positive, text, num, denom, ""
    value = text[:pos]
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos >= end:
        return positive, value, num, denom, text[suffix_start:]
    if text[pos] in "+-":
        pos += 1
    while pos < end and text[pos].isdigit() and text[pos].isascii():
        pos += 1
    if pos >= end:
        return positive, value, num, denom, text[suffix_start:]
    raise QuantityError(ERR_FORMAT)


def _interpret(suffix: str) -> tuple[int, int, str]:
    """``quantitySuffixer.interpret``: (base, exponent, format)."""
    if suffix in _DEC:
        return 10, _DEC[suffix], DECIMAL_SI
    if suffix in _BIN:
        return 2, _BIN[suffix], BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE":
        exp = suffix[1:]
        body = exp[1:] if exp[:1] in "+-" else exp
        if body.isdigit() and body.isascii():
            e = int(exp)
            if -(1 << 63) <= e < (1 << 63):
                return 10, _wrap32(e), DECIMAL_EXPONENT
    raise QuantityError(ERR_SUFFIX)


def _wrap32(x: int) -> int:
    return ((x + (1 << 31)) % (1 << 32)) - (1 << 31)


@lru_cache(maxsize=8192)
def parse_go(text: str) -> GoQuantity:
    """``resource.ParseQuantity``; raises :class:`QuantityError` with the real message."""
    if not text:
        raise QuantityError(ERR_FORMAT)
    if text == "0":
        return GoQuantity(Fraction(0), DECIMAL_SI, "0")
    positive, value, num, denom, suf = _split(text)
    base, exponent, fmt = _interpret(suf)
    if abs(exponent) > _MAX_EXPONENT:
        # Go keeps such values as (1, 1e9) pairs; exact fractions that big are not sensible.
        raise QuantityError(ERR_NUMERIC)
    precision = -1
    scale = 0
    mantissa = 1
    if fmt in (DECIMAL_EXPONENT, DECIMAL_SI):
        scale = exponent
        precision = _MAX_INT64_FACTORS - (len(num) + len(denom))
    elif exponent >= 0 and not denom:
        mantissa = 1 << exponent
        precision = 15 - len(num) - int(exponent * 3 / 10) - 1
    if precision >= 0:
        scale -= len(denom)
        if scale >= -9:
            shifted = num + denom
            iv = int(shifted)
            if iv > _MAX_INT64:
                raise QuantityError(ERR_NUMERIC)
            result = iv * mantissa
            if result <= _MAX_INT64:
                if not positive:
                    result = -result
                exact = Fraction(result) * (Fraction(10) ** scale)
                keep = False
                if fmt == BINARY_SI:
                    keep = exponent % 10 == 0 and (iv & 0x07) != 0
                else:
                    keep = scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0"
                return GoQuantity(exact, fmt, text if keep else "", (result, scale), None)
    # The inf.Dec slow path.
    digits = value[1:] if value[:1] in "+-" else value
    int_part, _, frac_part = digits.partition(".")
    if not (int_part + frac_part).isdigit() or not (int_part + frac_part).isascii():
        raise QuantityError(ERR_NUMERIC)
    unscaled = int(int_part + frac_part)
    dscale = len(frac_part)
    if base == 10:
        dscale -= exponent
    else:
        unscaled <<= exponent
    if unscaled != 0:
        # Round(amount, Nano, RoundUp): the magnitude is rounded up to nano units.
        shift = 9 - dscale
        unscaled = unscaled * 10**shift if shift >= 0 else _ceil_div(unscaled, 10**-shift)
        dscale = 9
    amount = Fraction(unscaled, 10**dscale) if dscale >= 0 else Fraction(unscaled * 10**-dscale)
    if fmt == BINARY_SI and amount > _MAX_INT64:
        amount = Fraction(_MAX_INT64)
        unscaled, dscale = _MAX_INT64, 0
    if fmt == BINARY_SI and 0 < amount < 1:
        fmt = DECIMAL_SI
    if not positive:
        amount, unscaled = -amount, -unscaled
    return GoQuantity(amount, fmt, "", None, (unscaled, dscale))


def canonical_text(value: Fraction, fmt: str) -> str:
    """``CanonicalizeBytes``: the text the API server prints for ``value`` in ``fmt``."""
    if value == 0:
        return "0"
    if fmt == BINARY_SI and (-1024 < value < 1024 or value.denominator != 1):
        fmt = DECIMAL_SI  # small or fractional BinarySI values print as DecimalSI
    if fmt == BINARY_SI:
        n = value.numerator
        k = 0
        while abs(n) >= 1024 and n % 1024 == 0:
            n //= 1024
            k += 1
        return f"{n}{_BIN_BY_EXP.get(k, '')}"
    # value = n * 10^e with n free of trailing zeroes, then e rounded down to a multiple of 3.
    n, e = _decimal_parts(value)
    while e % 3:
        n *= 10
        e -= 1
    if fmt == DECIMAL_EXPONENT:
        return f"{n}e{e}" if e else str(n)
    return f"{n}{_DEC_BY_EXP.get(e, '')}"


def _decimal_parts(value: Fraction) -> tuple[int, int]:
    """``value`` as ``n * 10^e`` with no factor of ten left in ``n``."""
    n, den = value.numerator, value.denominator
    twos = fives = 0
    d = den
    while d % 2 == 0:
        d //= 2
        twos += 1
    while d % 5 == 0:
        d //= 5
        fives += 1
    if d != 1 or max(twos, fives) > 9:
        # Not representable in nano units: round the magnitude up, as ParseQuantity does.
        mag = _ceil_div(abs(n) * 10**9, den)
        n, e = (mag if n > 0 else -mag), -9
    else:
        k = max(twos, fives)
        n, e = n * (10**k // den), -k
    while n % 10 == 0 and abs(n) >= 10:
        n //= 10
        e += 1
    return n, e


def quantity_input_text(raw: Any) -> str:
    """The bytes ``UnmarshalJSON`` would see for a decoded JSON value (quotes stripped)."""
    if isinstance(raw, str):
        return raw.strip()
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, int):
        return str(raw)
    if isinstance(raw, float):
        return str(int(raw)) if raw == int(raw) and abs(raw) < 1e16 else repr(raw)
    if raw is None:
        return "null"
    return "{...}"


_recent = threading.local()


def canonicalize(raw: Any) -> str:
    """Decode a JSON value into a Quantity and re-encode it, as a write through the API does.

    ``null`` becomes ``"0"`` (a zero Quantity); malformed input raises :class:`QuantityError`.
    The decoded value is remembered (per thread) under its output text, so validation that
    runs later in the same request can show the Go representation of what the client sent
    (see :func:`decoded`).
    """
    if raw is None:
        return "0"
    if isinstance(raw, (dict, list)):
        raise QuantityError(ERR_FORMAT)
    out, q = _decode(raw.strip() if isinstance(raw, str) else quantity_input_text(raw))
    seen = getattr(_recent, "map", None)
    if seen is None or len(seen) > 512:
        seen = _recent.map = {}
    seen[out] = q
    return out


@lru_cache(maxsize=8192)
def _decode(text: str) -> tuple[str, GoQuantity]:
    q = parse_go(text)
    return q.text(), q


def decoded(text: str) -> GoQuantity:
    """The Quantity as decoded from the client's input that canonicalized to ``text``."""
    q = (getattr(_recent, "map", None) or {}).get(text)
    return q if q is not None else parse_go(text)


# -------------------------------------------------------------- quota arithmetic
class Quantity(NamedTuple):
    """An exact amount plus the format (``BinarySI`` or ``DecimalSI``) used to print it."""

    value: Fraction
    binary: bool = False

    def __add__(self, other: object) -> Quantity:  # type: ignore[override]
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity(self.value + other.value, self.binary)

    def __str__(self) -> str:
        return format_quantity(self.value, self.binary)


ZERO = Quantity(Fraction(0))


@lru_cache(maxsize=4096)
def parse_quantity(text: str | int | float) -> Quantity:
    """Parse a quantity with the API's grammar; raises ``ValueError`` (the real message)."""
    if isinstance(text, bool):
        raise QuantityError(ERR_FORMAT)
    q = parse_go(quantity_input_text(text))
    return Quantity(q.value, q.fmt == BINARY_SI)


def format_quantity(value: Fraction, binary: bool = False) -> str:
    """Canonical text the API server would print for ``value`` (``BinarySI`` if ``binary``)."""
    return canonical_text(Fraction(value), BINARY_SI if binary else DECIMAL_SI)
