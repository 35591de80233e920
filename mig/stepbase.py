"""What every coordinator step shares: the outcomes it returns, its context, settings.

A step handler takes a :class:`Ctx` and returns :class:`Done`, :class:`Wait` or
:class:`Fail`; ``mig.coordinator`` records the outcome and schedules the next call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from inventory.kube import KubeGateway

from .models import MigRequest, MigStep

CONFIG_LABEL = "nvidia.com/mig.config"
STATE_LABEL = "nvidia.com/mig.config.state"
PAUSED = "paused-for-mig-change"
# The operand labels mig-manager pauses while it reconfigures (mig-parted
# pkg/mig/reconfigure/reconfigure.go shutdownKubernetesGPUClients).
OPERAND_LABELS = tuple(
    f"nvidia.com/gpu.deploy.{op}"
    for op in ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm", "nvsm")
)
Step = MigStep.Name


def conf(name: str, default: Any) -> Any:
    """A ``MIG_*`` setting (portal/settings.py reads each from the environment)."""
    return getattr(settings, name, default)


def poll_seconds() -> float:
    return conf("MIG_POLL_SECONDS", 5.0)


@dataclass
class Done:
    detail: str
    skipped: bool = False
    # Runs inside the transaction that marks the step done (the grant step's writes).
    commit: Callable[[], None] | None = None


@dataclass
class Wait:
    detail: str
    countdown: float | None = None


@dataclass
class Fail:
    error: str
    # Keep the node cordoned whatever MIG_UNCORDON_ON_FAILURE says (a node whose device
    # plugin is paused must not take pods).
    keep_cordoned: str = ""


@dataclass
class Ctx:
    req: MigRequest
    step: MigStep
    now: Any
    _gw: KubeGateway | None = field(default=None, repr=False)

    @property
    def gw(self) -> KubeGateway:
        if self._gw is None:
            self._gw = KubeGateway(self.req.cluster)
        return self._gw

    @property
    def node(self) -> str:
        return self.req.node.name

    @property
    def elapsed(self) -> float:
        return (self.now - self.step.started_at).total_seconds()

    def save_data(self, **values: Any) -> None:
        """Persist facts before acting on them, so a retry after a crash sees them."""
        self.step.data.update(values)
        MigStep.objects.filter(pk=self.step.pk).update(data=self.step.data)


def node_labels(ctx: Ctx) -> dict[str, str]:
    return (ctx.gw.get_node(ctx.node).get("metadata") or {}).get("labels") or {}
