"""A protobuf reader just big enough to look into gnostic's ``openapi.v2.Document``."""

from __future__ import annotations

from collections.abc import Iterator


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, i


def fields(data: bytes) -> Iterator[tuple[int, bytes | int]]:
    """(field number, value) in wire order; length-delimited values as bytes."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 2:
            n, i = _varint(data, i)
            value, i = data[i : i + n], i + n
        elif wire == 1:
            value, i = data[i : i + 8], i + 8
        elif wire == 5:
            value, i = data[i : i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        yield number, value


def document_summary(data: bytes) -> dict[str, object]:
    """``swagger`` (1), ``info.title`` (2.1) and the number of definitions (9.1)."""
    out: dict[str, object] = {"swagger": "", "title": "", "definitions": 0}
    for number, value in fields(data):
        if number == 1 and isinstance(value, bytes):
            out["swagger"] = value.decode()
        elif number == 2 and isinstance(value, bytes):
            out["title"] = next((v.decode() for n, v in fields(value) if n == 1), "")
        elif number == 9 and isinstance(value, bytes):
            out["definitions"] = sum(1 for n, _ in fields(value) if n == 1)
    return out
