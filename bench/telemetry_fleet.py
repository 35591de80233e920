"""The fleet of bench/telemetry_bench.py, and the same values served two ways.

One plan (:func:`plan_fleet`: nodes, GPUs, pods and what each pod does) and one function
of it, :meth:`Gpu.util` (utilisation per GPU per 5-minute slot), feed both sources, so the
pages must show the same figures from either:

- :func:`build_agent`: GpuState/NodeTelemetry as the agents' reports leave them and history
  rows by COPY (hourly for the closed hours of the last 24 h, 5-minute for the last 3 h,
  30 samples per 5-minute point as an agent reporting every 10 s gives);
- :func:`build_blocks`: dcgm-exporter series (gpuagent/exporter.py's names and labels) as
  OpenMetrics (devstack/promhistory.py) turned into TSDB blocks by promtool, one sample a
  minute for the last 3 h and one per 5 minutes before, each inside its slot, so
  ``avg_over_time(...[5m])`` on 5-minute boundaries equals the agent's 5-minute point.

The pod mix (share of pods): busy 75 % (55-95 %), idle 12 % (0-3 % since they started, 3 to
30 h ago: the idle page lists them), recently idle 8 % (busy until 70 minutes ago: not
listed, not busy), young idle 5 % (started 30-60 minutes ago: not listed yet). A GPU
without a pod, or before its pod started, is at 0 % (dcgm-exporter's pod labels start with
the pod, so such a GPU has a series without them first).
"""

from __future__ import annotations

import io
import multiprocessing
import os
import random
import shutil
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from devstack.promhistory import Family, create_blocks, write_openmetrics

SLOT = 300  # seconds: one 5-minute point
HISTORY_SLOTS = 288  # 24 h
FINE_SLOTS = 36  # the last 3 h at one sample a minute
FUTURE_SLOTS = 12  # samples an hour past the build
SAMPLES_PER_SLOT = 30  # an agent reporting every 10 s
RECENT_IDLE_SLOTS = 14  # "recently idle" pods: busy until 70 minutes before the build
# (GFD product, NVML name, MiB, share of nodes, pod sizes)
PRODUCTS = [
    ("NVIDIA-H100-80GB-HBM3", "NVIDIA H100 80GB HBM3", 81559, 0.4, (8, 4, 2, 1)),
    ("NVIDIA-A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", 81920, 0.3, (8, 4, 2, 1)),
    ("NVIDIA-L40S", "NVIDIA L40S", 46068, 0.2, (2, 1)),
    ("Tesla-V100-SXM2-32GB", "Tesla V100-SXM2-32GB", 32768, 0.1, (2, 1)),
]
BUSY, IDLE, RECENT, YOUNG = "busy", "idle", "recently idle", "young idle"
KINDS = [(BUSY, 0.75), (IDLE, 0.12), (RECENT, 0.08), (YOUNG, 0.05)]
LATEST = [("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
          ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
          ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)."),
          ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).")]  # fmt: skip


# -- the fleet and its values ------------------------------------------------------------


@dataclass(slots=True)
class Pod:
    namespace: str
    name: str
    node: int
    kind: str
    created: int  # slot number (unix time // SLOT)
    gpus: list[int] = field(default_factory=list)


@dataclass(slots=True)
class Gpu:
    node: int
    index: int
    product: int
    uuid: str
    pod: Pod | None = None

    def util(self, k: int, ref: int) -> int:
        """Utilisation (%) in slot ``k``: the one function both sources are built from."""
        pod = self.pod
        if pod is None or k < pod.created:
            return 0
        h = self.node * 8 + self.index
        if pod.kind == BUSY or (pod.kind == RECENT and k < ref - RECENT_IDLE_SLOTS):
            return 55 + (h + 7 * k) % 41
        return (h + k) % 4

    def memory(self, u: int) -> int:
        total = PRODUCTS[self.product][2]
        if self.pod is None:
            return 0
        return int(total * (0.4 + (self.node % 50) / 100)) if u >= 5 else int(total * 0.05)


