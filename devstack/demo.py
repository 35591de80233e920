"""``make demo``: the whole portal on one machine with nothing installed but Python.

Order matters: the services and the simulated cluster must answer before ``migrate`` and
``seed_demo`` run, and those must finish before the web server, worker and beat start.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import ssl
import sys
import urllib.error
import urllib.request
from pathlib import Path

from . import REPO_ROOT, data_dir
from . import demo_prometheus as prom
from .services import ServiceError, Services, data_lock, redact, start_services
from .supervisor import Supervisor, reap_leftovers

DEFAULT_PORT = 8000
DEFAULT_SIM_PORT = 6443
DEFAULT_FLEET = "simcluster/fleets/demo.yaml"
# The second demo cluster, which enforces GPU classes through Kueue ("" leaves it out).
DEFAULT_KUEUE_FLEET = "simcluster/fleets/demo-kueue.yaml"
# The third cluster: GPUs as DRA devices (real control plane only: the simulator serves no
# resource.k8s.io).
DEFAULT_DRA_FLEET = "simcluster/fleets/demo-dra.yaml"


class DemoError(RuntimeError):
    """A precondition failed; the message tells the user what to change."""


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing listens on ``host:port`` (binding like a server would)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def port_answers(port: int, host: str = "127.0.0.1") -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _env_port(name: str, default: int) -> tuple[int, bool]:
    value = os.environ.get(name, "")
    if not value:
        return default, False
    try:
        return int(value), True
    except ValueError:
        raise DemoError(f"{name}={value!r} is not a port number") from None


def web_port() -> int:
    """``$PORT`` (default 8000); refuse early and clearly when it is taken."""
    port, _ = _env_port("PORT", DEFAULT_PORT)
    if not port_free(port):
        raise DemoError(
            f"port {port} is already in use (another `make demo`?). "
            f"Stop that, or choose another port: PORT={port + 1} make demo"
        )
    return port


def sim_port(name: str = "SIM_PORT", default: int = DEFAULT_SIM_PORT) -> int:
    """``$SIM_PORT``, else 6443 when free (a stable kubeconfig), else any free port."""
    port, explicit = _env_port(name, default)
    if port_free(port):
        return port
    if explicit:
        raise DemoError(f"{name}={port} is already in use; choose another {name}")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def check_sim(fleet: str) -> None:
    """Fail early, before any service starts, when the simulated cluster cannot run."""
    if not (REPO_ROOT / "simcluster" / "__main__.py").exists():
        raise DemoError("the simulated cluster (simcluster/__main__.py) is missing")
    if not (REPO_ROOT / fleet).exists():
        raise DemoError(f"fleet file {fleet} is missing (SIM_FLEET chooses another)")


# The portal's own install manifests, applied to the simulated cluster in this order; the
# portal then runs with a token of its ServiceAccount (RBAC exactly as deployed), while the
# user's kubeconfig keeps the cluster admin.
PORTAL_MANIFESTS = ("deploy/kubernetes/namespace.yaml", "deploy/kubernetes/rbac.yaml")
PORTAL_SERVICE_ACCOUNT = "gpu-quota-portal/gpu-quota-portal"


def use_real_control_plane(log) -> bool:
    """Whether the demo runs on the real control plane: its binaries built (the first run
    builds them when Go is there, saying so and how long it takes), ``DEMO_CLUSTER`` not
    ``simulator``. Otherwise the Python simulator, and the banner says which and why."""
    from . import testrun

    if os.environ.get("DEMO_CLUSTER", "").strip() == "simulator":
        log("DEMO_CLUSTER=simulator: the demo runs on the Python simulator")
        return False
    return testrun.ensure_control_plane(log)


def sim_command(
    py: str,
    fleet: str,
    port: int,
    kubeconfig: Path,
    portal_kubeconfig: Path,
    real: bool = False,
    kueue: bool = False,
) -> list[str]:
    """The cluster in the foreground; it writes both kubeconfigs once it answers.

    ``real``: the real control plane (``devstack/cluster.py``, its files in
    ``<kubeconfig's folder>/controlplane-<fleet>``; Kueue only where ``kueue``), else the
    simulator; both take the same arguments."""
    if real:
        workdir = kubeconfig.parent / f"controlplane-{Path(fleet).stem}"
        argv = [py, "-m", "devstack.cluster", "--fleet", fleet, "--port", str(port),
                "--workdir", str(workdir)]  # fmt: skip
        # The demo's Kueue cluster shares fairly, so teams see their weighted share (#25).
        argv.append("--kueue-fair-sharing" if kueue else "--no-kueue")
    else:
        argv = [py, "-m", "simcluster", "--fleet", fleet, "--port", str(port)]
    for manifest in PORTAL_MANIFESTS:
        argv += ["--apply", manifest]
    argv += ["--serviceaccount-kubeconfig", f"{PORTAL_SERVICE_ACCOUNT}={portal_kubeconfig}"]
    return [*argv, "--kubeconfig", str(kubeconfig)]


def sim_answers(kubeconfig: Path, port: int) -> bool:
    """The simulated cluster is ready once its kubeconfig exists and ``GET /version`` answers."""
    if not kubeconfig.exists():
        return False
    match = re.search(r"server:\s*['\"]?([^\s'\"]+)", kubeconfig.read_text(errors="replace"))
    server = match.group(1).rstrip("/") if match else f"http://127.0.0.1:{port}"
    context = ssl._create_unverified_context() if server.startswith("https") else None  # noqa: S323
    try:
        with urllib.request.urlopen(f"{server}/version", timeout=1, context=context) as resp:  # noqa: S310
            return resp.status < 500
    except urllib.error.HTTPError as exc:
        return exc.code < 500
    except (OSError, ValueError):
        return False


def child_env(services: Services, data: Path, portal_kubeconfig: Path) -> dict[str, str]:
    """The environment every demo process gets (the env contract in docs/development.md).

    ``SIM_KUBECONFIG`` is the portal's kubeconfig (its ServiceAccount token), not the admin's.
    """
    env = dict(os.environ)
    env.update(services.env())
    env["DATA_DIR"] = str(data)
    env["SIM_KUBECONFIG"] = str(portal_kubeconfig)
    env.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    # Links in e-mails and notifications point where this demo serves (PORT), not 8000.
    env.setdefault("PORTAL_URL", f"http://127.0.0.1:{_env_port('PORT', DEFAULT_PORT)[0]}")
    # The demo fleet's mig-manager sees a ConfigMap write after 3 s (gpuOperator
    # configMountDelay), not a kubelet's minute: the MIG coordinator waits that long.
    env.setdefault("MIG_CONFIG_MOUNT_SECONDS", "5")
    # The reclaim policy's pass (issue #25): every minute, so the seeded idle grant's
    # warning shows within a minute of the start, not ten.
    env.setdefault("RECLAIM_INTERVAL_SECONDS", "60")
    env.update(demo_web_env(env))
    # /metrics names teams and namespaces: the demo needs a scrape token too (issue #11).
    if not env.get("METRICS_TOKEN") and not env.get("METRICS_TOKEN_FILE"):
        env["METRICS_TOKEN_FILE"] = str(metrics_token_file(data))
    return env


def demo_web_env(env: dict[str, str]) -> dict[str, str]:
    """The demo looks like a real installation (issue #12 section 3): ``DEBUG`` off, so a
    missing page shows the portal's 404 (not Django's technical page listing every URL)
    and an error its 500. WhiteNoise then serves the static files straight from the
    finders (``static/`` and the apps'), so a fresh clone needs no ``collectstatic``.
    ``DEBUG=True make demo`` still turns development mode on."""
    return {
        "DEBUG": env.get("DEBUG") or "False",
        "WHITENOISE_USE_FINDERS": env.get("WHITENOISE_USE_FINDERS") or "True",
    }


def metrics_token_file(data: Path) -> Path:
    """``$DATA_DIR/metrics-token`` (mode 0600): the demo's ``/metrics`` bearer token, made
    once and kept, so a Prometheus scrape config keeps working across restarts."""
    path = data / "metrics-token"
    if not path.exists() or not path.read_text().strip():
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(32) + "\n")
    return path


def _metrics_lines(port: int, env: dict[str, str] | None) -> list[str]:
    if not env:
        return []
    if env.get("METRICS_TOKEN_FILE"):
        token = f"$(cat {env['METRICS_TOKEN_FILE']})"
    elif env.get("METRICS_TOKEN"):
        token = "$METRICS_TOKEN"
    else:
        return []
    return [
        "  Prometheus metrics (they name teams, so they need the token):",
        f'    curl -H "Authorization: Bearer {token}" http://127.0.0.1:{port}/metrics',
        "",
    ]


def write_env_file(path: Path, values: dict[str, str]) -> None:
    """``$DATA_DIR/devstack.env``: lets ``manage.py shell`` in another terminal find the demo."""
    lines = ["# Written by `make demo` while it runs; removed when it stops."]
    lines += [f"{key}={value}" for key, value in values.items()]
    path.write_text("\n".join(lines) + "\n")


def _kueue_lines(kubeconfig: Path) -> list[str]:
    if not kubeconfig.exists():
        return []
    lines = [
        f"  Second cluster, Kueue (cluster admin): {kubeconfig}",
        f"    kubectl --kubeconfig {kubeconfig} get clusterqueues,workloads -A",
    ]
    dra = kubeconfig.parent / "dra.kubeconfig"
    if dra.exists():
        lines += [
            f"  Third cluster, DRA (cluster admin): {dra}",
            f"    kubectl --kubeconfig {dra} get deviceclasses,resourceclaims -A",
        ]
    return lines


def cluster_kind(real: bool) -> str:
    """The banner's words for what the demo's clusters are."""
    if real:
        from . import k8sbuild

        v = k8sbuild.versions()
        return (
            f"real control plane: kube-apiserver {v['kubernetes']}, etcd {v['etcd']}, "
            f"kube-controller-manager, kube-scheduler, kwok {v['kwok']}, Kueue {v['kueue']}"
        )
    return "the Python simulator (simcluster/; the real control plane needs Go: make k8s)"


def banner(
    port: int, seed_output: str, kubeconfig: Path, services: Services,
    env: dict[str, str] | None = None, telemetry: list[str] | None = None,
) -> list[str]:  # fmt: skip
    """What the user needs once everything is up (``telemetry``: the source's lines)."""
    rule = "=" * 72
    lines = ["", rule, f"  GPU quota portal demo:  http://127.0.0.1:{port}/", ""]
    if seed_output.strip():  # seed_demo prints the accounts and their passwords
        lines += [f"  {line}" for line in seed_output.strip().splitlines()]
        lines.append("")
    lines += telemetry or []
    lines += [
        f"  Cluster: {(env or {}).get('DEMO_CLUSTER_KIND') or cluster_kind(False)}",
        f"  Cluster kubeconfig (cluster admin): {kubeconfig}",
        f"    kubectl --kubeconfig {kubeconfig} version",
        f"    kubectl --kubeconfig {kubeconfig} get nodes",
        *_kueue_lines(kubeconfig.parent / "kueue.kubeconfig"),
        f"  The portal uses its own ServiceAccount ({PORTAL_SERVICE_ACCOUNT}, RBAC from",
        "    deploy/kubernetes/rbac.yaml); see what it may do with",
        f"    kubectl --kubeconfig {kubeconfig} auth can-i --list \\",
        f"      --as system:serviceaccount:{PORTAL_SERVICE_ACCOUNT.replace('/', ':')}",
        "",
        *_metrics_lines(port, env),
        *(f"  {note}" for note in services.describe()),
        f"  DATABASE_URL={redact(services.database_url)}",
        f"  REDIS_URL={services.redis_url}",
        "",
        "  Ctrl-C stops everything.",
        rule,
        "",
    ]
    return lines


def run_demo() -> int:
    """Run the demo until Ctrl-C; the exit code is non-zero when something failed."""
    data = data_dir()
    kubeconfig = data / "kubeconfig"
    # The portal's own credentials sit apart from the data directory's other secrets (the
    # admins' kubeconfigs, the metrics token): CLUSTER_CREDENTIAL_DIRS names only this one.
    credentials = data / "credentials"
    credentials.mkdir(mode=0o700, parents=True, exist_ok=True)
    portal_kubeconfig = credentials / "portal.kubeconfig"
    fleet = os.environ.get("SIM_FLEET", DEFAULT_FLEET)
    py = sys.executable
    sup = Supervisor(state_file=data / ".devstack-children.json")
    try:
        source = prom.telemetry_source()  # before anything starts: a typo costs nothing
        if source == "prometheus":
            prom.programs(sup.log)  # likewise a missing Debian package
        check_sim(fleet)
        with data_lock(data, wait=False, what="`make demo`", log=sup.log):
            # A demo killed with SIGKILL leaves its children running (holding the ports).
            reap_leftovers(data / ".devstack-children.json", sup.log)
            port = web_port()
            sport = sim_port()
            # TELEMETRY_SOURCE=prometheus: its port ($PROMETHEUS_PORT, else 9090 or any).
            pport = sim_port("PROMETHEUS_PORT", prom.DEFAULT_PROM_PORT) if source != "agent" else 0
            return _run(sup, data, (kubeconfig, portal_kubeconfig), fleet, port, sport, py, pport)
    except (DemoError, ServiceError, prom.PromDemoError) as exc:
        sup.log(f"error: {exc}")
        return 2


def _run(
    sup: Supervisor,
    data: Path,
    kubeconfigs: tuple[Path, Path],
    fleet: str,
    port: int,
    sport: int,
    py: str,
    pport: int = 0,
) -> int:
    """``kubeconfigs``: the admin's (for the user) and the portal's ServiceAccount's;
    ``pport``: Prometheus' port with ``TELEMETRY_SOURCE=prometheus``, 0 for the agents."""
    sup.install_signal_handlers()
    env_file = data / "devstack.env"
    services: Services | None = None
    try:
        sup.log(f"data in {data} (delete it to start from scratch)")
        services = start_services(data, persistent=True, log=sup.log)
        for note in services.describe():
            sup.log(note)
        restarts = services.restarts(sup.log)
        for name, alive in services.health().items():
            sup.watch(name, alive, restart=restarts.get(name))
        env = child_env(services, data, kubeconfigs[1])
        write_env_file(env_file, {**services.env(), "SIM_KUBECONFIG": env["SIM_KUBECONFIG"]})
        _bring_up(sup, env, services, data, kubeconfigs, fleet, (port, sport, pport), py)
    except (ServiceError, prom.PromDemoError) as exc:
        sup.request_stop(str(exc), failed=True)
    finally:
        code = sup.stop()
        if services is not None:
            services.stop(sup.log)
        env_file.unlink(missing_ok=True)
    sup.log("stopped" if code == 0 else f"stopped (exit code {code})")
    return code


def _backfill_days() -> str:
    """``DEMO_BACKFILL_DAYS`` as a number (a typo means the default week, 7)."""
    raw = os.environ.get("DEMO_BACKFILL_DAYS", "7").strip() or "0"
    try:
        return f"{max(0.0, float(raw)):g}"
    except ValueError:
        return "7"


def _backfill(sup: Supervisor, env: dict[str, str], data: Path, py: str) -> bool:
    """A week of the fake agent fleet's history before anything draws it (issue #12
    section 3): ``manage.py backfill_telemetry`` (idempotent: a restart fills only the
    gap). ``DEMO_BACKFILL_DAYS`` (default 7; 0: none). False: the demo is stopping."""
    days = _backfill_days()
    if not (data / "agent-tokens.json").exists() or days in ("", "0"):
        return True
    argv = [py, "manage.py", "backfill_telemetry", "--days", days]
    rc, _ = sup.run_once("backfill", argv, env=env, cwd=REPO_ROOT)
    if sup.stopping:
        return False
    if rc != 0:  # charts start empty, nothing else is wrong: the demo goes on
        sup.log(f"the telemetry backfill failed (exit code {rc}); charts start empty")
    return True


def _bring_up(
    sup: Supervisor,
    env: dict[str, str],
    services: Services,
    data: Path,
    kubeconfigs: tuple[Path, Path],
    fleet: str,
    ports: tuple[int, int, int],
    py: str,
) -> None:
    """Start everything in order; returns once a stop was requested. ``ports``: the web
    server's, the simulator's and Prometheus' (0: the agents are the telemetry source)."""
    if sup.stopping:
        return
    port, sport, pport = ports
    kubeconfig, portal_kubeconfig = kubeconfigs
    credentials = portal_kubeconfig.parent
    # Both kubeconfigs of a simulator reappear once it listens (the admin's is written last).
    sims = [("sim", fleet, sport, kubeconfig, portal_kubeconfig)]
    kueue_fleet = os.environ.get("SIM_KUEUE_FLEET", DEFAULT_KUEUE_FLEET)
    seed = [py, "manage.py", "seed_demo", "--kubeconfig", str(portal_kubeconfig),
            "--history-days", _backfill_days()]  # fmt: skip
    if kueue_fleet:
        kueue_kcs = (data / "kueue.kubeconfig", credentials / "kueue-portal.kubeconfig")
        kport = sim_port("SIM_KUEUE_PORT", DEFAULT_SIM_PORT + 1)
        sims.append(("sim-kueue", kueue_fleet, kport, *kueue_kcs))
        seed += ["--kueue-kubeconfig", str(kueue_kcs[1]),
                 "--kueue-admin-kubeconfig", str(kueue_kcs[0])]  # fmt: skip
    real = use_real_control_plane(sup.log)
    dra_fleet = os.environ.get("SIM_DRA_FLEET", DEFAULT_DRA_FLEET)
    if dra_fleet and real:
        dra_kcs = (data / "dra.kubeconfig", credentials / "dra-portal.kubeconfig")
        sims.append(("sim-dra", dra_fleet, sim_port("SIM_DRA_PORT", DEFAULT_SIM_PORT + 2),
                     *dra_kcs))  # fmt: skip
        seed += ["--dra-kubeconfig", str(dra_kcs[1]), "--dra-admin-kubeconfig", str(dra_kcs[0])]
    for name, sim_fleet, sim_port_, admin_kc, portal_kc in sims:
        portal_kc.unlink(missing_ok=True)
        admin_kc.unlink(missing_ok=True)
        argv = sim_command(
            py, sim_fleet, sim_port_, admin_kc, portal_kc, real=real, kueue=name == "sim-kueue"
        )
        sup.start(name, argv, env=env, cwd=REPO_ROOT)
    # The real control plane takes ~15-30 s to start and load a fleet on 2 cores.
    timeout = 180 if real else 60
    for name, _, sim_port_, admin_kc, _ in sims:
        if not sup.wait_until(lambda k=admin_kc, p=sim_port_: sim_answers(k, p), timeout=timeout):
            if not sup.stopping:
                sup.request_stop(
                    f"the cluster {name} did not answer within {timeout}s (port {sim_port_})",
                    True,
                )
            return
    env["DEMO_CLUSTER_KIND"] = cluster_kind(real)

    seed_output = ""
    for name, argv in (
        ("migrate", [py, "manage.py", "migrate", "--noinput"]),
        ("seed", seed),
    ):
        rc, seed_output = sup.run_once(name, argv, env=env, cwd=REPO_ROOT)
        if sup.stopping:
            return
        if rc != 0:
            sup.request_stop(f"`manage.py {argv[2]}` failed with exit code {rc}", failed=True)
            return
    telemetry = prom.banner_lines("agent")
    if pport:  # TELEMETRY_SOURCE=prometheus (devstack/demo_prometheus.py)
        url = prom.start(sup, env, data, py, REPO_ROOT, port=pport, days=_backfill_days())
        if url is None:
            return
        telemetry = prom.banner_lines("prometheus", url, prom.files(data)["targets"])
    elif not prom.use_agents(sup, env, data, py, REPO_ROOT) or not _backfill(sup, env, data, py):
        return

    sup.start(
        "web",
        [py, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
        env=env,
        cwd=REPO_ROOT,
    )
    celery = [py, "-m", "celery", "-A", "portal"]
    # The worker, beat, watcher and agents are restarted when they die (bounded, with a
    # log line: devstack/supervisor.py); the simulators, the web server and the services
    # dying still stops the demo.
    sup.start(
        "worker", [*celery, "worker", "-l", "INFO", "--concurrency", "2"], env=env, cwd=REPO_ROOT,
        restart=True,
    )  # fmt: skip
    schedule = str(data / "celerybeat-schedule")
    sup.start("beat", [*celery, "beat", "-l", "INFO", "-s", schedule], env=env, cwd=REPO_ROOT,
              restart=True)  # fmt: skip
    sup.start("watch", [py, "manage.py", "watch_inventory"], env=env, cwd=REPO_ROOT,
              restart=True)  # fmt: skip
    if sup.wait_until(lambda: port_answers(port), timeout=60):
        tokens = data / "agent-tokens.json"
        if tokens.exists() and not pport:  # seed_demo wrote one token per GPU node
            sup.start(
                "agents",
                [py, "-m", "gpuagent", "fleet", "--portal", f"http://127.0.0.1:{port}",
                 "--tokens", str(tokens), "--interval", "15"],
                env=env,
                cwd=REPO_ROOT,
                restart=True,
            )  # fmt: skip
        sup.block(banner(port, seed_output, kubeconfig, services, env, telemetry))
        sup.run_forever()
    elif not sup.stopping:
        sup.request_stop(f"the web server did not listen on port {port} within 60s", failed=True)
