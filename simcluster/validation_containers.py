"""Containers of a pod spec: names, images, ports, env, mounts, probes, resources, tolerations.

Follows ``pkg/apis/core/validation/validation.go`` (v1.32): validateContainers,
validateInitContainers, validateEphemeralContainers, validateContainerCommon,
validateContainerPorts, ValidateEnv (relaxed names: RelaxedEnvironmentVariableValidation is
beta and on in v1.32), ValidateVolumeMounts (names and paths only), validatePullPolicy,
validateProbe / validateHandler, validateInitContainerRestartPolicy,
ValidateContainerResourceRequirements (via :mod:`simcluster.validation_resources`),
ValidateTolerations and validateOnlyAddedTolerations.

Fields that the real defaulting always fills (``imagePullPolicy``,
``terminationMessagePolicy``, port ``protocol``, probe periods) are checked only when set:
the simulator does not default them, and a real server would never see them empty.
"""

from __future__ import annotations

from typing import Any

from simcluster import fielderrors as fe
from simcluster.fielderrors import FieldError, child, index
from simcluster.validation_meta import (
    validate_label_name,
)
from simcluster.validation_names import (
    is_dns1123_label,
    is_valid_label_value,
    is_valid_port_name,
    is_valid_port_num,
)
from simcluster.validation_resources import (
    QuantityLookup,
    resource_requirements,
    validate_container_resource_name,
)

_PULL_POLICIES = ("Always", "IfNotPresent", "Never")
_PROTOCOLS = ("SCTP", "TCP", "UDP")
_TERMINATION_MESSAGE = ("File", "FallbackToLogsOnError")
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# EphemeralContainerCommon fields an ephemeral container may not set
# (allowedEphemeralContainerFields in the real code).
_EPHEMERAL_FORBIDDEN = (
    "ports", "resources", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle",
    "resizePolicy", "restartPolicy",
)  # fmt: skip


def _dns_label(value: str, path: str) -> list[FieldError]:
    return [fe.invalid(path, value, m) for m in is_dns1123_label(value)]


def _nonneg(value: Any, path: str) -> list[FieldError]:
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
        return [fe.invalid(path, value, "must be greater than or equal to 0")]
    return []


