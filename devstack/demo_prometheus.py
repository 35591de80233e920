"""``TELEMETRY_SOURCE=prometheus make demo``: the demo cluster's telemetry from a real Prometheus.

With the ``prometheus`` source the fake node fleet posts nothing to the portal. Each fake
node serves its own ``/metrics`` with dcgm-exporter's names (``python -m gpuagent fleet
--exporter-only``, one port per node, as one dcgm-exporter pod per node would), a real
Prometheus (Debian package ``prometheus``) scrapes them through a ``file_sd`` targets file
the fleet writes, and the demo cluster gets a ``PrometheusSource`` row, so every telemetry
page reads that Prometheus exactly as it would a production one.

A fresh Prometheus knows nothing before its first scrape, so before it first starts the
demo writes the past week (``DEMO_BACKFILL_DAYS``) as TSDB blocks (``devstack.promhistory``,
promtool's documented backfilling): the reports the agents would have sent
(``gpuagent.fleet_history.past_reports``, the same fake GPUs as the live fleet) rendered by
the live exporter's own collector (``gpuagent.exporter.DcgmCollector``), plus the ``job`` and
``instance`` labels the scrape adds. History and live samples are therefore one series per
GPU: same labels, same values at the same instant. Run once per data folder: a Prometheus
that has run keeps its own history (a stopped demo leaves a gap, as a stopped Prometheus
would).

Imported by ``devstack.demo`` with the standard library only (it runs before the venv's
packages are needed); the backfill runs as its own child process (``python -m
devstack.demo_prometheus backfill ...``) under the supervisor, so Ctrl-C interrupts it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import urllib.error
import urllib.request
from array import array
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

SOURCES = ("agent", "prometheus")
JOB = "dcgm-exporter"
SCRAPE_INTERVAL = "15s"
DEFAULT_PROM_PORT = 9090
DEFAULT_EXPORTER_BASE_PORT = 19400
# The week at about 5-minute resolution (what a week or 24-hour chart draws), the last hours
# at 1 minute (the live scrape's neighbourhood: the 1-hour views and idle windows). 290 s,
# not 300: the fake GPUs dip for one minute in twenty, and a grid of whole 5 minutes would
# hit that minute on every fourth sample for some GPUs and never for others (aliasing); 290 s
# walks through all twenty minutes and stays inside Prometheus' 5-minute lookback.
COARSE_STEP = 290.0
FINE_STEP = 60.0
FINE_HOURS = 3.0
# A GPU the device plugin marks unhealthy fell off the bus this long before the demo start
# (telemetry.backfill.LOST_AGO for the agent source: both sources tell the same story).
LOST_AGO_S = 2 * 86400.0


class PromDemoError(RuntimeError):
    """A precondition of the Prometheus demo failed; the message says what to change."""


def telemetry_source(environ: Mapping[str, str] = os.environ) -> str:
    """``TELEMETRY_SOURCE``: ``agent`` (the default, also when empty) or ``prometheus``."""
    raw = environ.get("TELEMETRY_SOURCE", "")
    value = raw.strip().lower() or "agent"
    if value not in SOURCES:
        raise PromDemoError(
            f"TELEMETRY_SOURCE={raw!r} is not a telemetry source: use "
            f"TELEMETRY_SOURCE=agent (the default) or TELEMETRY_SOURCE=prometheus"
        )
    return value


def programs(log: Callable[[str], None]) -> tuple[str, str]:
    """``prometheus`` and ``promtool``; installed from Debian when root, else a clear error."""
    from .prereqs import install_missing, missing_programs

    wanted = {"prometheus": "prometheus", "promtool": "prometheus"}
    if missing_programs(wanted) and os.geteuid() == 0 and shutil.which("apt-get"):
        install_missing(log, wanted)  # as devstack/prereqs.py does for the tests
    if missing_programs(wanted):
        raise PromDemoError(
            "TELEMETRY_SOURCE=prometheus needs the programs prometheus and promtool: "
            "install the Debian package prometheus (sudo apt-get install prometheus)"
        )
    return shutil.which("prometheus") or "prometheus", shutil.which("promtool") or "promtool"


# -- the history ------------------------------------------------------------------------------


def instants(now: float, days: float) -> list[float]:
    """Past sample times, rising and before ``now``: every 290 s over ``days``, every
    minute over the last :data:`FINE_HOURS` (aligned, so a restart computes the same grid)."""
    start = now - days * 86400.0
    fine_from = max(start, now - FINE_HOURS * 3600.0)
    out = []
    t = (start // COARSE_STEP + 1) * COARSE_STEP
    while t < fine_from:
        out.append(t)
        t += COARSE_STEP
    t = (fine_from // FINE_STEP + 1) * FINE_STEP
    while t < now:
        out.append(t)
        t += FINE_STEP
    return out


class _Series:
    __slots__ = ("labels", "times", "values")

    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = labels
        self.times = array("d")
        self.values = array("d")


def history(
    spec: dict[str, dict[str, Any]],
    times: Iterable[float],
    *,
    seed: int = 0,
    lost_since: float | None = None,
    pods: Mapping[str, Any] | None = None,
    job: str = JOB,
) -> dict[str, tuple[str, dict[tuple, _Series]]]:
    """``{metric: (help, {series key: series})}``: what a Prometheus scraping the live
    fleet's exporters (``job``, ``instance`` = node name, ``honor_labels``) would hold at
    ``times``. Each past report goes through the live exporter's collector, so the labels
    (pod and MIG instance labels included) and values are the exporter's own."""
    from gpuagent.exporter import DcgmCollector, Snapshot, gpu_instance_ids
    from gpuagent.fake_nvml import FakeNvml
    from gpuagent.fleet import device_pods, node_pods, scenarios
    from gpuagent.fleet_history import past_reports

    fakes = {}
    for name, _cfg, scenario in scenarios(spec, seed):
        try:
            fake = FakeNvml({k: v for k, v in scenario.items() if k != "failures"})
        except ValueError:  # the live fleet skips such a node too
            continue
        fake.nvmlInit()  # healthy, to learn every MIG instance id once
        fakes[name] = fake
    out: dict[str, tuple[str, dict[tuple, _Series]]] = {}
    snapshot = Snapshot()
    collector = DcgmCollector(snapshot)
    per_node: dict[str, tuple[dict[str, str], dict[str, int]]] = {}
    for name, report in past_reports(spec, times, seed=seed, lost_since=lost_since):
        fake = fakes.get(name)
        if fake is None:
            continue
        if name not in per_node:
            per_node[name] = (device_pods(fake, node_pods(dict(pods or {}), name)),
                              gpu_instance_ids(fake, report))  # fmt: skip
        dev_pods, ids = per_node[name]
        epoch = report_epoch(report)
        snapshot.update(name, report, timestamp=epoch, pods=dev_pods, instance_ids=ids)
        scrape = {"job": job, "instance": name}
        for family in collector.collect():
            series = out.setdefault(family.name, (family.documentation, {}))[1]
            for sample in family.samples:
                # The collector builds a series' labels in the same order every time.
                key = (name, *sample.labels.items())
                s = series.get(key)
                if s is None:
                    s = series[key] = _Series({**sample.labels, **scrape})
                s.times.append(epoch)
                s.values.append(sample.value)
    for fake in fakes.values():
        fake.nvmlShutdown()
    return out


