"""Recorded history for a real Prometheus: OpenMetrics text turned into TSDB blocks.

A Prometheus that scrapes an exporter only has samples from the moment it started. The
demo (a week of history), the benchmarks (5,000 nodes) and the tests (hours of idle or busy
GPUs) need samples in the past, so they write them as OpenMetrics text with timestamps and
let ``promtool tsdb create-blocks-from openmetrics`` (Debian package ``prometheus``) build
TSDB blocks in the data folder *before* Prometheus starts on it: Prometheus' documented
backfilling path (prometheus/prometheus ``docs/storage.md``, "Backfilling from OpenMetrics
format"), so the server answers range queries over them exactly as it would over scraped
samples.

The format rules promtool enforces: the samples of one metric family are contiguous, each
family has a ``# TYPE`` line, the samples of one series are in time order, timestamps are
in seconds, and the text ends with ``# EOF``.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

Point = tuple[float, float]  # (unix seconds, value)


@dataclass
class Family:
    name: str
    help: str
    series: Iterable[tuple[dict[str, str], Iterable[Point]]]
    type: str = "gauge"


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def labels_text(labels: dict[str, str]) -> str:
    inner = ",".join(f'{k}="{_escape(str(v))}"' for k, v in sorted(labels.items()))
    return "{" + inner + "}" if inner else ""


def write_openmetrics(path: Path, families: Iterable[Family]) -> int:
    """Write ``families`` as OpenMetrics text to ``path``; returns the number of samples."""
    count = 0
    with open(path, "w", encoding="utf-8", buffering=1 << 20) as out:
        for fam in families:
            out.write(f"# HELP {fam.name} {fam.help}\n# TYPE {fam.name} {fam.type}\n")
            for labels, points in fam.series:
                head = fam.name + labels_text(labels)
                # repr: exact (``:g`` would make a Unix time such as 1764630000 1.76463e+09)
                lines = [f"{head} {float(v)!r} {t:.3f}\n" for t, v in points]
                out.writelines(lines)
                count += len(lines)
        out.write("# EOF\n")
    return count


def create_blocks(
    openmetrics: Path, data_dir: Path, promtool: str | None = None, max_block_hours: int = 744
) -> None:
    """Build TSDB blocks from ``openmetrics`` into ``data_dir`` (Prometheus' data folder).

    promtool re-reads the whole input once per block window, 2 hours by default: a week of
    the demo fleet (1.5 M samples, 300 MB of text) took 84 passes and over two minutes, one
    pass with ``--max-block-duration=744h`` takes 8 s. promtool rounds the duration down to
    a compaction range (2h x 3^n), so the blocks are ones Prometheus would compact anyway."""
    program = promtool or shutil.which("promtool")
    if program is None:
        raise FileNotFoundError("promtool is not installed (Debian package prometheus)")
    data_dir.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [program, "tsdb", "create-blocks-from", "openmetrics", "-q",
         f"--max-block-duration={int(max_block_hours)}h", str(openmetrics), str(data_dir)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"promtool create-blocks-from failed: {done.stderr.strip()[-2000:]}")
