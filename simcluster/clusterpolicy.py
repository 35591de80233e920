"""``clusterpolicies.nvidia.com/v1`` ClusterPolicy: the GPU Operator's CRD, as served.

The schema is the part of the CRD this simulator models, transcribed from NVIDIA/gpu-operator
v26.7.0 ``deployments/gpu-operator/crds/nvidia.com_clusterpolicies.yaml`` (generated from
``api/nvidia/v1/clusterpolicy_types.go``): ``spec.mig.strategy``, ``spec.migManager``
(``enabled``, ``config.{name,default}``, ``gpuClientsConfig.name``, ``env``, ``args`` ...)
and ``status.{state,namespace,conditions}``. Every other top-level ``spec`` field of the
CRD (``driver``, ``toolkit``, ``devicePlugin``, ...) is kept as an opaque object, as if it
were ``x-kubernetes-preserve-unknown-fields``; fields the CRD does not declare at all are
pruned (apiextensions-apiserver ``pkg/apiserver/schema/pruning``), with a warning by
default and a 400 under ``fieldValidation=Strict``, as a real 1.32 API server does for
CRDs. Values of the wrong JSON type are rejected (a real CRD answers 422 from the
structural schema's validation; here the built-ins' 400 decoding error is reused).

The classes below look like the official client's generated models (``openapi_types``,
``attribute_map``, property docstrings), so :mod:`simcluster.schema` builds the definitions
``com.nvidia.v1.ClusterPolicy`` ... from them like any built-in type (decoding, merge and
apply patches, OpenAPI v3 at ``/openapi/v3/apis/nvidia.com/v1``, ``kubectl explain``).
"""

from __future__ import annotations

from typing import Any

from simcluster.fielderrors import FieldError, invalid, not_supported, required

PACKAGE = "com.nvidia.v1"  # the definition-name prefix kube-openapi gives CRDs of nvidia.com
CAMEL = "NvidiaV1"  # the class-name prefix of the model classes below
GROUP, VERSION, KIND = "nvidia.com", "v1", "ClusterPolicy"

# ClusterPolicySpec's other fields (CRD ``spec.properties``), kept as opaque objects.
_OPAQUE_SPEC = [
    "ccManager",
    "cdi",
    "daemonsets",
    "dcgm",
    "dcgmExporter",
    "devicePlugin",
    "driver",
    "gdrcopy",
    "gds",
    "gfd",
    "hostPaths",
    "kataManager",
    "kataSandboxDevicePlugin",
    "nodeStatusExporter",
    "operator",
    "psa",
    "psp",
    "sandboxDevicePlugin",
    "sandboxWorkloads",
    "toolkit",
    "validator",
    "vfioManager",
    "vgpuDeviceManager",
    "vgpuManager",
]
# CRD ``spec.required`` (clusterpolicy_types.go: the fields without omitempty/+optional)
REQUIRED_SPEC = (
    "daemonsets",
    "dcgm",
    "dcgmExporter",
    "devicePlugin",
    "driver",
    "gfd",
    "nodeStatusExporter",
    "operator",
    "toolkit",
)
# typedefs.FIELDS facts: the CRD's required fields (kept even when empty, as in the CRD)
CRD_FIELDS = {
    f"{PACKAGE}.ClusterPolicySpec": {k: "req" for k in REQUIRED_SPEC},
    f"{PACKAGE}.ClusterPolicyStatus": {"state": "req"},
    f"{PACKAGE}.EnvVar": {"name": "req"},
}
MIG_STRATEGIES = ("none", "single", "mixed")  # CRD enum of spec.mig.strategy
CONFIG_DEFAULTS = ("all-disabled", "")  # CRD enum of spec.migManager.config.default
STATES = ("ignored", "ready", "notReady")  # CRD enum of status.state


def _model(name: str, fields: dict[str, tuple[str, str]]) -> type:
    """A class shaped like a generated client model: ``{json: (client type, description)}``."""
    ns: dict[str, Any] = {
        "openapi_types": {k: t for k, (t, _) in fields.items()},
        "attribute_map": {k: k for k in fields},
    }
    for k, (_, desc) in fields.items():
        doc = f"Gets the {k} of this {name}.  # noqa: E501\n\n{desc}  # noqa: E501\n\n:return:"
        ns[k] = property(lambda self: None, doc=doc)
    return type(CAMEL + name, (), ns)


