"""GPU emulation as controllers over the Kubernetes API (issue #20, section 3).

What no binary gives without GPUs, the way kwok drives nodes: GPU Feature Discovery labels,
``nvidia.com/gpu`` / ``nvidia.com/mig-*`` capacity, the GPU Operator's ClusterPolicy and its
``default-mig-parted-config``, mig-manager's label protocol and the device plugin's restart.
It reads and writes only through the API, so it runs against the real control plane of
``devstack/controlplane.py`` (and in principle any API server).

- :func:`load` creates a fleet (``simcluster/fleets/*.yaml``, expanded by
  :func:`simcluster.fleet.load_fleet`) through the API (:mod:`gpuemu.load`);
- :class:`Emulator` runs the operator, mig-manager and device-plugin controllers
  (:mod:`gpuemu.emulator`), with :class:`Options` from the fleet's ``gpuOperator`` key;
- ``python -m gpuemu --kubeconfig PATH --fleet FILE [--load-only]`` does both.
"""

from gpuemu.emulator import Emulator
from gpuemu.load import LoadReport, load
from gpuemu.migmanager import FAULT_ANNOTATION
from gpuemu.options import Options

__all__ = ["FAULT_ANNOTATION", "Emulator", "LoadReport", "Options", "load"]
