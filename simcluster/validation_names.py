"""Name and value formats (qualified names, DNS labels, label values, ...) as apimachinery.

Follows (v1.32) ``staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go``
(IsQualifiedName, IsDNS1123Label/Subdomain, IsDNS1035Label, IsValidLabelValue,
IsConfigMapKey, IsValidPercent, IsValidPortName/Num, RegexError, MaxLenError, ... with
their exact messages; Go measures lengths in bytes), ``.../api/validation/generic.go`` (the
name functions and the trailing-dash masking of ``generateName``) and
``.../api/validation/path/name.go`` (path segment names). The checks return the list of
message strings the Go functions return; callers turn them into field errors.
"""

from __future__ import annotations

import re

_QNAME_CHAR = "[A-Za-z0-9]"
_QNAME_EXT = "[-A-Za-z0-9_.]"
QUALIFIED_NAME_FMT = f"({_QNAME_CHAR}{_QNAME_EXT}*)?{_QNAME_CHAR}"
_QNAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)
_QNAME_RE = re.compile(QUALIFIED_NAME_FMT)
LABEL_VALUE_FMT = f"({QUALIFIED_NAME_FMT})?"
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character"
)
_LABEL_VALUE_RE = re.compile(LABEL_VALUE_FMT)
DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character"
)
_DNS1123_LABEL_RE = re.compile(DNS1123_LABEL_FMT)
DNS1123_SUBDOMAIN_FMT = DNS1123_LABEL_FMT + "(\\." + DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_RE = re.compile(DNS1123_SUBDOMAIN_FMT)
DNS1035_LABEL_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
_DNS1035_LABEL_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character"
)
_DNS1035_LABEL_RE = re.compile(DNS1035_LABEL_FMT)
CONFIG_MAP_KEY_FMT = "[-._a-zA-Z0-9]+"
_CONFIG_MAP_KEY_MSG = "a valid config key must consist of alphanumeric characters, '-', '_' or '.'"
_CONFIG_MAP_KEY_RE = re.compile(CONFIG_MAP_KEY_FMT)
PERCENT_FMT = "[0-9]+%"
_PERCENT_RE = re.compile(PERCENT_FMT)
_PERCENT_MSG = "a valid percent string must be a numeric string followed by an ending '%'"
_PORT_NAME_CHARSET = re.compile("[-a-z0-9]+")


def blen(s: str) -> int:
    """Go's ``len()``: bytes of the UTF-8 encoding."""
    return len(s.encode())


def _full(rx: re.Pattern[str], s: str) -> bool:
    return rx.fullmatch(s) is not None


def max_len_error(n: int) -> str:
    """``validation.MaxLenError`` (pkg/util/validation/validation.go)."""
    return f"must be no more than {n} characters"


