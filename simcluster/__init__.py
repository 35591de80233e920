"""A simulated Kubernetes API server with GPU nodes, for the demo, tests and benchmarks.

It speaks enough of the Kubernetes REST API that the official ``kubernetes`` Python client
and ``kubectl`` work against it unchanged. Production code never imports this package.
"""

from simcluster.cluster import SimCluster
from simcluster.errors import ApiError
from simcluster.faults import Faults

__all__ = ["ApiError", "Faults", "SimCluster"]
