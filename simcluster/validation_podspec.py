"""The PodSpec of a Pod: ``ValidatePodSpec`` and the pod-specific annotations.

Follows ``pkg/apis/core/validation/validation.go`` (v1.32): ValidatePodSpec (volumes by name
and source count only, containers via :mod:`simcluster.validation_containers`,
restartPolicy, dnsPolicy, nodeSelector, security-context id ranges, imagePullSecrets,
node/pod (anti-)affinity, dnsConfig, readiness and scheduling gates, topology spread
constraints, serviceAccountName, nodeName, activeDeadlineSeconds, hostname/subdomain,
tolerations, hostAliases, priorityClassName, runtimeClassName, preemptionPolicy, overhead,
os) and ValidatePodSpecificAnnotations (mirror pod, pod-deletion-cost, seccomp, AppArmor).
"""

from __future__ import annotations

import ipaddress
from typing import Any

from simcluster import fielderrors as fe
from simcluster import validation_containers as vc
from simcluster.fielderrors import FieldError, child, index, key
from simcluster.validation_affinity import affinity
from simcluster.validation_meta import validate_labels
from simcluster.validation_names import (
    inclusive_range_error,
    is_dns1123_label,
    is_dns1123_subdomain,
    is_qualified_name,
    name_is_dns_subdomain,
)
from simcluster.validation_resources import QuantityLookup, resource_requirements
from simcluster.validation_resources import validate_container_resource_name as _ctr_res_name

MAX_INT32 = 2**31 - 1
_RESTART = ("Always", "OnFailure", "Never")
_DNS = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")
_VOLUME_SOURCES = (
    "emptyDir", "hostPath", "gitRepo", "gcePersistentDisk", "awsElasticBlockStore", "secret",
    "nfs", "iscsi", "glusterfs", "flocker", "persistentVolumeClaim", "rbd", "cinder", "cephfs",
    "quobyte", "downwardAPI", "fc", "flexVolume", "configMap", "azureFile", "vsphereVolume",
    "photonPersistentDisk", "portworxVolume", "azureDisk", "storageos", "projected", "scaleIO",
    "csi", "ephemeral", "image",
)  # fmt: skip
# validateVolumeSource's "may not specify more than 1 volume type" paths (Go's spellings).
_SOURCE_PATH = {"cephfs": "cephFS", "downwardAPI": "downwarAPI"}
_SECCOMP_POD = "seccomp.security.alpha.kubernetes.io/pod"
_SECCOMP_CTR = "container.seccomp.security.alpha.kubernetes.io/"
_APPARMOR_CTR = "container.apparmor.security.beta.kubernetes.io/"


def names_errors(value: str, path: str, fn: Any) -> list[FieldError]:
    return [fe.invalid(path, value, m) for m in fn(value, False)]


def _volumes(vols: Any) -> tuple[set[str], list[FieldError]]:
    errs: list[FieldError] = []
    names: set[str] = set()
    for i, vol in enumerate(vols or []):
        vol = vol if isinstance(vol, dict) else {}
        p = index("spec.volumes", i)
        el: list[FieldError] = []
        count = 0
        for src in _VOLUME_SOURCES:
            if vol.get(src) is None:
                continue
            if count:
                el.append(
                    fe.forbidden(
                        child(p, _SOURCE_PATH.get(src, src)),
                        "may not specify more than 1 volume type",
                    )
                )
            count += 1
        if not count:
            el.append(fe.required(p, "must specify a volume type"))
        name = str(vol.get("name") or "")
        if not name:
            el.append(fe.required(child(p, "name")))
        else:
            el += [fe.invalid(child(p, "name"), name, m) for m in is_dns1123_label(name)]
        if name in names:
            el.append(fe.duplicate(child(p, "name"), name))
        if not el:
            names.add(name)
        errs += el
    return names, errs


