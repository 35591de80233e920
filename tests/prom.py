"""A real Prometheus server for tests (Debian package ``prometheus``).

``start_prometheus(tmp_path, scrape_targets)`` writes a temporary config and data folder,
starts ``prometheus`` on a free local port, waits until it is ready and returns a
:class:`Prometheus` with ``.url``, ``.query(expr)``, ``.wait_for(expr)`` and ``.stop()``.
It skips the test (via ``tests.prereqs.need``) where the program is not installed.

``scrape_targets`` is a list of ``"host:port"`` strings (scraped at ``/metrics`` every
second, job ``"test"``) or of dicts ``{"targets": [...], "job": ..., "metrics_path": ...,
"labels": {...}, "honor_labels": bool}``.  ``rule_files`` are copied into the config, so
alerting/recording rules can be tested against the same server.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.prereqs import need

SCRAPE_INTERVAL = "1s"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrometheusError(RuntimeError):
    pass


class Prometheus:
    """A running Prometheus: ``url`` (``http://127.0.0.1:PORT``), HTTP API helpers."""

    def __init__(self, process: subprocess.Popen[bytes], url: str, log: Path) -> None:
        self.process = process
        self.url = url
        self.log = log

    def api(self, path: str, **params: Any) -> Any:
        """GET ``/api/v1/<path>`` and return its ``data`` (raise on a non-success answer)."""
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        url = f"{self.url}/api/v1/{path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as err:
            body = json.loads(err.read() or b"{}")
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body}")
        return body["data"]

    def query(self, expr: str, time: float | None = None) -> list[dict[str, Any]]:
        """An instant query; the ``result`` list (``[{"metric": {...}, "value": [t, "v"]}]``)."""
        return self.api("query", query=expr, time=time)["result"]

    def query_range(
        self, expr: str, start: float, end: float, step: float | str
    ) -> list[dict[str, Any]]:
        return self.api("query_range", query=expr, start=start, end=end, step=step)["result"]

    def targets(self) -> list[dict[str, Any]]:
        return self.api("targets")["activeTargets"]

    def wait_for(self, expr: str, count: int = 1, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Poll ``expr`` until it returns at least ``count`` series (raise after ``timeout``)."""
        deadline = time.monotonic() + timeout
        result: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            result = self.query(expr)
            if len(result) >= count:
                return result
            time.sleep(0.25)
        targets = [
            (t.get("scrapeUrl"), t.get("health"), t.get("lastError")) for t in self.targets()
        ]
        raise PrometheusError(
            f"{expr!r}: {len(result)} series after {timeout}s, wanted {count}; targets: {targets}"
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def _scrape_config(i: int, target: str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(target, str):
        target = {"targets": [target]}
    static: dict[str, Any] = {"targets": list(target["targets"])}
    if target.get("labels"):
        static["labels"] = dict(target["labels"])
    config: dict[str, Any] = {
        "job_name": target.get("job", "test" if i == 0 else f"test{i}"),
        "scrape_interval": target.get("scrape_interval", SCRAPE_INTERVAL),
        "scrape_timeout": target.get("scrape_timeout", SCRAPE_INTERVAL),
        "metrics_path": target.get("metrics_path", "/metrics"),
        "static_configs": [static],
    }
    if "honor_labels" in target:
        config["honor_labels"] = bool(target["honor_labels"])
    return config


def start_prometheus(
    tmp_path: Path,
    scrape_targets: Sequence[str | dict[str, Any]],
    rule_files: Sequence[Path] = (),
    evaluation_interval: str = SCRAPE_INTERVAL,
    timeout: float = 30.0,
    retention: str = "1h",
) -> Prometheus:
    """Start a real Prometheus scraping ``scrape_targets``; skip if it is not installed.
    Blocks already in ``tmp_path / "prometheus" / "data"`` (recorded history, built with
    devstack/promhistory.py) are served as long as they are within ``retention``."""
    program = need("prometheus")
    root = tmp_path / "prometheus"
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    rules = []
    for n, rule in enumerate(rule_files):
        copy = root / f"rules-{n}-{Path(rule).name}"
        copy.write_text(Path(rule).read_text())
        rules.append(str(copy))
    config = {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": evaluation_interval},
        "scrape_configs": [_scrape_config(i, t) for i, t in enumerate(scrape_targets)],
    }
    if rules:
        config["rule_files"] = rules
    config_file = root / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = root / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                program,
                f"--config.file={config_file}",
                f"--storage.tsdb.path={data}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--web.enable-lifecycle",
                f"--storage.tsdb.retention.time={retention}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    prom = Prometheus(process, url, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise PrometheusError(f"prometheus exited {process.returncode}: {log.read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:
                if resp.status == 200:
                    return prom
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        time.sleep(0.2)
    prom.stop()
    raise PrometheusError(f"prometheus not ready after {timeout}s: {log.read_text()}")