def plan_fleet(nodes: int, teams: int, seed: int, ref: int) -> tuple[list[Gpu], list[Pod]]:
    rng = random.Random(seed)
    namespaces = [f"team-{t:03d}-ns{n}" for t in range(teams) for n in range(4)]
    weights = [p[3] for p in PRODUCTS]
    gpus: list[Gpu] = []
    pods: list[Pod] = []
    for n in range(nodes):
        product = rng.choices(range(len(PRODUCTS)), weights)[0]
        node_gpus = [Gpu(n, i, product, f"GPU-{rng.getrandbits(128):032x}") for i in range(8)]
        gpus.extend(node_gpus)
        free = list(range(8))
        while free and rng.random() > 0.12:
            size = rng.choice([s for s in PRODUCTS[product][4] if s <= len(free)])
            kind = rng.choices([k for k, _ in KINDS], [w for _, w in KINDS])[0]
            if kind == YOUNG:
                created = ref - rng.randint(6, 12)  # 30-60 minutes ago
            else:
                created = ref - rng.randint(36, 576 if kind == BUSY else 360)  # 3-48/30 h
            pod = Pod(rng.choice(namespaces), f"job-{len(pods):06d}", n, kind, created)
            for i in free[:size]:
                node_gpus[i].pod = pod
                pod.gpus.append(i)
            free = free[size:]
            pods.append(pod)
    return gpus, pods


def expected(gpus: list[Gpu], pods: list[Pod]) -> dict:
    """What both sources must show, from the plan itself."""
    products: dict[str, list[int]] = {}
    for g in gpus:
        row = products.setdefault(PRODUCTS[g.product][0], [0, 0])
        if g.pod is not None:
            row[0] += 1
            row[1] += g.pod.kind == BUSY
    idle = [p for p in pods if p.kind == IDLE]
    return {"idle": len(idle), "idle_gpus": sum(len(p.gpus) for p in idle),
            "products": {k: tuple(v) for k, v in products.items()}}  # fmt: skip


def node_name(n: int) -> str:
    return f"gpu-{n:05d}"


def build_fleet(gpus: list[Gpu], pods: list[Pod], nodes: int, teams: int, ref: int) -> dict:
    """Cluster, teams, nodes, capacity, pods and usage through the ORM (bulk)."""
    from inventory.models import GPU_RESOURCE, Cluster, GpuPod, NamespaceUsage, Node, NodeResource
    from quotas.models import Team, TeamNamespace

    cluster = Cluster.objects.create(
        slug="bench", name="Bench", auth_method="kubeconfig", kubeconfig_path="/nonexistent",
        sync_enabled=False,
    )  # fmt: skip
    team_rows = Team.objects.bulk_create(
        Team(slug=f"team-{t:03d}", name=f"Team {t:03d}") for t in range(teams)
    )
    TeamNamespace.objects.bulk_create(
        TeamNamespace(team=team, cluster=cluster, name=f"{team.slug}-ns{n}")
        for team in team_rows
        for n in range(4)
    )
    product_of = {g.node: g.product for g in gpus}
    node_rows = Node.objects.bulk_create(
        (Node(cluster=cluster, name=node_name(n), gpu_product=PRODUCTS[product_of[n]][0],
              gpu_count=8, gpu_memory_mib=PRODUCTS[product_of[n]][2], fingerprint="bench",
              labels={"nvidia.com/gpu.product": PRODUCTS[product_of[n]][0],
                      "nvidia.com/gpu.count": "8"})
         for n in range(nodes)), batch_size=1000,
    )  # fmt: skip
    requested = [0] * nodes
    for p in pods:
        requested[p.node] += len(p.gpus)
    NodeResource.objects.bulk_create(
        (NodeResource(node=node_rows[n], resource=GPU_RESOURCE, capacity=8, allocatable=8,
                      requested=requested[n]) for n in range(nodes)), batch_size=2000,
    )  # fmt: skip
    when = {p.name: datetime.fromtimestamp(p.created * SLOT, UTC) for p in pods}
    GpuPod.objects.bulk_create(
        (GpuPod(cluster=cluster, namespace=p.namespace, name=p.name, node=node_rows[p.node],
                node_name=node_name(p.node), phase="Running",
                requests={GPU_RESOURCE: len(p.gpus)}, k8s_created_at=when[p.name],
                first_seen_at=when[p.name]) for p in pods), batch_size=2000,
    )  # fmt: skip
    usage: dict[str, list[int]] = {}
    for p in pods:
        row = usage.setdefault(p.namespace, [0, 0])
        row[0] += len(p.gpus)
        row[1] += 1
    NamespaceUsage.objects.bulk_create(
        NamespaceUsage(cluster=cluster, namespace=ns, resource=GPU_RESOURCE, requested=r, pods=c)
        for ns, (r, c) in usage.items()
    )
    return {"cluster": cluster, "nodes": node_rows}


