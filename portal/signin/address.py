"""The client's address, for throttles and lockouts.

``X-Forwarded-For`` is a header any client can send, so it is believed only when the
request comes from a proxy listed in ``TRUSTED_PROXIES`` (addresses or CIDR networks; empty,
the default, trusts none and uses ``REMOTE_ADDR``). Behind trusted proxies the client is the
right-most address in the header that is not itself a trusted proxy: each proxy appends the
address it received the request from, so everything left of that is what the client wrote.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache

from django.conf import settings

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@lru_cache(maxsize=8)
def trusted_networks(spec: tuple[str, ...]) -> tuple[Network, ...]:
    """``TRUSTED_PROXIES`` parsed; ValueError names a bad entry (checks.py reports it)."""
    nets = []
    for entry in spec:
        entry = entry.strip()
        if not entry:
            continue
        try:
            nets.append(ipaddress.ip_network(entry, strict=False))
        except ValueError as err:
            raise ValueError(f"TRUSTED_PROXIES: {entry!r} is not an address or network") from err
    return tuple(nets)


def _parse(value: str) -> Address | None:
    try:
        addr = ipaddress.ip_address(value.strip())
    except ValueError:
        return None
    # An IPv4 client seen through an IPv6 socket (::ffff:a.b.c.d) is the IPv4 client.
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped:
        return addr.ipv4_mapped
    return addr


def client_ip(request) -> str | None:
    """The address that throttles and lockouts count against (None when there is none)."""
    meta = request.META
    remote = _parse(meta.get("REMOTE_ADDR") or "")
    nets = trusted_networks(tuple(getattr(settings, "TRUSTED_PROXIES", ()) or ()))
    if remote is None or not nets or not any(remote in n for n in nets):
        return str(remote) if remote is not None else None
    client = remote
    for hop in reversed(meta.get("HTTP_X_FORWARDED_FOR", "").split(",")):
        addr = _parse(hop)
        if addr is None:
            break  # garbage the client wrote: the last proxy's word stands
        client = addr
        if not any(addr in n for n in nets):
            break
    return str(client)
