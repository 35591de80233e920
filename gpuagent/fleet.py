"""The demo's fake agent fleet: one real :class:`Agent` per node, each on a :class:`FakeNvml`.

All agents live in one process: a scheduler thread wakes each agent when its next step is
due and hands it to a small thread pool, so a slow portal delays posts but never piles them
up (an agent is never stepped twice at once). Each agent keeps only its sender's buffer; GPU
values are computed from the clock, so memory stays small for hundreds of nodes.

Tokens file (the lead's ``seed_demo`` writes it)::

    {"a100-00": {"token": "...", "product": "NVIDIA-A100-SXM4-80GB", "gpus": 8,
                 "mig": {"strategy": "mixed", "config": "all-1g.10gb"},
                 "patterns": ["busy", "idle", ...]}}

``mig`` takes a stock mig-parted config name (``config``: all-disabled, all-balanced,
all-<profile>) or an explicit ``layout`` (per GPU: ``{"3g.40gb": 2}`` or ``null``).
``patterns`` is optional; without it, patterns come from the node name (see
:func:`node_patterns`), with exactly one hot GPU in the fleet. ``seed_demo`` writes them
from the pods placed on each node (:func:`placement_patterns`, with ``"placed": true``), so
a GPU no pod holds reports no load. ``unhealthy`` (optional, a
count) makes that many of the node's last GPUs lost (NVML GpuIsLost), as on a node whose
device plugin marked devices unhealthy (allocatable < capacity).

:func:`scenarios` is the one place a node's fake GPUs are defined: the live fleet and the
history backfill (``gpuagent.fleet_history``) both use it, so the backfilled week and the
live reports describe the same GPUs (same UUIDs, patterns and phases).

**Exporter-only** (``exporter_only=True``; ``python -m gpuagent fleet --exporter-only``):
the Prometheus telemetry source's demo. Nothing is posted; each fake node serves its own
``/metrics`` (:class:`gpuagent.exporter.Exporter`, dcgm-exporter's names) on its own
local port, as a dcgm-exporter pod per node would, and :meth:`Fleet.write_targets` writes
the targets as a Prometheus ``file_sd`` file (``instance`` is the node name, so series
keep their identity when a restart moves a port). An optional pods mapping (``--pods``:
``{"node": {"0": "namespace/pod", "2/1": "ns/pod/container"}}``, keys a GPU index or
``gpu/MIG index``) stands in for the kubelet's pod-resources answer, giving the series
dcgm-exporter's ``namespace``/``pod``/``container`` labels.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuagent.agent import Agent
from gpuagent.fake_nvml import FakeNvml, mig_layout, product
from gpuagent.podresources import StaticPodResolver
from gpuagent.sender import Sender, reports_url

log = logging.getLogger(__name__)


def node_patterns(node: str, gpus: int, seed: int = 0) -> list[str]:
    """Believable per-GPU load for one node, stable across restarts.

    Roughly half the nodes run one whole-node training job; the rest mix training, idle
    allocations (the idle-quota insight's targets) and free GPUs.
    """
    rng = random.Random(f"{seed}/{node}")  # noqa: S311 - demo data
    kind = rng.random()
    if kind < 0.5:
        return ["busy"] * gpus
    if kind < 0.65:
        return ["idle"] * gpus
    out = []
    for _ in range(gpus):
        r = rng.random()
        out.append("busy" if r < 0.45 else "idle" if r < 0.75 else "free")
    return out


def placement_patterns(gpus: int, allocated: int, *, idle: bool = False) -> list[str]:
    """Per-GPU load that agrees with the pods placed on the node (the demo's fleet, issue
    #12): ``allocated`` GPUs work (``busy``, or ``idle`` for a node whose pods sit idle, the
    idle insight's example), the rest are ``free``, as the fleet page counts them."""
    allocated = max(0, min(gpus, allocated))
    return ["idle" if idle else "busy"] * allocated + ["free"] * (gpus - allocated)


def mig_for(spec: dict[str, Any], prod_name: str, gpus: int) -> dict[int, list[str]]:
    """The fake's ``mig`` scenario entry from a tokens-file ``mig`` object."""
    if not spec:
        return {}
    prod = product(prod_name)
    if "layout" in spec:
        out = {}
        for i, entry in enumerate(spec["layout"][:gpus]):
            if entry is not None:
                out[i] = [name for name, n in entry.items() for _ in range(int(n))]
        return out
    config = str(spec.get("config", "all-disabled"))
    try:
        return mig_layout(prod, config, gpus)
    except ValueError:
        # A custom mig-parted config the fake cannot know: simulate MIG off rather than
        # stop the whole fleet.
        log.warning(
            "fake fleet: unknown MIG config %r for %s; simulating MIG off", config, prod_name
        )
        return {}


def lost_indexes(cfg: dict[str, Any], gpus: int) -> list[int]:
    """The GPUs a tokens-file entry's ``unhealthy`` count makes lost: the node's last ones."""
    try:
        n = max(0, min(int(cfg.get("unhealthy") or 0), gpus))
    except (TypeError, ValueError):
        n = 0
    return list(range(gpus - n, gpus))


def scenarios(spec: dict[str, dict[str, Any]], seed: int = 0) -> list[tuple[str, dict, dict]]:
    """(node name, tokens-file entry, FakeNvml scenario) per node, in name order."""
    out = []
    hot_given = False
    for name in sorted(spec):
        cfg = spec[name]
        prod = cfg.get("product", "NVIDIA-A100-SXM4-80GB")
        gpus = int(cfg.get("gpus", 8))
        patterns = list(cfg.get("patterns") or node_patterns(name, gpus, seed))
        mig = mig_for(cfg.get("mig") or {}, prod, gpus)
        lost = lost_indexes(cfg, gpus)
        hot = min(3, gpus - 1)
        # The one hot GPU: on the first node whose GPU ``hot`` is busy and not chosen by
        # hand (patterns from placement, ``placed``, count as not chosen by hand).
        placed = bool(cfg.get("placed"))
        chosen = "patterns" in cfg and not placed
        works = not placed or (hot < len(patterns) and patterns[hot] == "busy")
        if not hot_given and not mig and gpus > 0 and not chosen and hot not in lost and works:
            patterns[hot] = "hot"
            hot_given = True
        scenario = {
            "product": prod,
            "gpus": gpus,
            "seed": f"{seed}/{name}",
            "patterns": patterns,
            "mig": mig,
            "driver_version": cfg.get("driver_version", "550.107.02"),
        }
        if lost:
            scenario["failures"] = {"lost": lost}
        out.append((name, cfg, scenario))
    return out


def device_pods(nvml: FakeNvml, pods: dict[str, str] | None) -> dict[str, str]:
    """``{device UUID: "namespace/pod[/container]"}`` from a ``--pods`` entry keyed by GPU
    index (``"0"``) or GPU and MIG index (``"2/1"``); keys naming no device are ignored."""
    out: dict[str, str] = {}
    for key, pod in (pods or {}).items():
        gpu, _, mig = str(key).partition("/")
        try:
            dev = nvml.gpus[int(gpu)]
            if mig:
                dev = (dev.mig or [])[int(mig)]
        except (ValueError, IndexError):
            log.warning("fake fleet: --pods key %r names no device; ignored", key)
            continue
        if isinstance(pod, str) and pod.count("/") in (1, 2):
            out[dev.uuid] = pod
    return out


def node_pods(spec_pods: dict[str, Any], name: str) -> dict[str, str]:
    """One node's entry of a ``--pods`` mapping (anything but a dict means none)."""
    entry = (spec_pods or {}).get(name)
    return entry if isinstance(entry, dict) else {}


@dataclass
class FleetNode:
    name: str
    agent: Agent
    due: float = 0.0
    busy: bool = False
    exporter: Any = None  # gpuagent.exporter.Exporter in exporter-only mode
    port: int = 0


class Fleet:
    """Runs the agents until :meth:`stop`."""

    def __init__(self, nodes: list[FleetNode], *, workers: int = 8) -> None:
        self.nodes = nodes
        self.workers = max(1, workers)
        self.stop_event = threading.Event()
        self._lock = threading.Lock()

    @classmethod
    def from_spec(
        cls,
        spec: dict[str, dict[str, Any]],
        portal: str | None,
        *,
        interval_s: float = 15,
        workers: int = 8,
        seed: int = 0,
        exporter_only: bool = False,
        metrics_base_port: int = 0,
        metrics_address: str = "127.0.0.1",
        pods: dict[str, Any] | None = None,
    ) -> Fleet:
        """The fleet of ``spec`` (tokens-file shape). ``exporter_only``: serve ``/metrics``
        per node on ``metrics_base_port + i`` (node ``i`` in name order; base 0: any free
        port) instead of posting to ``portal``. A port that cannot be bound raises OSError
        (after closing the exporters already serving), so the caller can say which."""
        if not exporter_only and not portal:
            raise ValueError("a portal URL is needed unless exporter_only")
        url = reports_url(portal) if portal else ""
        nodes: list[FleetNode] = []
        start = time.time()
        entries = scenarios(spec, seed)
        for k, (name, cfg, scenario) in enumerate(entries):
            try:
                nvml = FakeNvml(scenario)
            except ValueError as err:  # one odd node must not stop the whole fleet
                log.warning("fake fleet: skipping %s: %s", name, err)
                continue
            resolver = StaticPodResolver(device_pods(nvml, node_pods(pods or {}, name)))
            sender = exporter = None
            port = 0
            if exporter_only:
                from gpuagent.exporter import Exporter

                exporter = Exporter()
                try:
                    port = exporter.serve(metrics_base_port + k if metrics_base_port else 0,
                                          metrics_address)  # fmt: skip
                except OSError as err:
                    for n in nodes:
                        n.exporter.close()
                    want = metrics_base_port + k if metrics_base_port else 0
                    raise OSError(f"{name}: cannot serve /metrics on "
                                  f"{metrics_address}:{want}: {err}") from err  # fmt: skip
            else:
                token = str(cfg.get("token", ""))
                sender = Sender(url, lambda t=token: t, timeout_s=5)
            agent = Agent(nvml, name, sender, interval_s=interval_s, pods=resolver,
                          exporter=exporter)  # fmt: skip
            due = start + interval_s * k / max(1, len(entries))
            if exporter_only:
                due = start  # a scrape right after start must find a snapshot
            nodes.append(FleetNode(name, agent, due=due, exporter=exporter, port=port))
        return cls(nodes, workers=workers)

    def targets(self, address: str = "127.0.0.1") -> list[dict[str, Any]]:
        """The exporters as Prometheus ``file_sd`` entries, one per node (name order).

        ``instance`` is set to the node name: a port can change between runs (the base
        port taken, a restart), the node cannot, so its series and any backfilled history
        stay one series. ``address`` is the host Prometheus connects to."""
        return [
            {"targets": [f"{address}:{n.port}"], "labels": {"instance": n.name}}
            for n in self.nodes
            if n.exporter is not None
        ]

    def write_targets(self, path: str | Path, address: str = "127.0.0.1") -> None:
        """Write :meth:`targets` to ``path`` atomically (Prometheus re-reads ``file_sd``
        files when they change, and a reader must never see half a file)."""
        path = Path(path)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.targets(address), indent=1) + "\n")
        os.replace(tmp, path)

    @classmethod
    def from_file(cls, path: str | Path, portal: str | None, **kwargs: Any) -> Fleet:
        return cls.from_spec(json.loads(Path(path).read_text()), portal, **kwargs)

    def stop(self, *_: Any) -> None:
        self.stop_event.set()

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)

    def _step(self, node: FleetNode) -> None:
        try:
            delay = node.agent.step()
        except Exception:  # one broken fake node must not stop the demo
            log.exception("fake agent %s failed a step", node.name)
            delay = node.agent.interval_s
        with self._lock:
            node.due = time.time() + delay
            node.busy = False

    def run(self, tick_s: float = 0.5) -> None:
        mode = "serving /metrics only" if any(n.exporter for n in self.nodes) else "posting"
        log.info("fake agent fleet: %d node(s), %d worker(s), %s", len(self.nodes),
                 self.workers, mode)  # fmt: skip
        with ThreadPoolExecutor(self.workers, thread_name_prefix="fake-agent") as pool:
            while not self.stop_event.is_set():
                now = time.time()
                with self._lock:
                    ready = [n for n in self.nodes if not n.busy and n.due <= now]
                    for n in ready:
                        n.busy = True
                for n in ready:
                    pool.submit(self._step, n)
                self.stop_event.wait(tick_s)
        for n in self.nodes:
            n.agent.reader.close()
            if n.exporter is not None:
                n.exporter.close()
        log.info("fake agent fleet stopped")
