"""Build the real control plane's binaries from the Go modules under ``k8s/`` (``make k8s``).

What is built, and from which module (versions pinned by each module's go.mod and go.sum):

- ``k8s/kube``: kube-apiserver, kube-controller-manager, kube-scheduler (k8s.io/kubernetes),
  stamped with the release version as Kubernetes' own hack/lib/version.sh does;
- ``k8s/etcd``: etcd (go.etcd.io/etcd/server/v3's etcdmain);
- ``k8s/kwok``: kwok, the fake kubelet (sigs.k8s.io/kwok);
- ``k8s/kueue``: Kueue's controller manager (sigs.k8s.io/kueue), and its CRDs copied from the
  same module.

The binaries go to a cache directory keyed by the Go version and the modules' go.mod/go.sum
(``~/.cache/gpu-portal/k8s/<key>``, or ``$GPU_PORTAL_K8S_CACHE``), shared by every clone on the
machine. A build writes into a temporary sibling directory and renames it into place, so a
half-finished build is never used. Standard library only: ``make k8s`` runs it before the venv.
"""

from __future__ import annotations

import hashlib
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULES_DIR = ROOT / "k8s"
# Bump when the way binaries are built changes (flags, layout), so old caches are not reused.
BUILD_FORMAT = "2"
MIN_GO = (1, 24)


@dataclass(frozen=True)
class Target:
    module: str  # directory under k8s/
    packages: tuple[str, ...]
    version_of: str = ""  # module whose version is stamped into the binaries (-X ldflags)


TARGETS = (
    Target(
        "kube",
        (
            "k8s.io/kubernetes/cmd/kube-apiserver",
            "k8s.io/kubernetes/cmd/kube-controller-manager",
            "k8s.io/kubernetes/cmd/kube-scheduler",
        ),
        version_of="k8s.io/kubernetes",
    ),
    Target("etcd", (".",)),
    # kwok's pkg/consts.Version already reads its release
    Target("kwok", ("sigs.k8s.io/kwok/cmd/kwok",)),
    Target("kueue", ("sigs.k8s.io/kueue/cmd/kueue",), version_of="sigs.k8s.io/kueue"),
)
BINARIES = (
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "etcd",
    "kwok",
    "kueue",
)


class BuildError(RuntimeError):
    """The control plane could not be built; the message says why (Go missing, a module error)."""


def go_binary() -> str | None:
    """The ``go`` command, from PATH or Go's default install location."""
    found = shutil.which("go")
    if found:
        return found
    default = Path("/usr/local/go/bin/go")
    return str(default) if default.exists() else None


