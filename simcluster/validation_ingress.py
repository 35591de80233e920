"""Ingresses and IngressClasses (networking.k8s.io/v1), as validated in v1.32.

Follows ``pkg/apis/networking/validation/validation.go``: ValidateIngressCreate/Update
(ValidateIngressSpec: ``defaultBackend`` or ``rules``, rule hosts (DNS names, ``*.``
wildcards, no IPs), HTTP paths (``pathType`` required and supported, absolute paths, no
``//``, ``/./``, ``/../``, ``%2f``, no ``/..`` or ``/.`` suffix), backends (service XOR
resource, service name a DNS-1035 label, port name XOR number), TLS hosts,
``ingressClassName``), ValidateIngressClass[Update] (``spec.controller`` a domain-prefixed
path of at most 250 characters, immutable; ``parameters``) and
``staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go``
(IsWildcardDNS1123Subdomain, IsDomainPrefixedPath).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from simcluster import fielderrors as fe
from simcluster.fielderrors import FieldError, child, index
from simcluster.validation_meta import FIELD_IMMUTABLE, validate_object_meta
from simcluster.validation_names import (
    is_dns1035_label,
    is_dns1123_subdomain,
    is_valid_port_name,
    is_valid_port_num,
    name_is_dns_subdomain,
    path_segment_name,
    regex_error,
)

_WILDCARD_FMT = r"\*\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_WILDCARD_MSG = (
    "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, "
    "which must consist of lower case alphanumeric characters, '-' or '.' and end with an "
    "alphanumeric character"
)
_HTTP_PATH_FMT = r"[A-Za-z0-9/\-._~%!$&'()*+,;=:]+"
_INVALID_SEQ = ("//", "/./", "/../", "%2f", "%2F")
_INVALID_SUFFIX = ("/..", "/.")
_PATH_TYPES = ["Exact", "ImplementationSpecific", "Prefix"]


def _d(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _host_errors(host: str, path: str) -> list[FieldError]:
    if "*" in host:
        if re.fullmatch(_WILDCARD_FMT, host) is None or len(host) > 253:
            return [
                fe.invalid(path, host, regex_error(_WILDCARD_MSG, _WILDCARD_FMT, "*.example.com"))
            ]
        return []
    return [fe.invalid(path, host, m) for m in is_dns1123_subdomain(host)]


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _backend(b: Any, path: str) -> list[FieldError]:
    b = _d(b)
    svc, res = b.get("service"), b.get("resource")
    if svc is not None and res is not None:
        return [fe.invalid(path, "", "cannot set both resource and service backends")]
    if res is not None:
        return _typed_ref(res, child(path, "resource"))
    if svc is None:
        return [fe.invalid(path, "", "resource or service backend is required")]
    svc = _d(svc)
    errs: list[FieldError] = []
    name = str(svc.get("name") or "")
    if not name:
        errs.append(fe.required(child(path, "service", "name")))
    else:
        errs += [
            fe.invalid(child(path, "service", "name"), name, m) for m in is_dns1035_label(name)
        ]
    port = _d(svc.get("port"))
    pname, pnum = str(port.get("name") or ""), int(port.get("number") or 0)
    if pname and pnum:
        errs.append(fe.invalid(path, "", "cannot set both port name & port number"))
    elif pname:
        errs += [
            fe.invalid(child(path, "service", "port", "name"), pname, m)
            for m in is_valid_port_name(pname)
        ]
    elif pnum:
        errs += [
            fe.invalid(child(path, "service", "port", "number"), pnum, m)
            for m in is_valid_port_num(pnum)
        ]
    else:
        errs.append(fe.required(path, "port name or number is required"))
    return errs


def _typed_ref(ref: Any, path: str) -> list[FieldError]:
    ref = _d(ref)
    errs: list[FieldError] = []
    if ref.get("apiGroup") is not None:
        g = str(ref["apiGroup"])
        errs += [fe.invalid(child(path, "apiGroup"), g, m) for m in is_dns1123_subdomain(g)]
    for f in ("kind", "name"):
        v = str(ref.get(f) or "")
        if not v:
            errs.append(fe.required(child(path, f), f"{f} is required"))
        else:
            errs += [fe.invalid(child(path, f), v, m) for m in path_segment_name(v, False)]
    return errs


def _http_path(p: Any, path: str) -> list[FieldError]:
    p = _d(p)
    pt = p.get("pathType")
    if pt is None:
        return [fe.required(child(path, "pathType"), "pathType must be specified")]
    value = str(p.get("path") or "")
    errs: list[FieldError] = []
    pp = child(path, "path")
    if pt in ("Exact", "Prefix"):
        if not value.startswith("/"):
            errs.append(fe.invalid(pp, value, "must be an absolute path"))
        if value:
            errs += [
                fe.invalid(pp, value, f"must not contain '{s}'") for s in _INVALID_SEQ if s in value
            ]
            errs += [
                fe.invalid(pp, value, f"cannot end with '{s}'")
                for s in _INVALID_SUFFIX
                if value.endswith(s)
            ]
    elif pt == "ImplementationSpecific":
        if value and not value.startswith("/"):
            errs.append(fe.invalid(pp, value, "must be an absolute path"))
    else:
        errs.append(fe.not_supported(child(path, "pathType"), str(pt), _PATH_TYPES))
    return errs + _backend(p.get("backend"), child(path, "backend"))


def _ingress_spec(spec: dict[str, Any]) -> list[FieldError]:
    errs: list[FieldError] = []
    rules = spec.get("rules") or []
    if not rules and spec.get("defaultBackend") is None:
        errs.append(
            fe.invalid("spec", None, "either `defaultBackend` or `rules` must be specified")
        )
    if spec.get("defaultBackend") is not None:
        errs += _backend(spec["defaultBackend"], "spec.defaultBackend")
    for i, rule in enumerate(rules):
        rule = _d(rule)
        rp = index("spec.rules", i)
        host = str(rule.get("host") or "")
        if host:
            if _is_ip(host):
                errs.append(
                    fe.invalid(child(rp, "host"), host, "must be a DNS name, not an IP address")
                )
            errs += _host_errors(host, child(rp, "host"))
        http = rule.get("http")
        if http is not None:
            paths = _d(http).get("paths") or []
            if not paths:
                errs.append(fe.required(child(rp, "http", "paths")))
            for j, p in enumerate(paths):
                errs += _http_path(p, index(child(rp, "http", "paths"), j))
    for i, tls in enumerate(spec.get("tls") or []):
        for h in _d(tls).get("hosts") or []:
            errs += _host_errors(str(h), child(index("spec.tls", i), "hosts"))
    icn = spec.get("ingressClassName")
    if icn is not None:
        errs += [
            fe.invalid("spec.ingressClassName", str(icn), m)
            for m in name_is_dns_subdomain(str(icn), False)
        ]
    return errs


def ingress_create(ing: dict[str, Any], qty: Any) -> list[FieldError]:
    errs = validate_object_meta(_d(ing.get("metadata")), True, name_is_dns_subdomain)
    return errs + _ingress_spec(_d(ing.get("spec")))


def ingress_update(new: dict[str, Any], old: dict[str, Any], qty: Any) -> list[FieldError]:
    return _ingress_spec(_d(new.get("spec")))


def _domain_prefixed_path(value: str, path: str) -> list[FieldError]:
    if not value:
        return [fe.required(path)]
    host, sep, rest = value.partition("/")
    if not sep or not host or not rest:
        return [fe.invalid(path, value, 'must be a domain-prefixed path (such as "acme.io/foo")')]
    errs = [fe.invalid(path, host, m) for m in is_dns1123_subdomain(host)]
    if re.fullmatch(_HTTP_PATH_FMT, rest) is None:
        errs.append(
            fe.invalid(path, rest, regex_error("must be a valid HTTP path", _HTTP_PATH_FMT))
        )
    return errs


def _ingressclass_spec(spec: dict[str, Any]) -> list[FieldError]:
    errs: list[FieldError] = []
    controller = str(spec.get("controller") or "")
    if len(controller) > 250:
        errs.append(fe.too_long("spec.controller", 250))
    errs += _domain_prefixed_path(controller, "spec.controller")
    if spec.get("parameters") is not None:
        errs += _typed_ref(spec["parameters"], "spec.parameters")
    return errs


def ingressclass_create(ic: dict[str, Any], qty: Any) -> list[FieldError]:
    errs = validate_object_meta(_d(ic.get("metadata")), False, name_is_dns_subdomain)
    return errs + _ingressclass_spec(_d(ic.get("spec")))


def ingressclass_update(new: dict[str, Any], old: dict[str, Any], qty: Any) -> list[FieldError]:
    nc = _d(new.get("spec")).get("controller")
    errs: list[FieldError] = []
    if nc != _d(old.get("spec")).get("controller"):
        errs.append(fe.invalid("spec.controller", str(nc or ""), FIELD_IMMUTABLE))
    return errs + _ingressclass_spec(_d(new.get("spec")))
