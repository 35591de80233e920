"""Command line: ``python -m gpuagent [run|once|fleet] ...``.

``run`` (the default) is the DaemonSet's loop; ``once --print`` reads NVML once and prints
the report (no token or portal needed, for recording fixtures on a GPU machine); ``fleet``
runs the demo's fake agents. Settings come from flags, falling back to the environment the
DaemonSet sets (``NODE_NAME``, ``PORTAL_URL``, ...).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any

from gpuagent import __version__

log = logging.getLogger("gpuagent")

DEFAULT_TOKEN_FILE = "/var/run/secrets/gpu-portal/token"


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


def _common(p: argparse.ArgumentParser) -> None:
    env = os.environ
    p.add_argument("--node", default=env.get("NODE_NAME"), help="node name (env NODE_NAME)")
    p.add_argument("--portal", default=env.get("PORTAL_URL"), help="portal URL (env PORTAL_URL)")
    p.add_argument(
        "--token-file",
        default=env.get("GPU_AGENT_TOKEN_FILE", DEFAULT_TOKEN_FILE),
        help="file holding the node token (env GPU_AGENT_TOKEN_FILE)",
    )
    p.add_argument(
        "--interval",
        type=float,
        default=_env_float("GPU_AGENT_INTERVAL", 15),
        help="seconds between reports (env GPU_AGENT_INTERVAL, default 15)",
    )
    p.add_argument(
        "--buffer",
        type=int,
        default=int(_env_float("GPU_AGENT_BUFFER", 240)),
        help="reports kept while the portal is down (default 240 = 1 h at 15 s)",
    )
    p.add_argument("--max-age", type=float, default=3600, help="drop buffered reports older (s)")
    p.add_argument("--timeout", type=float, default=10, help="HTTP timeout per post (s)")
    p.add_argument(
        "--fake-nvml",
        metavar="SCENARIO",
        help="use gpuagent.fake_nvml driven by this YAML/JSON scenario instead of pynvml",
    )
    p.add_argument(
        "--pod-resources-socket",
        default=env.get("POD_RESOURCES_SOCKET", "/var/lib/kubelet/pod-resources/kubelet.sock"),
        help="kubelet pod-resources socket (attribution; see docs/agent.md)",
    )
    p.add_argument("--log-level", default=env.get("GPU_AGENT_LOG_LEVEL", "INFO"))


def _exporter_options(p: argparse.ArgumentParser) -> None:
    """The Prometheus exporter (docs/agent.md, "Prometheus exporter")."""
    env = os.environ
    p.add_argument(
        "--metrics-port",
        type=int,
        default=int(_env_float("GPU_AGENT_METRICS_PORT", 9400)),
        help="serve /metrics (dcgm-exporter names) on this port; 0 = off "
        "(env GPU_AGENT_METRICS_PORT, default 9400, dcgm-exporter's)",
    )
    p.add_argument(
        "--metrics-address",
        default=env.get("GPU_AGENT_METRICS_ADDRESS", "0.0.0.0"),  # noqa: S104
        help="bind address for /metrics (env GPU_AGENT_METRICS_ADDRESS, default 0.0.0.0)",
    )
    p.add_argument(
        "--exporter-only",
        action="store_true",
        default=env.get("GPU_AGENT_EXPORTER_ONLY", "").lower() in ("1", "true", "yes"),
        help="serve /metrics only, post nothing to the portal (env GPU_AGENT_EXPORTER_ONLY=1)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gpuagent", description="GPU node agent for the GPU quota portal"
    )
    parser.add_argument("--version", action="version", version=f"gpuagent {__version__}")
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run", help="report every interval until SIGTERM (default)")
    _common(run)
    _exporter_options(run)
    once = sub.add_parser("once", help="read NVML once; post it, or --print it")
    _common(once)
    once.add_argument("--print", action="store_true", help="print the report JSON, do not post")
    fleet = sub.add_parser("fleet", help="the demo's fake agent fleet, one per node")
    fleet.add_argument("--portal", default=os.environ.get("PORTAL_URL"), required=False)
    fleet.add_argument("--tokens", required=True, help='JSON: {"node": {"token": ..., ...}}')
    fleet.add_argument("--interval", type=float, default=15)
    fleet.add_argument("--workers", type=int, default=8, help="concurrent posts")
    fleet.add_argument("--seed", type=int, default=0)
    fleet.add_argument("--log-level", default="INFO")
    # The Prometheus telemetry source's demo (TELEMETRY_SOURCE=prometheus make demo).
    fleet.add_argument(
        "--exporter-only",
        action="store_true",
        help="post nothing; each node serves /metrics (dcgm-exporter names) on its own port",
    )
    fleet.add_argument(
        "--metrics-base-port",
        type=int,
        default=0,
        help="with --exporter-only: node i (name order) on port N+i; 0 (default): any free port",
    )
    fleet.add_argument(
        "--metrics-address",
        default="127.0.0.1",
        help="with --exporter-only: the address the exporters bind (default 127.0.0.1)",
    )
    fleet.add_argument(
        "--targets-file",
        help="with --exporter-only: write the exporters as a Prometheus file_sd JSON file",
    )
    fleet.add_argument(
        "--pods",
        help='JSON: {"node": {"<gpu>" or "<gpu>/<mig>": "namespace/pod[/container]"}}, '
        "who holds which device (the pod labels of /metrics, processes[].pod in reports)",
    )
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version")):
        argv.insert(0, "run")
    return build_parser().parse_args(argv)


def load_nvml(fake: str | None) -> Any:
    """The real ``pynvml`` module, or a :class:`FakeNvml` for a scenario file."""
    if fake:
        from gpuagent.fake_nvml import FakeNvml, load_scenario

        return FakeNvml(load_scenario(fake))
    import pynvml

    return pynvml


def _node(args: argparse.Namespace) -> str:
    return args.node or os.uname().nodename


def cmd_once(args: argparse.Namespace) -> int:
    from gpuagent.agent import Agent
    from gpuagent.podresources import default_resolver
    from gpuagent.sender import Sender, reports_url, token_from_file

    agent = Agent(
        load_nvml(args.fake_nvml),
        _node(args),
        None,
        interval_s=args.interval,
        pods=default_resolver(args.pod_resources_socket),
    )
    if agent.ensure_nvml() is not None:
        return 1
    try:
        report = agent.collect()
    finally:
        agent.reader.close()
    if report is None:
        return 1
    if args.print:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if not args.portal:
        log.error("--portal or PORTAL_URL is needed to post (or use --print)")
        return 2
    sender = Sender(
        reports_url(args.portal), token_from_file(args.token_file), timeout_s=args.timeout
    )
    sender.enqueue(report)
    sender.flush()
    return 0 if sender.sent == 1 else 1


def cmd_run(args: argparse.Namespace) -> int:
    from gpuagent.agent import Agent
    from gpuagent.podresources import default_resolver
    from gpuagent.sender import Sender, reports_url, token_from_file

    if args.exporter_only and not args.metrics_port:
        log.error("--exporter-only needs a --metrics-port (GPU_AGENT_METRICS_PORT) other than 0")
        return 2
    if not args.portal and not args.exporter_only:
        log.error("set PORTAL_URL (or --portal) to the portal's URL, or use --exporter-only")
        return 2
    if not args.node:
        log.warning("NODE_NAME is not set; using the host name %s", _node(args))
    sender = None
    if not args.exporter_only:
        sender = Sender(
            reports_url(args.portal),
            token_from_file(args.token_file),
            capacity=args.buffer,
            max_age_s=args.max_age,
            timeout_s=args.timeout,
        )
    exporter = None
    if args.metrics_port:
        from gpuagent.exporter import Exporter

        exporter = Exporter()
        try:
            exporter.serve(args.metrics_port, args.metrics_address)
        except OSError as exc:
            log.error("cannot serve /metrics on %s:%d: %s", args.metrics_address,
                      args.metrics_port, exc)  # fmt: skip
            if args.exporter_only:
                return 2
            exporter = None  # keep reporting to the portal without /metrics
    agent = Agent(
        load_nvml(args.fake_nvml),
        _node(args),
        sender,
        interval_s=args.interval,
        pods=default_resolver(args.pod_resources_socket),
        exporter=exporter,
    )
    agent.install_signal_handlers()
    log.info(
        "gpuagent %s reading node %s every %.0f s; reports to %s; /metrics %s",
        __version__,
        agent.node,
        args.interval,
        sender.url if sender else "nobody (--exporter-only)",
        f"on {args.metrics_address}:{args.metrics_port}" if exporter else "off",
    )
    agent.run()
    if exporter is not None:
        exporter.close()
    log.info("stopped")
    return 0


def _read_json(path: str | None, what: str) -> Any:
    """A JSON file's content, or an error line (returned as str) naming the file."""
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        return f"cannot read the {what} file {path}: {exc}"