# -- (a) agent ingest: latest state and history rows --------------------------------------

COLUMNS = ("gpu_id, bucket, samples, util_sum, util_n, util_max, mem_used_sum, mem_n, "
           "temp_max, power_sum, power_n")  # fmt: skip


def build_agent(gpus: list[Gpu], node_rows, ref: int, days: int = 1) -> dict:
    """GpuState and NodeTelemetry as the agents' latest reports leave them, and history rows
    via COPY: hourly for the closed hours of the last 24 h, 5-minute for the last 3 h; with
    ``days`` > 1, hourly rows of every GPU for the days before (:func:`_older_hours`)."""
    from django.db import connection

    from telemetry.models import GpuState, NodeTelemetry

    start = time.perf_counter()
    now_slot = int(time.time()) // SLOT
    at = datetime.fromtimestamp(now_slot * SLOT, UTC)
    fresh = datetime.fromtimestamp(time.time() + 3600, UTC)  # the agents keep reporting
    states = []
    for g in gpus:
        u = g.util(now_slot, ref)
        mem = g.memory(u)
        procs = []
        if g.pod is not None:
            procs = [{"pid": 4000 + g.index, "used_memory_mib": mem,
                      "pod": f"{g.pod.namespace}/{g.pod.name}"}]  # fmt: skip
        states.append(GpuState(
            node=node_rows[g.node], index=g.index, uuid=g.uuid, name=PRODUCTS[g.product][1],
            memory_total_mib=PRODUCTS[g.product][2], memory_used_mib=mem,
            utilization_gpu_pct=u, utilization_memory_pct=u // 2, temperature_c=30 + u // 3,
            power_w=60.0 + 5 * u, power_limit_w=700.0, processes=procs, reported_at=at,
            stale_after=fresh,
        ))  # fmt: skip
    GpuState.objects.bulk_create(states, batch_size=2000)
    NodeTelemetry.objects.bulk_create(
        (NodeTelemetry(node=n, driver_version="550.107.02", agent_version="bench",
                       interval_s=10, gpu_count=8, last_report_at=at, last_report_timestamp=at,
                       stale_after=fresh) for n in node_rows), batch_size=2000,
    )  # fmt: skip
    first = ref - HISTORY_SLOTS
    top = now_slot - now_slot % 12  # the current hour's first slot
    hours = [h for h in range(first - first % 12 + 12, top, 12)]
    stamp = {
        k: datetime.fromtimestamp(k * SLOT, UTC).isoformat() for k in range(first, now_slot + 1)
    }
    rows = {"telemetry_gpuhistory1h": 0, "telemetry_gpuhistory5m": 0}
    n = SAMPLES_PER_SLOT
    with connection.cursor() as cur:
        # Oldest first and hour by hour, as the agents' reports and the hourly rollups write
        # them: the rows lie in time order, which the BRIN indexes on ``bucket`` rely on.
        if days > 1:
            rows["telemetry_gpuhistory1h"] += _older_hours(cur, gpus, states, hours[0], days)
        recent = range(now_slot - FINE_SLOTS, now_slot + 1)
        for table, keys in (("telemetry_gpuhistory1h", hours), ("telemetry_gpuhistory5m", recent)):
            buf = io.StringIO()
            for k in keys:
                for g, state in zip(gpus, states, strict=True):
                    span = range(k, k + 12) if table.endswith("1h") else (k,)
                    us = [g.util(j, ref) for j in span]
                    mem = sum(g.memory(u) for u in us)
                    c = n * len(us)
                    buf.write(f"{state.pk}\t{stamp[k]}\t{c}\t{n * sum(us)}\t{c}\t{max(us)}\t"
                              f"{n * mem}\t{c}\t{30 + max(us) // 3}\t"
                              f"{n * sum(60.0 + 5 * u for u in us)}\t{c}\n")  # fmt: skip
                    rows[table] += 1
                if buf.tell() > 64 << 20:
                    buf.seek(0)
                    cur.copy_expert(f"COPY {table} ({COLUMNS}) FROM STDIN", buf)
                    buf = io.StringIO()
            buf.seek(0)
            cur.copy_expert(f"COPY {table} ({COLUMNS}) FROM STDIN", buf)
        cur.execute("ANALYZE telemetry_gpuhistory1h, telemetry_gpuhistory5m, telemetry_gpustate")
    return {"seconds": time.perf_counter() - start, "rows": sum(rows.values()), **rows}