def max_bytes_error(n: int) -> str:
    """``content.MaxLenError``, used by the label checks that moved to
    ``staging/src/k8s.io/apimachinery/pkg/api/validate/content`` (v0.35+)."""
    return f"must be no more than {n} bytes"


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    """``RegexError``: the message, examples and the regex, worded like Go's."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    msg += " (e.g. "
    for i, ex in enumerate(examples):
        if i > 0:
            msg += " or "
        msg += f"'{ex}', "
    return msg + f"regex used for validation is '{fmt}')"


def empty_error() -> str:
    return "must be non-empty"


def inclusive_range_error(lo: int, hi: int) -> str:
    return f"must be between {lo} and {hi}, inclusive"


def is_dns1123_subdomain(value: str) -> list[str]:
    errs = []
    if blen(value) > 253:
        errs.append(max_len_error(253))
    if not _full(_DNS1123_SUBDOMAIN_RE, value):
        errs.append(regex_error(_DNS1123_SUBDOMAIN_MSG, DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def is_dns1123_label(value: str) -> list[str]:
    errs = []
    if blen(value) > 63:
        errs.append(max_len_error(63))
    if not _full(_DNS1123_LABEL_RE, value):
        if _full(_DNS1123_SUBDOMAIN_RE, value):
            errs.append("must not contain dots")
        else:
            errs.append(regex_error(_DNS1123_LABEL_MSG, DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errs


def is_dns1035_label(value: str) -> list[str]:
    errs = []
    if blen(value) > 63:
        errs.append(max_len_error(63))
    if not _full(_DNS1035_LABEL_RE, value):
        errs.append(regex_error(_DNS1035_LABEL_MSG, DNS1035_LABEL_FMT, "my-name", "abc-123"))
    return errs


def is_qualified_name(value: str) -> list[str]:
    """``IsQualifiedName``: ``[prefix/]name`` with a DNS-subdomain prefix, name <= 63. Since
    apimachinery v0.35 it is ``IsLabelKey``, whose too-many-slashes text says "a valid label
    key" (``staging/src/k8s.io/apimachinery/pkg/api/validate/content/kube.go``)."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part " + empty_error())
        else:  # content.IsDNS1123Subdomain: its length error counts bytes
            errs.extend(
                "prefix part " + m.replace(max_len_error(253), max_bytes_error(253))
                for m in is_dns1123_subdomain(prefix)
            )
    else:
        return [
            *errs,
            "a valid label key "
            + regex_error(_QNAME_MSG, QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
        ]
    if not name:
        errs.append("name part " + empty_error())
    elif blen(name) > 63:
        errs.append("name part " + max_bytes_error(63))
    if not _full(_QNAME_RE, name):
        errs.append(
            "name part "
            + regex_error(_QNAME_MSG, QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errs


def is_valid_label_value(value: str) -> list[str]:
    """``content.IsLabelValue``."""
    errs = []
    if blen(value) > 63:
        errs.append(max_bytes_error(63))
    if not _full(_LABEL_VALUE_RE, value):
        errs.append(regex_error(_LABEL_VALUE_MSG, LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def _has_chdir_prefix(value: str) -> list[str]:
    if value == ".":
        return ["must not be '.'"]
    if value == "..":
        return ["must not be '..'"]
    if value.startswith(".."):
        return ["must not start with '..'"]
    return []


def is_config_map_key(value: str) -> list[str]:
    errs = []
    if blen(value) > 253:
        errs.append(max_len_error(253))
    if not _full(_CONFIG_MAP_KEY_RE, value):
        errs.append(
            regex_error(_CONFIG_MAP_KEY_MSG, CONFIG_MAP_KEY_FMT, "key.name", "KEY_NAME", "key-name")
        )
    return errs + _has_chdir_prefix(value)


def is_valid_percent(value: str) -> list[str]:
    if not _full(_PERCENT_RE, value):
        return [regex_error(_PERCENT_MSG, PERCENT_FMT, "1%", "93%")]
    return []


def is_valid_port_num(port: int) -> list[str]:
    return [] if 1 <= port <= 65535 else [inclusive_range_error(1, 65535)]


def is_valid_port_name(port: str) -> list[str]:
    errs = []
    if blen(port) > 15:
        errs.append(max_len_error(15))
    if not _full(_PORT_NAME_CHARSET, port):
        errs.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if not re.search("[a-z]", port):
        errs.append("must contain at least one letter (a-z)")
    if "--" in port:
        errs.append("must not contain consecutive hyphens")
    if port and (port[0] == "-" or port[-1] == "-"):
        errs.append("must not begin or end with a hyphen")
    return errs


# ------------------------------------------------------------ name functions
def _mask_trailing_dash(name: str) -> str:
    """``maskTrailingDash``: a generateName may end in '-' (Go replaces the last TWO chars)."""
    if len(name) > 1 and name.endswith("-"):
        return name[:-2] + "a"
    return name


def name_is_dns_subdomain(name: str, prefix: bool) -> list[str]:
    return is_dns1123_subdomain(_mask_trailing_dash(name) if prefix else name)


def name_is_dns_label(name: str, prefix: bool) -> list[str]:
    return is_dns1123_label(_mask_trailing_dash(name) if prefix else name)


def name_is_dns1035_label(name: str, prefix: bool) -> list[str]:
    return is_dns1035_label(_mask_trailing_dash(name) if prefix else name)


def path_segment_name(name: str, prefix: bool) -> list[str]:
    """``path.ValidatePathSegmentName``: no '/' or '%', and not '.' or '..'."""
    if not prefix:
        for bad in (".", ".."):
            if name == bad:
                return [f"may not be '{bad}'"]
    return [f"may not contain '{c}'" for c in ("/", "%") if c in name]
