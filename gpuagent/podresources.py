"""Which pod holds which GPU or MIG device, for the report's ``processes[].pod``.

The kubelet answers this on its pod-resources socket
(``/var/lib/kubelet/pod-resources/kubelet.sock``), but the API is gRPC: speaking it needs
``grpcio`` plus generated stubs for ``k8s.io/kubelet/pkg/apis/podresources/v1``, roughly
10 MB of wheels in an image whose only other dependency is ``nvidia-ml-py``. The agent
therefore ships the interface and a no-op default; the portal attributes GPUs by the pod
requests it sees on the node (see docs/agent.md). A gRPC resolver can be dropped in behind
:class:`PodResolver` without touching the rest of the agent.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Protocol

log = logging.getLogger(__name__)

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"


class PodResolver(Protocol):
    """Maps device UUIDs (``GPU-...`` or ``MIG-...``) to ``"namespace/pod"``."""

    def pods_by_device(self) -> dict[str, str]:
        """Current assignments; an empty dict when unknown. Must not raise."""
        ...


class NullPodResolver:
    """No attribution: the portal falls back to pod requests on the node."""

    def pods_by_device(self) -> dict[str, str]:
        return {}


class StaticPodResolver:
    """A fixed mapping, for tests and the demo fleet."""

    def __init__(self, mapping: Mapping[str, str]) -> None:
        self.mapping = dict(mapping)

    def pods_by_device(self) -> dict[str, str]:
        return dict(self.mapping)


def default_resolver(socket_path: str | None = DEFAULT_SOCKET) -> PodResolver:
    """The resolver for this host; says once in the log why attribution is off."""
    if socket_path and os.path.exists(socket_path):
        log.info(
            "kubelet pod-resources socket found at %s, but this build has no gRPC client; "
            "the portal attributes GPUs by pod requests on the node",
            socket_path,
        )
    return NullPodResolver()