def _older_hours(cur, gpus: list[Gpu], states, first_hour: int, days: int) -> int:
    """Hourly rows of every GPU for the ``days`` - 1 days before ``first_hour`` (a slot),
    written by PostgreSQL from the plan (a GPU's utilisation at each hour's first slot,
    by :meth:`Gpu.util`'s rule, for the whole hour): 40,000 GPUs x 29 days is 28 million
    rows, which Python would take many minutes to write. These hours are the agent's only
    (the Prometheus side keeps 24 h): they measure what a month of history costs the
    pages and the computation, not the sources' agreement."""
    buf = io.StringIO()
    for g, state in zip(gpus, states, strict=True):
        created = g.pod.created if g.pod is not None else 2**62
        busy = g.pod is not None and g.pod.kind in (BUSY, RECENT)  # idle ones never were
        buf.write(f"{state.pk}\t{g.node * 8 + g.index}\t{created}\t{busy}\t"
                  f"{g.memory(60)}\t{g.memory(0)}\n")  # fmt: skip
    buf.seek(0)
    cur.execute("CREATE TEMP TABLE bench_plan (gpu_id bigint, h bigint, created bigint, "
                "busy boolean, mem_busy bigint, mem_idle bigint)")  # fmt: skip
    cur.copy_expert("COPY bench_plan FROM STDIN", buf)
    n = SAMPLES_PER_SLOT * 12
    sql = f"""
        INSERT INTO telemetry_gpuhistory1h ({COLUMNS})
        SELECT p.gpu_id, to_timestamp(k * {SLOT}), {n}, {n} * u, {n}, u,
               {n} * CASE WHEN u >= 5 THEN p.mem_busy ELSE p.mem_idle END, {n}, 30 + u / 3,
               {n} * (60.0 + 5 * u), {n}
        FROM bench_plan p, generate_series(%s::bigint, %s::bigint, 12) k,
             LATERAL (SELECT CASE WHEN k < p.created THEN 0
                                  WHEN p.busy THEN 55 + (p.h + 7 * k) %% 41
                                  ELSE (p.h + k) %% 4 END AS u) x
        ORDER BY k, p.gpu_id
    """  # noqa: S608 - constants of this module
    written, day = 0, 24 * 12
    for begin in range(first_hour - (days - 1) * day, first_hour, day):  # a day per statement
        cur.execute(sql, [begin, min(begin + day, first_hour) - 12])
        written += cur.rowcount
    cur.execute("DROP TABLE bench_plan")
    return written