def report_epoch(report: Mapping[str, Any]) -> float:
    """A report's ``timestamp`` (``2026-11-30T14:00:00Z``) as epoch seconds."""
    from datetime import datetime

    return datetime.fromisoformat(str(report["timestamp"]).replace("Z", "+00:00")).timestamp()


def families(series_by_metric: dict[str, tuple[str, dict[tuple, _Series]]]) -> list[Any]:
    """:class:`devstack.promhistory.Family` objects for :func:`history`'s answer."""
    from .promhistory import Family

    out = []
    for name, (help_, series) in sorted(series_by_metric.items()):
        points = [(s.labels, zip(s.times, s.values, strict=True)) for s in series.values()]
        out.append(Family(name, help_, points))
    return out


def has_blocks(tsdb: Path) -> bool:
    """True when the Prometheus data folder holds TSDB blocks (a backfill or its own)."""
    return tsdb.is_dir() and any((d / "meta.json").exists() for d in tsdb.iterdir() if d.is_dir())


def backfill(
    spec: dict[str, dict[str, Any]],
    tsdb: Path,
    *,
    days: float,
    now: float | None = None,
    seed: int = 0,
    pods: Mapping[str, Any] | None = None,
    promtool: str | None = None,
    log: Callable[[str], None] = print,
) -> int:
    """Write ``days`` of the fleet's history as TSDB blocks into ``tsdb``; the samples.

    Skipped (0) when ``tsdb`` already holds blocks. The blocks are built in a scratch
    folder next to ``tsdb`` and moved in only when promtool succeeded, so an interrupted
    backfill leaves nothing half-made and the next start tries again."""
    from .promhistory import create_blocks, write_openmetrics

    if days <= 0:
        return 0
    if has_blocks(tsdb):
        log(f"Prometheus history: {tsdb} already holds blocks; no backfill")
        return 0
    began = time.monotonic()
    now = time.time() if now is None else now
    times = instants(now, days)
    lost_since = now - min(LOST_AGO_S, days * 86400.0 / 2)
    data = history(spec, times, seed=seed, lost_since=lost_since, pods=pods)
    count = sum(len(series) for _, series in data.values())
    scratch = tsdb.parent / f".{tsdb.name}-backfill"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    try:
        text = scratch / "history.om"
        samples = write_openmetrics(text, families(data))
        del data
        blocks = scratch / "blocks"
        create_blocks(text, blocks, promtool)
        tsdb.mkdir(parents=True, exist_ok=True)
        for block in sorted(blocks.iterdir()):
            if (block / "meta.json").exists():
                os.replace(block, tsdb / block.name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    log(f"Prometheus history: {samples} samples of {count} series, {len(spec)} node(s), "
        f"{days:g} day(s) into {tsdb}, {time.monotonic() - began:.1f} s")  # fmt: skip
    return samples


# -- the server -------------------------------------------------------------------------------


def write_config(
    path: Path, targets_file: Path, job: str = JOB, scrape_interval: str = SCRAPE_INTERVAL
) -> None:
    """Prometheus' configuration: every fake exporter of ``targets_file`` (``file_sd``,
    re-read when the fleet rewrites it), every 15 s, exporter labels kept (``honor_labels``,
    as for dcgm-exporter behind a ServiceMonitor). JSON is YAML: no YAML writer needed."""
    config = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "scrape_configs": [
            {
                "job_name": job,
                "honor_labels": True,
                "metrics_path": "/metrics",
                "file_sd_configs": [{"files": [str(targets_file)], "refresh_interval": "30s"}],
            }
        ],
    }
    path.write_text(json.dumps(config, indent=1) + "\n")


