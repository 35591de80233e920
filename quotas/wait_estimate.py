"""An estimated wait for something that waits for GPUs, with its basis, or why none can be
given (issue #21 section 4; DESIGN.md: "not measured" is never shown as a figure).

What frees the capacity a waiting job needs is known only in part: a grant of the team
that starts later (the portal knows when), a grant that ends (it takes quota away), and
the pods that hold the GPUs now ending (nobody knows when). For the last, the portal keeps
how long pods ran (inventory/podruns.py): a pod that has run for ``a`` is expected to run
for the median of ``d - a`` over the ended runs that lasted longer than ``a`` (the median
residual run time). A pod that has run longer than any recorded run has no expected end.

:func:`estimate` walks these events in time order from what is free now and answers the
first time the need is met. It gives no estimate on fewer than :data:`MIN_RUNS` ended runs
(and no grant event that meets the need), or when the events never meet it. Pure: the
caller loads the history (quotas/waiting_service.py).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from .decision_time import duration_text

MIN_RUNS = 5
HISTORY = timedelta(days=30)


@dataclass(frozen=True)
class Estimate:
    at: datetime | None  # None: no estimate
    text: str  # the estimate and its basis, or why there is none


def when_text(at: datetime, now: datetime) -> str:
    return f"{at.astimezone(UTC):%Y-%m-%d %H:%M} UTC (in {duration_text(at - now)})"


def expected_end(started: datetime, durations: list[float], now: datetime) -> datetime | None:
    """When a pod that started at ``started`` is expected to end, from ``durations``
    (seconds) of ended runs: now + the median residual run time; None when it has run
    longer than every recorded run."""
    age = (now - started).total_seconds()
    longer = [d - age for d in durations if d > age]
    if not longer:
        return None
    return now + timedelta(seconds=statistics.median(longer))


def estimate(
    need: int,
    free_now: int,
    holders: list[tuple[int, datetime]],
    durations: list[float],
    grants: list[tuple[datetime, int]],
    now: datetime,
    what: str,
    holding: str = "",
) -> Estimate:
    """When ``need`` units are free: from ``free_now``, the ``holders`` (amount, started at)
    ending as ``durations`` (seconds, ended GPU pods of ``what``: "ml-vision", "H100 on
    research") suggest, and ``grants`` (when, +amount as one starts / -amount as one
    ends). ``holding`` names where the holders are ("ml-vision", "node h100-01")."""
    holding = holding or what
    if free_now >= need:
        return Estimate(
            now, f"It may start at the next try: {free_now} free now where it can run, "
            f"{need} needed (the cluster's message may be older than that).",
        )  # fmt: skip
    events: list[tuple[datetime, int, str]] = [(t, d, "grant") for t, d in grants if t > now]
    history = len(durations) >= MIN_RUNS
    if history:
        for amount, started in holders:
            end = expected_end(started, durations, now)
            if end is not None:
                events.append((end, amount, "pod"))
    available = free_now
    for at, delta, source in sorted(events, key=lambda e: e[0]):
        available += delta
        if available >= need:
            if source == "grant":
                return Estimate(at, f"Estimated start: {when_text(at, now)}, when a grant of the "
                                    "team begins.")  # fmt: skip
            median = duration_text(timedelta(seconds=statistics.median(durations)))
            return Estimate(
                at,
                f"Estimated start: around {when_text(at, now)}, when pods that hold them now are "
                f"expected to end ({len(durations)} GPU pods of {what} ended in the last "
                f"{HISTORY.days} days, after a median of {median}).",
            )
    if not holders and not any(delta > 0 for _, delta, _ in events):
        return Estimate(
            None,
            f"No estimated wait: no pod of {holding} holds any now and no grant of the team "
            "starts later, so nothing that ends will free them.",
        )
    if not history:
        runs = f"{len(durations)} pod{'s' if len(durations) != 1 else ''}"
        return Estimate(
            None,
            f"No estimated wait: {runs} of {what} ended in the last {HISTORY.days} days (an "
            f"estimate needs {MIN_RUNS}), and no grant of the team starts that would fit it.",
        )
    return Estimate(
        None,
        f"No estimated wait: even when the pods that hold them end as pods of {what} used "
        f"to, {need} do not come free (a pod that has run longer than any recorded run has "
        "no expected end).",
    )
