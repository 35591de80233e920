"""A per-simulator self-signed TLS certificate (ECDSA P-256), made with the stdlib only.

kubectl (client-go ``clientcmd``) reads a kubeconfig's credentials only when the server
URL is ``https`` (``tools/clientcmd/client_config.go``: "only try to read the auth
information if we are secure"), so with authentication always on the simulator must speak
TLS for kubectl to authenticate at all. :func:`server_context` returns an ``SSLContext``
for a fresh self-signed certificate valid for the serving host, ``localhost`` and the
loopback addresses; the kubeconfig pins it as ``certificate-authority-data``.

The key pair, the ECDSA signature and the DER encoding are written out here (no
``cryptography`` package, no ``openssl`` binary): P-256 arithmetic from SEC 2 / FIPS 186-4
and the X.509 v3 structure of RFC 5280.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import secrets
import ssl
import tempfile
import time
from base64 import b64encode
from datetime import UTC, datetime

# ----------------------------------------------------------------- P-256 (secp256r1)
_P = 0xFFFFFFFF00000001000000000000000000000000FFFFFFFFFFFFFFFFFFFFFFFF
_A = _P - 3
_N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
_G = (
    0x6B17D1F2E12C4247F8BCE6E563A440F277037D812DEB33A0F4A13945D898C296,
    0x4FE342E2FE1A7F9B8EE7EB4A7C0F9E162BCE33576B315ECECBB6406837BF51F5,
)
Point = tuple[int, int] | None


def _add(p1: Point, p2: Point) -> Point:
    if p1 is None:
        return p2
    if p2 is None:
        return p1
    (x1, y1), (x2, y2) = p1, p2
    if x1 == x2:
        if (y1 + y2) % _P == 0:
            return None
        lam = (3 * x1 * x1 + _A) * pow(2 * y1, -1, _P) % _P
    else:
        lam = (y2 - y1) * pow(x2 - x1, -1, _P) % _P
    x3 = (lam * lam - x1 - x2) % _P
    return x3, (lam * (x1 - x3) - y1) % _P


def _mul(k: int, point: Point = _G) -> Point:
    result: Point = None
    while k:
        if k & 1:
            result = _add(result, point)
        point = _add(point, point)
        k >>= 1
    return result


def _sign(d: int, message: bytes) -> tuple[int, int]:
    e = int.from_bytes(hashlib.sha256(message).digest(), "big")
    while True:
        k = secrets.randbelow(_N - 1) + 1
        r_point = _mul(k)
        assert r_point is not None
        r = r_point[0] % _N
        s = pow(k, -1, _N) * (e + r * d) % _N
        if r and s:
            return r, s


# ----------------------------------------------------------------------- DER
def _tlv(tag: int, body: bytes) -> bytes:
    n = len(body)
    if n < 0x80:
        head = bytes([n])
    else:
        raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
        head = bytes([0x80 | len(raw)]) + raw
    return bytes([tag]) + head + body


def _seq(*parts: bytes) -> bytes:
    return _tlv(0x30, b"".join(parts))


def _int(v: int) -> bytes:
    raw = v.to_bytes(max(1, (v.bit_length() + 8) // 8), "big")
    return _tlv(0x02, raw)


def _oid(dotted: str) -> bytes:
    arcs = [int(a) for a in dotted.split(".")]
    out = bytearray([40 * arcs[0] + arcs[1]])
    for arc in arcs[2:]:
        chunk = [arc & 0x7F]
        arc >>= 7
        while arc:
            chunk.append(0x80 | (arc & 0x7F))
            arc >>= 7
        out += bytes(reversed(chunk))
    return _tlv(0x06, bytes(out))


def _bits(data: bytes, unused: int = 0) -> bytes:
    return _tlv(0x03, bytes([unused]) + data)


def _time(t: float) -> bytes:
    dt = datetime.fromtimestamp(int(t), UTC)
    if dt.year < 2050:
        return _tlv(0x17, dt.strftime("%y%m%d%H%M%SZ").encode())
    return _tlv(0x18, dt.strftime("%Y%m%d%H%M%SZ").encode())


def _ext(oid: str, value: bytes, critical: bool = False) -> bytes:
    flag = _tlv(0x01, b"\xff") if critical else b""
    return _seq(_oid(oid), flag, _tlv(0x04, value))


_ECDSA_SHA256 = _seq(_oid("1.2.840.10045.4.3.2"))
_PRIME256V1 = "1.2.840.10045.3.1.7"


def _pem(label: str, der: bytes) -> str:
    text = b64encode(der).decode()
    lines = [text[i : i + 64] for i in range(0, len(text), 64)]
    return f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----\n"


def self_signed(hosts: list[str], days: int = 3650) -> tuple[str, str]:
    """(certificate PEM, private key PEM) for ``hosts`` (DNS names or IP addresses)."""
    d = secrets.randbelow(_N - 1) + 1
    pub = _mul(d)
    assert pub is not None
    point = b"\x04" + pub[0].to_bytes(32, "big") + pub[1].to_bytes(32, "big")
    key_id = hashlib.sha1(point).digest()  # noqa: S324 - RFC 5280 key identifier method 1
    name = _seq(_tlv(0x31, _seq(_oid("2.5.4.3"), _tlv(0x0C, b"simcluster"))))
    alt = b""
    for h in dict.fromkeys(hosts):
        try:
            alt += _tlv(0x87, ipaddress.ip_address(h).packed)
        except ValueError:
            alt += _tlv(0x82, h.encode("ascii"))
    now = time.time()
    extensions = _seq(
        _ext("2.5.29.19", _seq(_tlv(0x01, b"\xff")), critical=True),  # CA:TRUE
        _ext("2.5.29.15", _bits(b"\x84", 2), critical=True),  # digitalSignature, keyCertSign
        _ext("2.5.29.37", _seq(_oid("1.3.6.1.5.5.7.3.1"))),  # serverAuth
        _ext("2.5.29.14", _tlv(0x04, key_id)),
        _ext("2.5.29.35", _seq(_tlv(0x80, key_id))),
        _ext("2.5.29.17", _seq(alt)),
    )
    tbs = _seq(
        _tlv(0xA0, _int(2)),
        _int(secrets.randbits(127) | 1),
        _ECDSA_SHA256,
        name,
        _seq(_time(now - 3600), _time(now + days * 86400)),
        name,
        _seq(_seq(_oid("1.2.840.10045.2.1"), _oid(_PRIME256V1)), _bits(point)),
        _tlv(0xA3, extensions),
    )
    r, s = _sign(d, tbs)
    cert = _seq(tbs, _ECDSA_SHA256, _bits(_seq(_int(r), _int(s))))
    key = _seq(
        _int(1),
        _tlv(0x04, d.to_bytes(32, "big")),
        _tlv(0xA0, _oid(_PRIME256V1)),
        _tlv(0xA1, _bits(point)),
    )
    return _pem("CERTIFICATE", cert), _pem("EC PRIVATE KEY", key)


def server_context(host: str) -> tuple[ssl.SSLContext, str]:
    """A server ``SSLContext`` with a fresh certificate for ``host``, and that cert's PEM."""
    hosts = ["localhost", "127.0.0.1", "::1"]
    if host and host not in ("0.0.0.0", "::"):  # wildcard binds are not names
        hosts.insert(0, host)
    cert_pem, key_pem = self_signed(hosts)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    with tempfile.TemporaryDirectory(prefix="simcluster-tls-") as tmp:
        cert_file, key_file = os.path.join(tmp, "tls.crt"), os.path.join(tmp, "tls.key")
        with open(cert_file, "w") as fh:
            fh.write(cert_pem)
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(key_pem)
        ctx.load_cert_chain(cert_file, key_file)
    return ctx, cert_pem