def _ports(ports: list[Any], path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    names: set[str] = set()
    for i, port in enumerate(ports or []):
        port = port if isinstance(port, dict) else {}
        p = index(path, i)
        name = str(port.get("name") or "")
        if name:
            msgs = is_valid_port_name(name)
            if msgs:
                errs += [fe.invalid(child(p, "name"), name, m) for m in msgs]
            elif name in names:
                errs.append(fe.duplicate(child(p, "name"), name))
            else:
                names.add(name)
        cport = port.get("containerPort") or 0
        if not cport:
            errs.append(fe.required(child(p, "containerPort")))
        elif isinstance(cport, int):
            errs += [
                fe.invalid(child(p, "containerPort"), cport, m) for m in is_valid_port_num(cport)
            ]
        hport = port.get("hostPort") or 0
        if hport and isinstance(hport, int):
            errs += [fe.invalid(child(p, "hostPort"), hport, m) for m in is_valid_port_num(hport)]
        proto = port.get("protocol")
        if proto is not None and proto not in _PROTOCOLS:
            if proto == "":
                errs.append(fe.required(child(p, "protocol")))
            else:
                errs.append(fe.not_supported(child(p, "protocol"), proto, _PROTOCOLS))
    return errs


def _env(env: list[Any], path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    for i, ev in enumerate(env or []):
        ev = ev if isinstance(ev, dict) else {}
        p = child(index(path, i), "name")
        name = str(ev.get("name") or "")
        if not name:
            errs.append(fe.required(p))
        elif any(ord(c) > 0x7E or ord(c) < 0x20 or c == "=" for c in name):
            errs.append(
                fe.invalid(
                    p,
                    name,
                    "a valid environment variable name must consist only of printable ASCII "
                    "characters other than '='",
                )
            )
    return errs


def _mounts(mounts: list[Any], path: str, volumes: set[str]) -> list[FieldError]:
    errs: list[FieldError] = []
    seen_paths: set[str] = set()
    for i, m in enumerate(mounts or []):
        m = m if isinstance(m, dict) else {}
        p = index(path, i)
        name = str(m.get("name") or "")
        if not name:
            errs.append(fe.required(child(p, "name")))
        elif name not in volumes:
            errs.append(fe.not_found(child(p, "name"), name))
        mpath = str(m.get("mountPath") or "")
        if not mpath:
            errs.append(fe.required(child(p, "mountPath")))
        elif mpath in seen_paths:
            errs.append(fe.invalid(child(p, "mountPath"), mpath, "must be unique"))
        seen_paths.add(mpath)
    return errs


def _port_num_or_name(port: Any, path: str) -> list[FieldError]:
    if isinstance(port, bool):
        return []
    if isinstance(port, int):
        return [fe.invalid(path, port, m) for m in is_valid_port_num(port)]
    if isinstance(port, str):
        return [fe.invalid(path, port, m) for m in is_valid_port_name(port)]
    return []


def handler(h: dict[str, Any], path: str) -> list[FieldError]:
    """``validateHandler``: exactly one of exec, httpGet, tcpSocket, grpc, sleep."""
    errs: list[FieldError] = []
    count = 0
    for kind in ("exec", "httpGet", "tcpSocket", "grpc", "sleep"):
        if h.get(kind) is None:
            continue
        if count:
            errs.append(fe.forbidden(child(path, kind), "may not specify more than 1 handler type"))
            continue
        count += 1
        body = h[kind] if isinstance(h[kind], dict) else {}
        kp = child(path, kind)
        if kind == "exec" and not body.get("command"):
            errs.append(fe.required(child(kp, "command")))
        elif kind in ("httpGet", "tcpSocket", "grpc"):
            errs += _port_num_or_name(body.get("port", 0), child(kp, "port"))
    if not count:
        errs.append(fe.required(path, "must specify a handler type"))
    return errs


def probe(pr: Any, path: str, success_must_be_one: bool) -> list[FieldError]:
    """``validateProbe`` plus the liveness/startup ``successThreshold`` rule."""
    if not isinstance(pr, dict):
        return []
    errs = handler(pr, path)
    for f in ("initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold",
              "failureThreshold"):  # fmt: skip
        errs += _nonneg(pr.get(f), child(path, f))
    tgps = pr.get("terminationGracePeriodSeconds")
    if isinstance(tgps, int) and tgps <= 0:
        errs.append(
            fe.invalid(child(path, "terminationGracePeriodSeconds"), tgps, "must be greater than 0")
        )
    st = pr.get("successThreshold")
    if success_must_be_one and isinstance(st, int) and st != 1:
        errs.append(fe.invalid(child(path, "successThreshold"), st, "must be 1"))
    return errs


def _lifecycle(lc: Any, path: str) -> list[FieldError]:
    errs: list[FieldError] = []
    if isinstance(lc, dict):
        for hook in ("postStart", "preStop"):
            if isinstance(lc.get(hook), dict):
                errs += handler(lc[hook], child(path, hook))
    return errs


def container_common(
    c: dict[str, Any], path: str, volumes: set[str], qty: QuantityLookup
) -> list[FieldError]:
    """``validateContainerCommon``: what every container type must satisfy."""
    errs: list[FieldError] = []
    name = str(c.get("name") or "")
    if not name:
        errs.append(fe.required(child(path, "name")))
    else:
        errs += _dns_label(name, child(path, "name"))
    if not c.get("image"):
        errs.append(fe.required(child(path, "image")))
    tmp = c.get("terminationMessagePolicy")
    if tmp is not None and tmp not in _TERMINATION_MESSAGE:
        if tmp == "":
            errs.append(fe.required(child(path, "terminationMessagePolicy")))
        else:
            errs.append(
                fe.not_supported(child(path, "terminationMessagePolicy"), tmp, _TERMINATION_MESSAGE)
            )
    errs += _ports(c.get("ports") or [], child(path, "ports"))
    errs += _env(c.get("env") or [], child(path, "env"))
    errs += _mounts(c.get("volumeMounts") or [], child(path, "volumeMounts"), volumes)
    pp = c.get("imagePullPolicy")
    if pp is not None and pp not in _PULL_POLICIES:
        if pp == "":
            errs.append(fe.required(child(path, "imagePullPolicy")))
        else:
            errs.append(fe.not_supported(child(path, "imagePullPolicy"), pp, _PULL_POLICIES))
    res = c.get("resources") if isinstance(c.get("resources"), dict) else {}
    errs += resource_requirements(
        res, child(path, "resources"), qty, validate_container_resource_name
    )
    return errs


def _image_whitespace(c: dict[str, Any], path: str) -> list[FieldError]:
    image = str(c.get("image") or "")
    if image != image.strip():
        return [
            fe.invalid(child(path, "image"), image, "must not have leading or trailing whitespace")
        ]
    return []


def containers(
    spec: dict[str, Any], path: str, volumes: set[str], qty: QuantityLookup
) -> list[FieldError]:
    """``validateContainers`` + ``validateInitContainers`` + ``validateEphemeralContainers``."""
    errs: list[FieldError] = []
    regular = spec.get("containers") or []
    cpath = child(path, "containers")
    if not regular:
        errs.append(fe.required(cpath))
    names: set[str] = set()
    for i, c in enumerate(regular):
        c = c if isinstance(c, dict) else {}
        p = index(cpath, i)
        errs += container_common(c, p, volumes, qty)
        name = str(c.get("name") or "")
        if name in names:
            errs.append(fe.duplicate(child(p, "name"), name))
        else:
            names.add(name)
        errs += _lifecycle(c.get("lifecycle"), child(p, "lifecycle"))
        errs += probe(c.get("livenessProbe"), child(p, "livenessProbe"), True)
        errs += probe(c.get("readinessProbe"), child(p, "readinessProbe"), False)
        errs += probe(c.get("startupProbe"), child(p, "startupProbe"), True)
        if c.get("restartPolicy") is not None:
            errs.append(
                fe.forbidden(child(p, "restartPolicy"), "may not be set for non-init containers")
            )
    ipath = child(path, "initContainers")
    for i, c in enumerate(spec.get("initContainers") or []):
        c = c if isinstance(c, dict) else {}
        p = index(ipath, i)
        errs += container_common(c, p, volumes, qty)
        rp = c.get("restartPolicy")
        if rp is not None and rp != "Always":
            errs.append(fe.not_supported(child(p, "restartPolicy"), rp, ["Always"]))
        name = str(c.get("name") or "")
        if name in names:
            errs.append(fe.duplicate(child(p, "name"), name))
        elif name:
            names.add(name)
        if rp == "Always":
            errs += _lifecycle(c.get("lifecycle"), child(p, "lifecycle"))
            errs += probe(c.get("livenessProbe"), child(p, "livenessProbe"), True)
            errs += probe(c.get("readinessProbe"), child(p, "readinessProbe"), False)
            errs += probe(c.get("startupProbe"), child(p, "startupProbe"), True)
        else:
            for f in ("lifecycle", "livenessProbe", "readinessProbe", "startupProbe"):
                if c.get(f) is not None:
                    errs.append(
                        fe.forbidden(
                            child(p, f),
                            "may not be set for init containers without restartPolicy=Always",
                        )
                    )
        if c.get("resizePolicy"):
            errs.append(
                fe.invalid(
                    child(p, "resizePolicy"),
                    _resize_value(c["resizePolicy"]),
                    "must not be set for init containers",
                )
            )
    epath = child(path, "ephemeralContainers")
    for i, c in enumerate(spec.get("ephemeralContainers") or []):
        c = c if isinstance(c, dict) else {}
        p = index(epath, i)
        errs += container_common(c, p, volumes, qty)
        errs += _image_whitespace(c, p)
        name = str(c.get("name") or "")
        if name in names:
            errs.append(fe.duplicate(child(p, "name"), name))
        else:
            names.add(name)
        target = c.get("targetContainerName")
        regular_names = {
            str(x.get("name")) for x in regular + list(spec.get("initContainers") or [])
        }
        if target and target not in regular_names:
            errs.append(fe.not_found(child(p, "targetContainerName"), target))
        for f in _EPHEMERAL_FORBIDDEN:
            if c.get(f) not in (None, {}, []):
                errs.append(fe.forbidden(child(p, f), "cannot be set for an Ephemeral Container"))
    return errs


def _resize_value(policies: Any) -> fe.GoSlice:
    items = []
    for rp in policies if isinstance(policies, list) else []:
        rp = rp if isinstance(rp, dict) else {}
        items.append(
            fe.GoStruct(
                "core.ContainerResizePolicy",
                (
                    ("ResourceName", str(rp.get("resourceName") or "")),
                    ("RestartPolicy", str(rp.get("restartPolicy") or "")),
                ),
            )
        )
    return fe.GoSlice("[]core.ContainerResizePolicy", tuple(items))


def only_for_pod(spec: dict[str, Any]) -> list[FieldError]:
    """``validateContainersOnlyForPod``: image whitespace for containers and init containers."""
    errs: list[FieldError] = []
    for field in ("containers", "initContainers"):
        for i, c in enumerate(spec.get(field) or []):
            if isinstance(c, dict):
                errs += _image_whitespace(c, index(child("spec", field), i))
    return errs


def tolerations(tols: Any, path: str) -> list[FieldError]:
    """``ValidateTolerations``."""
    errs: list[FieldError] = []
    for i, t in enumerate(tols or []):
        t = t if isinstance(t, dict) else {}
        p = index(path, i)
        tkey, op = str(t.get("key") or ""), str(t.get("operator") or "")
        value, effect = str(t.get("value") or ""), str(t.get("effect") or "")
        if tkey:
            errs += validate_label_name(tkey, child(p, "key"))
        if not tkey and op != "Exists":
            errs.append(
                fe.invalid(
                    child(p, "operator"),
                    op,
                    "operator must be Exists when `key` is empty, which means "
                    '"match all values and all keys"',
                )
            )
        if t.get("tolerationSeconds") is not None and effect != "NoExecute":
            errs.append(
                fe.invalid(
                    child(p, "effect"),
                    effect,
                    "effect must be 'NoExecute' when `tolerationSeconds` is set",
                )
            )
        if op in ("Equal", ""):
            msgs = is_valid_label_value(value)
            if msgs:
                errs.append(fe.invalid(child(p, "operator"), value, ";".join(msgs)))
        elif op == "Exists":
            if value:
                errs.append(
                    fe.invalid(
                        child(p, "operator"),
                        value,
                        "value must be empty when `operator` is 'Exists'",
                    )
                )
        else:
            errs.append(fe.not_supported(child(p, "operator"), op, ["Equal", "Exists"]))
        if effect and effect not in _EFFECTS:
            errs.append(fe.not_supported(child(p, "effect"), effect, _EFFECTS))
    return errs


def _toleration_key(t: Any) -> Any:
    if not isinstance(t, dict):
        return t
    return {k: v for k, v in t.items() if k != "tolerationSeconds" and v not in (None, "")}


def only_added_tolerations(new: Any, old: Any, path: str) -> list[FieldError]:
    """``validateOnlyAddedTolerations``: existing ones may change only tolerationSeconds."""
    new_keys = [_toleration_key(t) for t in new or []]
    for o in old or []:
        if _toleration_key(o) not in new_keys:
            return [
                fe.forbidden(
                    path, "existing toleration can not be modified except its tolerationSeconds"
                )
            ]
    return tolerations(new, path)


def taint_effect(effect: str, allow_empty: bool, path: str) -> list[FieldError]:
    """``validateTaintEffect``."""
    if not allow_empty and not effect:
        return [fe.required(path)]
    if effect not in _EFFECTS:
        return [fe.not_supported(path, effect, _EFFECTS)]
    return []