_STR, _BOOL, _OBJ = "str", "bool", "object"
MODELS: dict[str, type] = {
    cls.__name__: cls
    for cls in (
        _model(
            "ClusterPolicy",
            {
                "apiVersion": (_STR, "APIVersion defines the versioned schema of this object."),
                "kind": (_STR, "Kind is the REST resource this object represents."),
                "metadata": ("V1ObjectMeta", "Standard object's metadata."),
                "spec": (CAMEL + "ClusterPolicySpec", "ClusterPolicySpec: the desired state."),
                "status": (CAMEL + "ClusterPolicyStatus", "The observed state."),
            },
        ),
        _model(
            "ClusterPolicyList",
            {
                "apiVersion": (_STR, "APIVersion of this list."),
                "items": (f"list[{CAMEL}ClusterPolicy]", "List of clusterpolicies."),
                "kind": (_STR, "Kind of this list."),
                "metadata": ("V1ListMeta", "Standard list metadata."),
            },
        ),
        _model(
            "ClusterPolicySpec",
            dict(
                sorted(
                    {
                        **{k: (_OBJ, f"{k} (not modelled by simcluster)") for k in _OPAQUE_SPEC},
                        "mig": (CAMEL + "MIGSpec", "MIG spec"),
                        "migManager": (
                            CAMEL + "MIGManagerSpec",
                            "MIGManager for configuration to deploy MIG Manager",
                        ),
                    }.items()
                )
            ),
        ),
        _model(
            "MIGSpec",
            {"strategy": (_STR, "Optional: MIGStrategy to apply for GFD and NVIDIA Device Plugin")},
        ),
        _model(
            "MIGManagerSpec",
            {
                "args": ("list[str]", "Optional: List of arguments"),
                "config": (
                    CAMEL + "MIGPartedConfigSpec",
                    "Optional: Custom mig-parted configuration for NVIDIA MIG Manager container",
                ),
                "enabled": (_BOOL, "Enabled indicates if deployment of NVIDIA MIG Manager is on"),
                "env": (f"list[{CAMEL}EnvVar]", "Optional: List of environment variables"),
                "gpuClientsConfig": (
                    CAMEL + "MIGGPUClientsConfigSpec",
                    "Optional: Custom gpu-clients configuration for NVIDIA MIG Manager",
                ),
                "hostNetwork": (_BOOL, "HostNetwork: the pod uses the host's network namespace"),
                "image": (_STR, "NVIDIA MIG Manager image name"),
                "imagePullPolicy": (_STR, "Image pull policy"),
                "imagePullSecrets": ("list[str]", "Image pull secrets"),
                "repository": (_STR, "NVIDIA MIG Manager image repository"),
                "resources": (_OBJ, "Optional: resources requests and limits for each pod"),
                "version": (_STR, "NVIDIA MIG Manager image tag"),
            },
        ),
        _model(
            "MIGPartedConfigSpec",
            {
                "default": (
                    _STR,
                    "Default MIG config to be applied on the node, when there is no config "
                    "specified with the node label nvidia.com/mig.config",
                ),
                "name": (
                    _STR,
                    "ConfigMap name. If not specified, MIG configuration will be dynamically "
                    "generated from hardware.",
                ),
            },
        ),
        _model("MIGGPUClientsConfigSpec", {"name": (_STR, "ConfigMap name")}),
        _model(
            "EnvVar",
            {
                "name": (_STR, "Name of the environment variable."),
                "value": (_STR, "Value of the environment variable."),
            },
        ),
        _model(
            "ClusterPolicyStatus",
            {
                "conditions": ("list[V1Condition]", "Conditions of the ClusterPolicy."),
                "namespace": (_STR, "Namespace in which the operator is installed"),
                "state": (_STR, "State indicates status of ClusterPolicy"),
            },
        ),
    )
}
DESCRIPTION = "ClusterPolicy is the Schema for the clusterpolicies API"


