"""Kubernetes resource quantities (``500m``, ``16Gi``, ``4``) as exact fractions.

Quota arithmetic must be exact (``0.1 + 0.2`` CPUs), and the text the server prints in
``status.used`` and in quota error messages must look like the API server's canonical form.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from typing import NamedTuple

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_DEC_ORDER = ["n", "u", "m", "", "k", "M", "G", "T", "P", "E"]


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
    """Parse a quantity; raises ``ValueError`` on malformed input."""
    if isinstance(text, bool):
        raise ValueError(f"quantities must match the regular expression: {text!r}")
    if isinstance(text, int):
        return Quantity(Fraction(text))
    if isinstance(text, float):
        return Quantity(Fraction(str(text)))
    s = text.strip()
    if not s:
        raise ValueError("quantities must match the regular expression")
    for suffix, mult in _BINARY.items():
        if s.endswith(suffix):
            return Quantity(Fraction(s[: -len(suffix)]) * mult, True)
    num = s
    mult = Fraction(1)
    if s[-1] in "numkMGTPE":
        num, mult = s[:-1], _DECIMAL[s[-1]]
    try:
        return Quantity(Fraction(num) * mult)
    except (ValueError, ZeroDivisionError) as exc:
        raise ValueError(f"quantities must match the regular expression: {text!r}") from exc


def format_quantity(value: Fraction, binary: bool = False) -> str:
    """Canonical text the API server would print for ``value``."""
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    v = abs(value)
    if binary and v.denominator == 1 and v >= 1024:
        for suffix in reversed(list(_BINARY)):
            mult = _BINARY[suffix]
            if v % mult == 0:
                return f"{sign}{v // mult}{suffix}"
    if binary and v.denominator == 1:
        return f"{sign}{v.numerator}"
    for suffix in reversed(_DEC_ORDER):
        scaled = v / _DECIMAL[suffix]
        if scaled.denominator == 1 and (scaled >= 1):
            return f"{sign}{scaled.numerator}{suffix}"
    # Finer than nano: round up to nano like the API server does.
    nano = -(-v.numerator * 10**9 // v.denominator)
    return f"{sign}{nano}n"