def ip_errors(value: str, path: str) -> list[FieldError]:
    try:
        ipaddress.ip_address(value)
        return []
    except ValueError:
        return [
            fe.invalid(path, value, "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)")
        ]


def _security_context(sc: Any, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    if not isinstance(sc, dict):
        return errs
    for f in ("fsGroup", "runAsUser", "runAsGroup"):
        v = sc.get(f)
        if isinstance(v, int) and not 0 <= v <= MAX_INT32:
            errs.append(fe.invalid(child(path, f), v, inclusive_range_error(0, MAX_INT32)))
    for i, g in enumerate(sc.get("supplementalGroups") or []):
        if isinstance(g, int) and not 0 <= g <= MAX_INT32:
            errs.append(
                fe.invalid(
                    index(child(path, "supplementalGroups"), i),
                    g,
                    inclusive_range_error(0, MAX_INT32),
                )
            )
    return errs


def _dns_config(cfg: Any, policy: Any, path: str) -> list[FieldError]:
    if policy == "None":
        if not isinstance(cfg, dict):
            return [fe.required(path, "must provide `dnsConfig` when `dnsPolicy` is None")]
        if not cfg.get("nameservers"):
            return [
                fe.required(
                    child(path, "nameservers"),
                    "must provide at least one DNS nameserver when `dnsPolicy` is None",
                )
            ]
    errs: list[FieldError] = []
    if not isinstance(cfg, dict):
        return errs
    ns = [str(x) for x in cfg.get("nameservers") or []]
    if len(ns) > 3:
        errs.append(
            fe.invalid(
                child(path, "nameservers"),
                fe.go_strings(ns),
                "must not have more than 3 nameservers",
            )
        )
    for i, n in enumerate(ns):
        errs += ip_errors(n, index(child(path, "nameservers"), i))
    searches = [str(x) for x in cfg.get("searches") or []]
    if len(searches) > 32:
        errs.append(
            fe.invalid(
                child(path, "searches"),
                fe.go_strings(searches),
                "must not have more than 32 search paths",
            )
        )
    if len(" ".join(searches)) > 2048:
        errs.append(
            fe.invalid(
                child(path, "searches"),
                fe.go_strings(searches),
                "must not have more than 2048 characters (including spaces) in the search list",
            )
        )
    for i, s in enumerate(searches):
        if s != ".":
            s = s.removesuffix(".")
            errs += [
                fe.invalid(index(child(path, "searches"), i), s, m) for m in is_dns1123_subdomain(s)
            ]
    for i, opt in enumerate(cfg.get("options") or []):
        if not (opt or {}).get("name"):
            errs.append(fe.required(index(child(path, "options"), i), "must not be empty"))
    return errs


def _topology_spread(tscs: Any, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    tscs = [t if isinstance(t, dict) else {} for t in tscs or []]
    for i, t in enumerate(tscs):
        p = index(path, i)
        skew = t.get("maxSkew") or 0
        if not isinstance(skew, int) or skew <= 0:
            errs.append(fe.invalid(child(p, "maxSkew"), skew, "must be greater than zero"))
        tk = str(t.get("topologyKey") or "")
        if not tk:
            errs.append(fe.required(child(p, "topologyKey"), "can not be empty"))
        elif is_qualified_name(tk):
            errs.append(fe.invalid(child(p, "topologyKey"), tk, ";".join(is_qualified_name(tk))))
        wu = str(t.get("whenUnsatisfiable") or "")
        if wu not in ("DoNotSchedule", "ScheduleAnyway"):
            errs.append(
                fe.not_supported(
                    child(p, "whenUnsatisfiable"), wu, ["DoNotSchedule", "ScheduleAnyway"]
                )
            )
        for later in tscs[i + 1 :]:
            if (later.get("topologyKey"), later.get("whenUnsatisfiable")) == (
                t.get("topologyKey"),
                wu,
            ):
                errs.append(
                    fe.duplicate(child(p, "{topologyKey, whenUnsatisfiable}"), f"{{{tk}, {wu}}}")
                )
                break
    return errs


def pod_spec(spec: dict[str, Any], qty: QuantityLookup) -> list[FieldError]:
    """``ValidatePodSpec`` (for a Pod, ``spec`` path)."""
    p = "spec"
    errs: list[FieldError] = []
    if spec.get("terminationGracePeriodSeconds") is None:
        errs.append(fe.required(child(p, "terminationGracePeriodSeconds")))
    vols, verrs = _volumes(spec.get("volumes"))
    errs += verrs
    errs += vc.containers(spec, p, vols, qty)
    sc = spec.get("securityContext") if isinstance(spec.get("securityContext"), dict) else {}
    if spec.get("hostNetwork"):
        for i, c in enumerate(spec.get("containers") or []):
            for j, port in enumerate((c or {}).get("ports") or []):
                hp, cp = (port or {}).get("hostPort") or 0, (port or {}).get("containerPort") or 0
                if hp != cp:
                    errs.append(
                        fe.invalid(
                            child(
                                index(child(index(child(p, "containers"), i), "ports"), j),
                                "hostPort",
                            ),
                            hp,
                            "must match `containerPort` when `hostNetwork` is true",
                        )
                    )
    rp = spec.get("restartPolicy")
    if rp not in _RESTART:
        errs.append(
            fe.required(child(p, "restartPolicy"))
            if not rp
            else fe.not_supported(child(p, "restartPolicy"), rp, _RESTART)
        )
    dp = spec.get("dnsPolicy")
    if dp is not None and dp not in _DNS:
        errs.append(
            fe.required(child(p, "dnsPolicy"))
            if not dp
            else fe.not_supported(child(p, "dnsPolicy"), dp, _DNS)
        )
    errs += validate_labels(spec.get("nodeSelector"), child(p, "nodeSelector"))
    errs += _security_context(sc, child(p, "securityContext"))
    for i, ref in enumerate(spec.get("imagePullSecrets") or []):
        if isinstance(ref, dict) and set(ref) - {"name"}:
            value = fe.GoStruct(
                "core.LocalObjectReference", (("Name", str(ref.get("name") or "")),)
            )
            errs.append(
                fe.invalid(index(child(p, "imagePullSecrets"), i), value, "only name may be set")
            )
    errs += affinity(spec.get("affinity"), child(p, "affinity"))
    errs += _dns_config(spec.get("dnsConfig"), dp, child(p, "dnsConfig"))
    for i, g in enumerate(spec.get("readinessGates") or []):
        ct = str((g or {}).get("conditionType") or "")
        errs += [
            fe.invalid(child(index(child(p, "readinessGates"), i), "conditionType"), ct, m)
            for m in is_qualified_name(ct)
        ]
    seen_gates: set[str] = set()
    for i, g in enumerate(spec.get("schedulingGates") or []):
        name = str((g or {}).get("name") or "")
        gp = index(child(p, "schedulingGates"), i)
        errs += [fe.invalid(gp, name, m) for m in is_qualified_name(name)]
        if name in seen_gates:
            errs.append(fe.duplicate(gp, name))
        seen_gates.add(name)
    errs += _topology_spread(
        spec.get("topologySpreadConstraints"), child(p, "topologySpreadConstraints")
    )
    for f, fn in (
        ("serviceAccountName", name_is_dns_subdomain),
        ("nodeName", name_is_dns_subdomain),
    ):
        if spec.get(f):
            errs += names_errors(str(spec[f]), child(p, f), fn)
    ads = spec.get("activeDeadlineSeconds")
    if isinstance(ads, int) and not 1 <= ads <= MAX_INT32:
        errs.append(
            fe.invalid(child(p, "activeDeadlineSeconds"), ads, inclusive_range_error(1, MAX_INT32))
        )
    for f in ("hostname", "subdomain"):
        if spec.get(f):
            errs += [
                fe.invalid(child(p, f), str(spec[f]), m) for m in is_dns1123_label(str(spec[f]))
            ]
    if spec.get("tolerations"):
        errs += vc.tolerations(spec["tolerations"], child(p, "tolerations"))
    for i, ha in enumerate(spec.get("hostAliases") or []):
        ha = ha if isinstance(ha, dict) else {}
        hp = index(child(p, "hostAliases"), i)
        errs += ip_errors(str(ha.get("ip") or ""), child(hp, "ip"))
        for j, h in enumerate(ha.get("hostnames") or []):
            errs += [
                fe.invalid(index(child(hp, "hostnames"), j), str(h), m)
                for m in is_dns1123_subdomain(str(h))
            ]
    if spec.get("priorityClassName"):
        errs += names_errors(
            str(spec["priorityClassName"]), child(p, "priorityClassName"), name_is_dns_subdomain
        )
    if spec.get("runtimeClassName") is not None:
        errs += names_errors(
            str(spec["runtimeClassName"]), child(p, "runtimeClassName"), name_is_dns_subdomain
        )
    pp = spec.get("preemptionPolicy")
    if pp is not None and pp not in ("PreemptLowerPriority", "Never"):
        pp_path = child(p, "preemptionPolicy")
        valid = ["PreemptLowerPriority", "Never"]
        errs.append(fe.not_supported(pp_path, pp, valid) if pp else fe.required(pp_path))
    if spec.get("overhead") is not None:
        errs += resource_requirements(
            {"limits": spec["overhead"]}, child(p, "overhead"), qty, _ctr_res_name
        )
    os_ = spec.get("os")
    if isinstance(os_, dict) and os_.get("name") not in ("linux", "windows"):
        errs.append(
            fe.not_supported(
                child(p, "os", "name"), str(os_.get("name") or ""), ["linux", "windows"]
            )
        )
    return errs


def pod_annotations(meta: dict[str, Any], spec: dict[str, Any]) -> list[FieldError]:
    """``ValidatePodSpecificAnnotations`` (mirror pod, deletion cost, seccomp, AppArmor)."""
    errs: list[FieldError] = []
    path = "metadata.annotations"
    ann = meta.get("annotations") or {}
    mirror = "kubernetes.io/config.mirror"
    if mirror in ann and not spec.get("nodeName"):
        errs.append(
            fe.invalid(
                key(path, mirror),
                ann[mirror],
                "must set spec.nodeName if mirror pod annotation is set",
            )
        )
    cost = "controller.kubernetes.io/pod-deletion-cost"
    if cost in ann:
        v = str(ann[cost])
        ok = bool(v) and (v[0] == "-" or v == "0" or "1" <= v[0] <= "9")
        try:
            ok = ok and -(2**31) <= int(v) < 2**31
        except ValueError:
            ok = False
        if not ok:
            errs.append(fe.invalid(key(path, cost), v, "must be a 32bit integer"))
    for k, v in ann.items():
        if k == _SECCOMP_POD or k.startswith(_SECCOMP_CTR):
            v = str(v)
            if not (
                v in ("runtime/default", "docker/default", "unconfined")
                or v.startswith("localhost/")
            ):
                errs.append(fe.invalid(child(path, k), v, "must be a valid seccomp profile"))
        if k.startswith(_APPARMOR_CTR):
            cname = k[len(_APPARMOR_CTR) :]
            all_c = (spec.get("containers") or []) + (spec.get("initContainers") or [])
            if cname not in {str((c or {}).get("name")) for c in all_c}:
                errs.append(fe.invalid(key(path, k), cname, "container not found"))
            v = str(v)
            if v and v not in ("runtime/default", "unconfined") and not v.startswith("localhost/"):
                errs.append(
                    fe.invalid(key(path, k), v, f"invalid AppArmor profile name: {fe.go_quote(v)}")
                )
    return errs
