"""``gpuemu.Emulator``: the GPU Operator, mig-manager, GFD and the device plugin as controllers.

Everything goes through the ordinary API, as kwok drives nodes: three informers
(:mod:`gpuemu.watch`) feed the operator (:mod:`gpuemu.operator`), the mig-manager agents
(:mod:`gpuemu.migmanager`) and the device plugin (:mod:`gpuemu.deviceplugin`); writes are
label/annotation merge patches, ``nodes/status`` patches, ConfigMap creates/updates and pod
lists/deletes. Nothing is kept that the cluster cannot give back, except what the hardware
would hold (each MIG node's applied layout, learnt from its labels when first seen) and the
ConfigMap history the kubelet's volume sync lags behind.

::

    emu = Emulator(api, Options.from_fleet("simcluster/fleets/demo.yaml", mig_step_s=0.05))
    emu.start()          # returns once the informers have listed
    ...
    emu.wait_settled()   # nothing it has seen is still being worked on
    emu.stop()
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from devstack.kubeapi import KubeAPI
from gpuemu.deviceplugin import DevicePlugin
from gpuemu.dra import DraDriver
from gpuemu.migmanager import MigManager
from gpuemu.operator import Operator
from gpuemu.options import Options
from gpuemu.watch import Event, Informer, WorkQueue
from simcluster.fleet import Fleet

log = logging.getLogger("gpuemu")


class Emulator:
    """The GPU Operator's controllers against one API server (module docstring)."""

    def __init__(
        self,
        api: KubeAPI,
        options: Options | Fleet | dict[str, Any] | str | Path | None = None,
        *,
        workers: int = 2,
    ) -> None:
        self.api = api
        self.options = options if isinstance(options, Options) else Options.from_fleet(options)
        self.queue = WorkQueue(workers=workers, name="gpuemu")
        self.operator = Operator(self)
        self.mig = MigManager(self)
        self.device_plugin = DevicePlugin(self)
        self.dra = DraDriver(self) if self.options.dra else None
        timeout = self.options.watch_timeout_s
        # The ClusterPolicy CRD may come later: the informer lists nothing until it does.
        self.policies = Informer(api, "clusterpolicies", self._on_policy, watch_timeout_s=timeout)
        self.configmaps = Informer(
            api,
            "configmaps",
            self._on_configmap,
            namespace=self.options.namespace,
            watch_timeout_s=timeout,
        )
        self.nodes = Informer(api, "nodes", self._on_node, watch_timeout_s=timeout)
        self._informers: list[Informer] = []
        self._started = False

    # ------------------------------------------------------------- lifecycle
    def start(self, timeout: float = 60.0) -> Emulator:
        """Start the informers (ClusterPolicies and ConfigMaps listed before the nodes, so
        nodes are judged against the settings in force) and the workers."""
        self.queue.start()
        first = [self.configmaps, self.policies]
        for informer in first:
            informer.start()
            self._informers.append(informer)
        deadline = time.monotonic() + timeout
        for informer in first:
            if not informer.wait_synced(max(0.0, deadline - time.monotonic())):
                raise TimeoutError(f"{informer.name} did not list within {timeout:.0f} s")
        self.nodes.start()
        self._informers.append(self.nodes)
        if not self.nodes.wait_synced(max(0.0, deadline - time.monotonic())):
            raise TimeoutError(f"{self.nodes.name} did not list within {timeout:.0f} s")
        self._started = True
        log.info(
            "started: %d nodes (%d with mig-manager), operator namespace %s, ClusterPolicy %s",
            len(self.nodes.items()),
            len(self.mig.physical),
            self.options.namespace,
            "present" if self.operator.installed() else "absent",
        )
        return self

    def stop(self) -> None:
        self.mig.stop()
        for informer in self._informers:
            informer.stop()
        self.queue.stop()
        self._started = False

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------- settling
    def idle(self) -> bool:
        """Everything seen has been handled: informers listed and not delivering, no queued
        or delayed work (device plugin restarts included), no mig-manager run in progress."""
        return (
            self._started
            and all(i.has_synced() and not i.busy() for i in self._informers)
            and self.queue.idle()
            and self.mig.idle()
        )

    def wait_settled(self, timeout: float = 30.0, quiet_s: float = 0.1) -> None:
        """Return once :meth:`idle` held for ``quiet_s``; TimeoutError after ``timeout``.

        It cannot know about writes the watches have not delivered yet: poll for the
        outcome you expect (``devstack.kubeapi.wait_for``) rather than only settling.
        """
        deadline = time.monotonic() + timeout
        since: float | None = None
        while True:
            now = time.monotonic()
            if self.idle():
                since = since if since is not None else now
                if now - since >= quiet_s:
                    return
            else:
                since = None
            if now >= deadline:
                raise TimeoutError(f"the GPU emulation did not settle within {timeout:.0f} s")
            time.sleep(0.02)

    # ---------------------------------------------------------------- events
    def _on_node(self, ev: Event) -> None:
        self.operator.on_node(ev)
        self.mig.on_node(ev)
        self.device_plugin.on_node(ev)
        if self.dra is not None:
            self.dra.on_node(ev)

    def _on_configmap(self, ev: Event) -> None:
        self.operator.on_configmap(ev)

    def _on_policy(self, ev: Event) -> None:
        self.operator.on_policy(ev)