def cmd_fleet(args: argparse.Namespace) -> int:
    from gpuagent.fleet import Fleet

    if not args.portal and not args.exporter_only:
        log.error("set --portal or PORTAL_URL (or use --exporter-only)")
        return 2
    if args.targets_file and not args.exporter_only:
        log.error("--targets-file needs --exporter-only")
        return 2
    if not 0 <= args.metrics_base_port <= 65535:
        log.error("--metrics-base-port must be a port number (0: any free port)")
        return 2
    spec, pods = _read_json(args.tokens, "tokens"), _read_json(args.pods, "pods")
    for loaded in (spec, pods):
        if isinstance(loaded, str):
            log.error("%s", loaded)
            return 2
    if not isinstance(spec, dict) or not isinstance(pods, dict):
        log.error("--tokens and --pods must each hold a JSON object keyed by node name")
        return 2
    try:
        fleet = Fleet.from_spec(
            spec,
            None if args.exporter_only else args.portal,
            interval_s=args.interval,
            workers=args.workers,
            seed=args.seed,
            exporter_only=args.exporter_only,
            metrics_base_port=args.metrics_base_port,
            metrics_address=args.metrics_address,
            pods=pods,
        )
    except OSError as exc:
        log.error("%s", exc)
        return 2
    if args.targets_file:
        fleet.write_targets(args.targets_file, _connect_address(args.metrics_address))
        log.info("wrote %d scrape target(s) to %s", len(fleet.nodes), args.targets_file)
    fleet.install_signal_handlers()
    fleet.run()
    return 0


def _connect_address(bind: str) -> str:
    """Where a local Prometheus reaches an exporter bound to ``bind``."""
    return "127.0.0.1" if bind in ("", "0.0.0.0", "::") else bind  # noqa: S104


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    commands = {"run": cmd_run, "once": cmd_once, "fleet": cmd_fleet}
    return commands[args.command](args)