def server_command(program: str, config: Path, tsdb: Path, port: int, days: float) -> list[str]:
    """``prometheus`` on 127.0.0.1 only, keeping at least the backfilled history."""
    retention = max(15, int(days) + 2)  # Prometheus' default is 15 days
    return [
        program,
        f"--config.file={config}",
        f"--storage.tsdb.path={tsdb}",
        f"--web.listen-address=127.0.0.1:{port}",
        f"--storage.tsdb.retention.time={retention}d",
        "--log.level=warn",  # its start-up chatter would bury the demo's own lines
    ]


def ready(url: str) -> bool:
    """Prometheus answers ``/-/ready`` with 200 once its TSDB is open."""
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as resp:  # noqa: S310
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def targets_ready(path: Path) -> bool:
    """The fleet wrote its targets file (it does once every exporter listens)."""
    try:
        return bool(json.loads(path.read_text()))
    except (OSError, ValueError):
        return False


def banner_lines(source: str, url: str | None = None, targets: Path | None = None) -> list[str]:
    """What the demo banner says about telemetry."""
    if source != "prometheus":
        return ["  Telemetry source: agent (the fake node agents post reports to the portal;",
                "    TELEMETRY_SOURCE=prometheus make demo reads a real Prometheus instead)",
                ""]  # fmt: skip
    count = 0
    if targets is not None:
        try:
            count = len(json.loads(targets.read_text()))
        except (OSError, ValueError):
            count = 0
    return [
        f"  Telemetry source: prometheus, {url}",
        f"    scraping {count} fake dcgm-exporter(s) (targets: {targets})",
        f"    curl -s '{url}/api/v1/query?query=DCGM_FI_DEV_GPU_UTIL'",
        "",
    ]