# ------------------------------------------------------------ validation
def _d(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _enum(path: str, value: Any, allowed: tuple[str, ...]) -> list[FieldError]:
    if value is None or value in allowed:
        return []
    return [not_supported(path, value, list(allowed))]


def validate(obj: dict[str, Any], _qty: Any = None) -> list[FieldError]:
    """The CRD's structural-schema checks for the modelled fields (required, enums)."""
    errs: list[FieldError] = []
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [required("spec", "")]
    for k in REQUIRED_SPEC:
        if k not in spec:
            errs.append(required(f"spec.{k}", ""))
    errs += _enum("spec.mig.strategy", _d(spec.get("mig")).get("strategy"), MIG_STRATEGIES)
    mm = _d(spec.get("migManager"))
    cfg = _d(mm.get("config"))
    errs += _enum("spec.migManager.config.default", cfg.get("default"), CONFIG_DEFAULTS)
    for i, env in enumerate(mm.get("env") or []):
        if not _d(env).get("name"):
            errs.append(required(f"spec.migManager.env[{i}].name", ""))
    status = obj.get("status")
    if isinstance(status, dict):
        state = status.get("state")
        if state is None:
            errs.append(required("status.state", ""))
        else:
            errs += _enum("status.state", state, STATES)
    image = mm.get("image")
    if isinstance(image, str) and image == "":
        errs.append(invalid("spec.migManager.image", image, "should match '[a-zA-Z0-9\\-]+'"))
    return errs


def validate_update(new: dict[str, Any], _old: dict[str, Any], qty: Any = None) -> list[FieldError]:
    return validate(new, qty)


def default(obj: dict[str, Any]) -> None:
    """The CRD's defaults (``spec.migManager.config.default: all-disabled`` when a config
    block is given, apiextensions structural defaulting)."""
    cfg = _d(_d(_d(obj.get("spec")).get("migManager")).get("config"))
    if cfg and "default" not in cfg:
        cfg["default"] = "all-disabled"


# ------------------------------------------------------------ reading it
def mig_settings(obj: dict[str, Any] | None) -> dict[str, Any]:
    """What the operator takes from a ClusterPolicy for mig-manager (object_controls.go
    ``TransformMIGManager``): custom config name, default, strategy, enabled, WITH_REBOOT."""
    spec = _d(_d(obj).get("spec"))
    mm = _d(spec.get("migManager"))
    cfg = _d(mm.get("config"))
    env = {str(_d(e).get("name")): str(_d(e).get("value") or "") for e in mm.get("env") or []}
    return {
        "enabled": mm.get("enabled", True) is not False,
        "config_name": str(cfg.get("name") or ""),
        "default": str(cfg.get("default", "all-disabled")),
        "strategy": str(_d(spec.get("mig")).get("strategy") or "single"),
        "with_reboot": env.get("WITH_REBOOT", "").lower() == "true",
        "env": env,
    }


def cluster_policy_object(spec: dict[str, Any], ts: str, uid: str) -> dict[str, Any]:
    """The ``cluster-policy`` a Helm install creates, from a fleet's ``gpuOperator`` key."""
    mig_manager: dict[str, Any] = {
        "enabled": bool(spec.get("migManagerEnabled", True)),
        "env": [{"name": "WITH_REBOOT", "value": str(bool(spec.get("withReboot"))).lower()}],
    }
    cfg: dict[str, Any] = {"default": str(spec.get("migConfigDefault", "all-disabled"))}
    if spec.get("migConfigName"):
        cfg["name"] = str(spec["migConfigName"])
    mig_manager["config"] = cfg
    body: dict[str, Any] = {k: {} for k in REQUIRED_SPEC}
    body["mig"] = {"strategy": str(spec.get("migStrategy", "single"))}
    body["migManager"] = mig_manager
    body["operator"] = {"defaultRuntime": "containerd"}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": "cluster-policy", "uid": uid, "creationTimestamp": ts},
        "spec": dict(sorted(body.items())),
        "status": {"namespace": str(spec.get("namespace", "gpu-operator")), "state": "ready"},
    }
