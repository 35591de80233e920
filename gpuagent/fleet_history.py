"""The demo fleet's past: the reports its agents would have sent over the last days.

A fresh demo has no history, so every 24-hour chart would start with one point. Fake GPU
values are pure functions of (scenario, clock), so the reports of any past instant can be
computed exactly: :func:`past_reports` runs the same :class:`Agent` on the same
:class:`FakeNvml` scenarios as the live fleet (``gpuagent.fleet.scenarios``), so UUIDs,
names, MIG devices, processes and topology are what the live agents report, and yields
report bodies (``docs/agent-report.md``) for each past instant. The portal's
``backfill_telemetry`` command stores them through its ingest code.

A full NVML read costs ~15 ms (topology, MIG, processes: hundreds of calls), too much
for a week of a fleet at demo start. So each node is read in full once per health phase
(before and after its unhealthy GPUs were lost), and for each instant only the values
that change with time (utilisation, memory, temperature, power; a whole GPU's process
memory) are taken from the fake's value function at that instant: the same numbers NVML
calls would return (MIG GPUs' values do not depend on time in the fake).

No Django import: this stays part of the agent package.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from gpuagent.agent import Agent
from gpuagent.fake_nvml import FakeNvml
from gpuagent.fleet import scenarios
from gpuagent.report import iso_timestamp


class _MemoFake(FakeNvml):
    """FakeNvml with its deterministic noise memoised (a week has many repeats)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._memo: dict[tuple, float] = {}

    def _noise(self, gpu: int, what: str, bucket: int) -> float:
        key = (gpu, what, bucket)
        value = self._memo.get(key)
        if value is None:
            value = self._memo[key] = super()._noise(gpu, what, bucket)
        return value


def _at(template: dict[str, Any], nvml: FakeNvml, epoch: float) -> dict[str, Any]:
    """``template`` (a full report) with the time-dependent values of ``epoch``."""
    gpus = []
    for g in template["gpus"]:
        g = dict(g)
        if not g.get("lost") and not g.get("mig_devices") and g.get("index") is not None:
            v = nvml._values(nvml.nvmlDeviceGetHandleByIndex(g["index"]))
            fresh = {
                "memory_used_mib": int(v["memory_used_mib"]),
                "utilization_gpu_pct": int(v["util"]),
                "utilization_memory_pct": int(v["mem_util"]),
                "temperature_c": int(v["temp"]),
                "power_w": round(int(v["power_w"] * 1000) / 1000, 1),
            }
            g.update({k: val for k, val in fresh.items() if g.get(k) is not None})
            if len(g.get("processes") or []) == 1:
                g["processes"] = [
                    {**g["processes"][0], "used_memory_mib": max(0, fresh["memory_used_mib"] - 500)}
                ]
        gpus.append(g)
    return {**template, "timestamp": iso_timestamp(epoch), "gpus": gpus}


def past_reports(
    spec: dict[str, dict[str, Any]],
    instants: Iterable[float],
    *,
    seed: int = 0,
    lost_since: float | None = None,
    skip: Callable[[str, float], bool] | None = None,
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(node name, report) for each node and each of ``instants`` (epoch seconds, rising).

    A node's ``unhealthy`` GPUs read healthy before ``lost_since`` (None: lost from the
    start) and lost after, so the portal learns their UUIDs, as from a GPU that fell off
    the bus some time ago. ``skip(name, epoch)`` -> True leaves an instant out (already
    stored).
    """
    instants = list(instants)
    nvml_log = logging.getLogger("gpuagent.nvml")
    level = nvml_log.level
    nvml_log.setLevel(logging.CRITICAL)  # "GPU 7 is lost" (ERROR) per past report is noise
    try:
        for name, _cfg, scenario in scenarios(spec, seed):
            yield from _node(name, scenario, instants, lost_since, skip)
    finally:
        nvml_log.setLevel(level)


def _node(name, scenario, instants, lost_since, skip) -> Iterator[tuple[str, dict[str, Any]]]:
    lost = set(scenario.get("failures", {}).get("lost", []))
    staged = bool(lost) and lost_since is not None
    now = [instants[0] if instants else 0.0]
    clock = now.__getitem__
    try:
        nvml = _MemoFake(
            {k: v for k, v in scenario.items() if k != "failures"} if staged else scenario,
            clock=lambda clock=clock: clock(0),
        )
    except ValueError:  # the live fleet skips such a node too
        return
    agent = Agent(nvml, name, None, clock=lambda clock=clock: clock(0))
    if agent.ensure_nvml() is not None:
        return
    template = None
    phase = None
    for t in instants:
        if skip is not None and skip(name, t):
            continue
        now[0] = t
        gone = staged and t >= lost_since
        if gone != phase:  # a full read at the start and when the GPUs are lost
            phase = gone
            if gone:
                nvml.lost = lost
            template = agent.collect()
        if template is not None:
            yield name, _at(template, nvml, t)
    agent.reader.close()