# -- the demo's steps (called by devstack.demo with its Supervisor) ----------------------------


def exporter_base_port(nodes: int, environ: Mapping[str, str] = os.environ) -> int:
    """``DEMO_EXPORTER_PORT`` (default 19400) when it and the next ``nodes - 1`` ports are
    free; otherwise 0 (each exporter on any free port: series follow the node name, not the
    port), or an error when the user chose the port."""
    from .demo import port_free

    raw = environ.get("DEMO_EXPORTER_PORT", "").strip()
    try:
        base = int(raw) if raw else DEFAULT_EXPORTER_BASE_PORT
    except ValueError:
        raise PromDemoError(f"DEMO_EXPORTER_PORT={raw!r} is not a port number") from None
    if not 0 < base <= 65535 - max(nodes, 1):
        raise PromDemoError(f"DEMO_EXPORTER_PORT={raw!r}: a port number up to {65535 - nodes}")
    if all(port_free(base + i) for i in range(nodes)):
        return base
    if raw:
        raise PromDemoError(
            f"DEMO_EXPORTER_PORT={base}: ports {base}-{base + nodes - 1} are not all free "
            "(one fake exporter per node); choose another DEMO_EXPORTER_PORT"
        )
    return 0


def files(data: Path) -> dict[str, Path]:
    """Where the Prometheus demo keeps its files under ``DATA_DIR``."""
    return {
        "tokens": data / "agent-tokens.json",
        "pods": data / "exporter-pods.json",
        "targets": data / "prometheus-targets.json",
        "config": data / "prometheus.yml",
        "tsdb": data / "prometheus",
        # Written while a Prometheus run has the cluster's PrometheusSource enabled; an agent
        # run that finds it turns the source off (the same data folder serves both).
        "marker": data / "prometheus-source-enabled",
    }


def use_agents(sup: Any, env: dict[str, str], data: Path, py: str, cwd: Path) -> bool:
    """Agent mode: undo an earlier Prometheus run's source row (only when there was one,
    so a plain agent demo runs exactly the steps it always did). False: stopping."""
    marker = files(data)["marker"]
    if not marker.exists():
        return True
    argv = [py, "manage.py", "demo_prometheus_source", "--disable"]
    rc, _ = sup.run_once("prom-source", argv, env=env, cwd=cwd)
    if sup.stopping:
        return False
    if rc == 0:
        marker.unlink(missing_ok=True)
    else:
        sup.log("could not turn the demo cluster's Prometheus source off; see above")
    return True


