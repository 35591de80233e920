"""Server-rendered sparklines: SVG polylines from 5-minute points (no JavaScript).

A gap in the data (the GPU did not report) breaks the line instead of bridging it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

WIDTH = 288  # one unit per 5-minute point over 24 h
HEIGHT = 100


@dataclass
class Sparkline:
    segments: list[str]  # "x,y x,y ..." per contiguous run of data
    low: float | None
    mean: float | None
    high: float | None
    last: float | None
    points: int

    @property
    def empty(self) -> bool:
        return self.points == 0


def sparkline(values: dict[datetime, float], start: datetime, step: timedelta, slots: int,
              top: float = 100.0) -> Sparkline:  # fmt: skip
    """``values`` keyed by bucket start; y scaled to 0..``top``."""
    segments: list[list[str]] = []
    run: list[str] = []
    seen = []
    for i in range(slots):
        v = values.get(start + i * step)
        if v is None:
            if run:
                segments.append(run)
                run = []
            continue
        seen.append(v)
        x = i * WIDTH / max(slots - 1, 1)
        y = HEIGHT - min(max(v, 0.0), top) / top * HEIGHT
        run.append(f"{x:.1f},{y:.1f}")
    if run:
        segments.append(run)
    # A single point would draw nothing: widen it to a short stub.
    lines = [" ".join(r if len(r) > 1 else [r[0], _nudge(r[0])]) for r in segments]
    return Sparkline(
        segments=lines,
        low=min(seen) if seen else None,
        mean=sum(seen) / len(seen) if seen else None,
        high=max(seen) if seen else None,
        last=seen[-1] if seen else None,
        points=len(seen),
    )


def _nudge(point: str) -> str:
    x, y = point.split(",")
    return f"{float(x) + 1:.1f},{y}"