def go_version(go: str) -> tuple[int, int] | None:
    out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=False)
    match = re.match(r"go(\d+)\.(\d+)", out.stdout.strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


def required_version(module_dir: Path, module: str) -> str:
    """The version of ``module`` that ``module_dir``'s go.mod requires."""
    text = (module_dir / "go.mod").read_text()
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", text, re.M)
    if not match:
        raise BuildError(f"k8s/{module_dir.name}/go.mod does not require {module}")
    return match.group(1)


def versions() -> dict[str, str]:
    """The pinned modules' versions: {'kubernetes': 'v1.36.3', 'etcd': ..., ...}."""
    return {
        "kubernetes": required_version(MODULES_DIR / "kube", "k8s.io/kubernetes"),
        "etcd": required_version(MODULES_DIR / "etcd", "go.etcd.io/etcd/server/v3"),
        "kwok": required_version(MODULES_DIR / "kwok", "sigs.k8s.io/kwok"),
        "kueue": required_version(MODULES_DIR / "kueue", "sigs.k8s.io/kueue"),
    }


def cache_root() -> Path:
    configured = os.environ.get("GPU_PORTAL_K8S_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpu-portal" / "k8s"


def cache_key(go: str | None) -> str:
    digest = hashlib.sha256(BUILD_FORMAT.encode())
    if go:
        digest.update(subprocess.run([go, "env", "GOVERSION"], capture_output=True).stdout)
    for target in TARGETS:
        for name in ("go.mod", "go.sum", "main.go"):
            path = MODULES_DIR / target.module / name
            if path.exists():
                digest.update(f"{target.module}/{name}\0".encode())
                digest.update(path.read_bytes())
    v = versions()
    return f"k8s-{v['kubernetes']}-kueue-{v['kueue']}-{digest.hexdigest()[:12]}"


def installed_dir(go: str | None = None) -> Path | None:
    """The cache directory holding every binary, or None when they are not built yet."""
    go = go or go_binary()
    if go is None:
        return None
    directory = cache_root() / cache_key(go)
    bin_dir = directory / "bin"
    assets = {name for *_, name in ASSETS}
    if all((bin_dir / name).is_file() for name in BINARIES) and all(
        (directory / name).exists() for name in assets
    ):
        return directory
    return None


def _ldflags(target: Target) -> str:
    """-s -w, plus each project's own version stamp (what ``--version`` and /version print)."""
    flags = ["-s", "-w"]
    if not target.version_of:
        return " ".join(flags)
    version = required_version(MODULES_DIR / target.module, target.version_of)
    stamp: list[tuple[str, str]] = []
    if target.module == "kube":  # hack/lib/version.sh kube::version::ldflags
        major, minor = re.match(r"v(\d+)\.(\d+)", version).groups()
        values = {"gitVersion": version, "gitMajor": major, "gitMinor": minor,
                  "gitTreeState": "clean"}  # fmt: skip
        for package in ("k8s.io/client-go/pkg/version", "k8s.io/component-base/version"):
            stamp += [(f"{package}.{key}", value) for key, value in values.items()]
    elif target.module == "kueue":  # Kueue's Makefile LD_FLAGS
        stamp.append(("sigs.k8s.io/kueue/pkg/version.GitVersion", version))
    flags += [f"-X '{name}={value}'" for name, value in stamp]
    return " ".join(flags)


class _Progress:
    """Prints elapsed time every 15 s while a long step runs (a cold build takes many minutes)."""

    def __init__(self, label: str, started: float):
        self.label, self.started = label, started
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(15):
            elapsed = time.monotonic() - self.started
            print(f"  ... {self.label} ({elapsed:.0f} s elapsed)", flush=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()


def _run_go(go: str, args: list[str], cwd: Path, label: str, started: float) -> None:
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod -buildvcs=false")
    with _Progress(label, started):
        proc = subprocess.run(
            [go, *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
        )
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-40:])
        raise BuildError(f"{label} failed (go {' '.join(args[:2])} in k8s/{cwd.name}):\n{tail}")


def _module_dir(go: str, target: str, module: str) -> Path:
    proc = subprocess.run(
        [go, "list", "-m", "-f", "{{.Dir}}", module],
        cwd=MODULES_DIR / target,
        capture_output=True,
        text=True,
        check=False,
    )
    directory = Path(proc.stdout.strip())
    if proc.returncode != 0 or not directory.is_dir():
        raise BuildError(f"{module} is not in the module cache: {proc.stderr.strip()}")
    return directory


# Files the harness needs from the same modules the binaries came from:
# (target, module, source directory or file in the module, destination in the cache).
ASSETS = (
    ("kueue", "sigs.k8s.io/kueue", "config/components/crd/bases", "crds"),
    ("kueue", "sigs.k8s.io/kueue", "config/components/webhook/manifests.yaml", "webhooks.yaml"),
    ("kwok", "sigs.k8s.io/kwok", "kustomize/stage/node/fast", "kwok-stages"),
    ("kwok", "sigs.k8s.io/kwok", "kustomize/stage/node/heartbeat-with-lease", "kwok-stages"),
    ("kwok", "sigs.k8s.io/kwok", "kustomize/stage/pod/fast", "kwok-stages"),
)


def _copy_assets(go: str, dest: Path) -> None:
    """Kueue's CRDs and webhook manifests, kwok's stages: from the modules built from."""
    for target, module, source, name in ASSETS:
        path = _module_dir(go, target, module) / source
        if path.is_file():
            shutil.copy2(path, dest / name)
            continue
        (dest / name).mkdir(parents=True, exist_ok=True)
        for item in sorted(path.glob("*.yaml")):
            if item.name != "kustomization.yaml":
                shutil.copy2(item, dest / name / item.name)


def build(force: bool = False, out=print) -> Path:
    """Build every binary into the cache unless it is there already; returns the cache directory."""
    go = go_binary()
    if go is None:
        raise BuildError("Go is not installed (Go 1.24 or newer builds the real control plane)")
    version = go_version(go)
    if version is None or version < MIN_GO:
        raise BuildError(f"Go {MIN_GO[0]}.{MIN_GO[1]} or newer is needed; found {version}")
    existing = installed_dir(go)
    if existing and not force:
        out(f"Control plane binaries are built: {existing}")
        return existing
    target_dir = cache_root() / cache_key(go)
    target_dir.parent.mkdir(parents=True, exist_ok=True)
    if not force and all((target_dir / "bin" / name).is_file() for name in BINARIES):
        # Binaries built by an older layout: only the assets are missing.
        staging = Path(tempfile.mkdtemp(prefix=".assets-", dir=target_dir))
        _copy_assets(go, staging)
        for item in staging.iterdir():
            if not (target_dir / item.name).exists():
                os.replace(item, target_dir / item.name)
        shutil.rmtree(staging, ignore_errors=True)
        out(f"Control plane binaries are built: {target_dir}")
        return target_dir
    v = versions()
    out(
        f"Building the control plane (kubernetes {v['kubernetes']}, etcd {v['etcd']}, "
        f"kwok {v['kwok']}, kueue {v['kueue']}) into {target_dir}; the first build takes "
        "a while (see docs/benchmarks.md), later ones reuse the cache"
    )
    started = time.monotonic()
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=target_dir.parent))
    try:
        bin_dir = staging / "bin"
        bin_dir.mkdir()
        for target in TARGETS:
            step_started = time.monotonic()
            label = f"k8s/{target.module}"
            _run_go(go, ["mod", "download"], MODULES_DIR / target.module, label, started)
            args = ["build", "-trimpath", "-ldflags", _ldflags(target), "-o"]
            if target.packages == (".",):
                args += [str(bin_dir / target.module), "."]
            else:
                args += [str(bin_dir) + "/", *target.packages]
            _run_go(go, args, MODULES_DIR / target.module, label, started)
            out(f"  built {label} in {time.monotonic() - step_started:.0f} s")
        _copy_assets(go, staging)
        (staging / "versions").write_text("".join(f"{k}={val}\n" for k, val in v.items()))
        staging.chmod(0o755)  # mkdtemp's 0700: every user's clones share the cache
        if target_dir.exists():
            shutil.rmtree(target_dir)
        os.replace(staging, target_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    out(
        f"Control plane built in {time.monotonic() - started:.0f} s "
        f"(largest process {peak_mib:.0f} MiB): {target_dir}"
    )
    return target_dir


def main(argv: list[str]) -> int:
    try:
        build(force="--force" in argv)
    except BuildError as exc:
        print(f"make k8s: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