# -- (b) Prometheus: OpenMetrics, promtool blocks, a server -------------------------------

_PLAN: tuple[list[Gpu], int] = ([], 0)  # for the forked block writers


def _labels(g: Gpu, with_pod: bool) -> dict[str, str]:
    labels = {"Hostname": node_name(g.node), "gpu": str(g.index), "UUID": g.uuid,
              "device": f"nvidia{g.index}", "modelName": PRODUCTS[g.product][1]}  # fmt: skip
    if with_pod and g.pod is not None:
        labels.update(namespace=g.pod.namespace, pod=g.pod.name, container="main")
    return labels


def _util_series(g: Gpu, ref: int, lo: int, hi: int):
    """DCGM_FI_DEV_GPU_UTIL of one GPU over slots [lo, hi): a series without pod labels
    before its pod started, one with them after (as dcgm-exporter's pod mapping does)."""
    fine = ref - FINE_SLOTS
    created = g.pod.created if g.pod is not None else hi
    for a, b, with_pod in ((lo, min(hi, created), False), (max(lo, created), hi, True)):
        points = []
        for k in range(a, b):
            u = g.util(k, ref)
            offsets = range(30, SLOT, 60) if k >= fine else (150,)
            points.extend((k * SLOT + o, u) for o in offsets)
        if points:
            yield _labels(g, with_pod), points


def _latest_series(g: Gpu, ref: int, metric: str):
    lo, hi = (ref - 2) * SLOT, (ref + FUTURE_SLOTS) * SLOT
    points = []
    for t in range(lo, hi, 120):
        u = g.util(t // SLOT, ref)
        mem = g.memory(u)
        value = {"DCGM_FI_DEV_FB_USED": mem, "DCGM_FI_DEV_FB_FREE": PRODUCTS[g.product][2] - mem,
                 "DCGM_FI_DEV_GPU_TEMP": 30 + u // 3,
                 "DCGM_FI_DEV_POWER_USAGE": 60 + 5 * u}[metric]  # fmt: skip
        points.append((t + 30, value))
    return _labels(g, True), points


def _write_part(args: tuple[int, str, str]) -> tuple[int, float]:
    """One time range of every series into its own file and its own block(s): 0 = the
    5-minute part, 1 = the 1-minute part and the latest-state metrics. The ranges do not
    overlap, so Prometheus has no vertical compaction to do after it starts."""
    part, path, data = args
    gpus, ref = _PLAN
    lo, hi = (
        (ref - HISTORY_SLOTS, ref - FINE_SLOTS)
        if part == 0
        else (ref - FINE_SLOTS, ref + FUTURE_SLOTS)
    )
    fams = [Family("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).",
                   (s for g in gpus for s in _util_series(g, ref, lo, hi)))]  # fmt: skip
    if part == 1:
        fams += [Family(m, h, (_latest_series(g, ref, m) for g in gpus)) for m, h in LATEST]
    samples = write_openmetrics(Path(path), fams)
    t0 = time.perf_counter()
    # One block per part (promtool re-reads the file once per block window otherwise).
    create_blocks(Path(path), Path(data), max_block_hours=54)
    os.unlink(path)
    return samples, time.perf_counter() - t0


def build_blocks(gpus: list[Gpu], ref: int, workdir: Path) -> dict:
    global _PLAN
    if shutil.which("promtool") is None:
        raise SystemExit("promtool is not installed (Debian package prometheus)")
    data = workdir / "prometheus"
    data.mkdir(parents=True)
    _PLAN = (gpus, ref)
    start = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(2) as pool:
        parts = pool.map(
            _write_part, [(i, str(workdir / f"part{i}.om"), str(data)) for i in (0, 1)]
        )
    return {"seconds": time.perf_counter() - start, "samples": sum(s for s, _ in parts),
            "promtool_seconds": sum(p for _, p in parts),
            "blocks": len([d for d in data.iterdir() if d.is_dir()]), "data": data}  # fmt: skip
