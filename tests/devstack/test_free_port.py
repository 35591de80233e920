"""The control plane's ports come from below the kernel's ephemeral range, so an outgoing
connection cannot take one between the pick and the component's bind (Kueue died with
"bind: address already in use" that way once, and a test worker's plane with it)."""

from __future__ import annotations

import socket

from devstack.components import PORT_WINDOW, _ephemeral_range, free_port


def test_free_ports_are_below_the_ephemeral_range_and_bindable():
    low, _ = _ephemeral_range()
    ports = {free_port() for _ in range(20)}
    assert all(max(1024, low - PORT_WINDOW) <= p < low for p in ports)
    assert len(ports) > 1  # random within the window, not one fixed port
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