def start(
    sup: Any, env: dict[str, str], data: Path, py: str, cwd: Path, *, port: int, days: str
) -> str | None:
    """Prometheus mode, after ``seed_demo`` and before the web server: the source row and
    pod attribution, the fake exporters, the history (first run only), Prometheus, one
    ``sync_prometheus``. Returns Prometheus' URL; None when the demo is stopping."""
    prom, promtool = programs(sup.log)
    f = files(data)
    if not f["tokens"].exists():
        raise PromDemoError(f"seed_demo wrote no fleet file ({f['tokens']}): no GPU nodes?")
    url = f"http://127.0.0.1:{port}"
    argv = [py, "manage.py", "demo_prometheus_source", "--url", url,
            "--write-pods", str(f["pods"]), "--tokens", str(f["tokens"])]  # fmt: skip
    rc, _ = sup.run_once("prom-source", argv, env=env, cwd=cwd)
    if sup.stopping:
        return None
    if rc != 0:
        sup.request_stop(f"`manage.py demo_prometheus_source` failed (exit code {rc})", failed=True)
        return None
    f["marker"].write_text(url + "\n")
    nodes = len(json.loads(f["tokens"].read_text()))
    f["targets"].unlink(missing_ok=True)
    fleet = [py, "-m", "gpuagent", "fleet", "--exporter-only", "--tokens", str(f["tokens"]),
             "--pods", str(f["pods"]), "--interval", "15", "--targets-file", str(f["targets"]),
             "--metrics-base-port", str(exporter_base_port(nodes))]  # fmt: skip
    sup.start("exporters", fleet, env=env, cwd=cwd, restart=True)
    if has_blocks(f["tsdb"]):
        sup.log(f"Prometheus keeps its own history in {f['tsdb']} (delete it to backfill again)")
    elif days not in ("", "0"):
        history = [py, "-m", "devstack.demo_prometheus", "backfill", "--tokens", str(f["tokens"]),
                   "--tsdb", str(f["tsdb"]), "--days", days, "--pods", str(f["pods"]),
                   "--promtool", promtool]  # fmt: skip
        rc, _ = sup.run_once("prom-history", history, env=env, cwd=cwd)
        if sup.stopping:
            return None
        if rc != 0:  # charts start empty, nothing else is wrong: the demo goes on
            sup.log(f"the Prometheus history backfill failed (exit code {rc}); charts start empty")
    if not sup.wait_until(lambda: targets_ready(f["targets"]), timeout=30):
        if not sup.stopping:
            sup.request_stop("the fake exporters did not start within 30s", failed=True)
        return None
    write_config(f["config"], f["targets"])
    f["tsdb"].mkdir(parents=True, exist_ok=True)
    sup.start("prometheus", server_command(prom, f["config"], f["tsdb"], port, float(days or 0)),
              env=env, cwd=cwd)  # fmt: skip
    if not sup.wait_until(lambda: ready(url), timeout=60):
        if not sup.stopping:
            sup.request_stop(f"Prometheus did not get ready on {url} within 60s", failed=True)
        return None
    rc, out = sup.run_once("prom-sync", [py, "manage.py", "sync_prometheus"], env=env, cwd=cwd)
    if sup.stopping:
        return None
    if rc != 0 and "Unknown command" in out:
        sup.log("manage.py sync_prometheus does not exist yet: GPU state waits for beat")
    elif rc != 0:
        sup.log(f"`manage.py sync_prometheus` failed (exit code {rc}); beat retries every 60 s")
    return url


# -- ``python -m devstack.demo_prometheus backfill`` ------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack.demo_prometheus")
    sub = parser.add_subparsers(dest="command", required=True)
    bf = sub.add_parser("backfill", help="the fleet's past days as TSDB blocks (once)")
    bf.add_argument("--tokens", required=True, help="the fleet's tokens file (seed_demo's)")
    bf.add_argument("--tsdb", required=True, help="Prometheus' data folder")
    bf.add_argument("--days", type=float, default=7.0)
    bf.add_argument("--seed", type=int, default=0)
    bf.add_argument("--pods", help="the fleet's --pods file")
    bf.add_argument("--promtool")
    args = parser.parse_args(argv)
    try:
        spec = json.loads(Path(args.tokens).read_text())
        pods = json.loads(Path(args.pods).read_text()) if args.pods else {}
    except (OSError, ValueError) as exc:
        print(f"cannot read the fleet files: {exc}", file=sys.stderr)
        return 2
    try:
        backfill(spec, Path(args.tsdb), days=args.days, seed=args.seed, pods=pods,
                 promtool=args.promtool)  # fmt: skip
    except (OSError, RuntimeError) as exc:
        print(f"Prometheus history: backfill failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
