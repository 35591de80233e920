"""List and watch options as the API server decodes and checks them, and its storage errors.

Follows, for Kubernetes v1.32:

- ``staging/src/k8s.io/apiserver/pkg/endpoints/handlers/get.go`` ListResource: query
  decoding (a bad ``limit`` is a 400 with the ``strconv`` error), then
  ``SetListOptionsDefaults`` (a watch from resourceVersion "" or "0" without
  ``sendInitialEvents``/``resourceVersionMatch`` becomes a watch-list request: WatchList is
  on by default in 1.32), then ``ValidateListOptions`` (422 ``ListOptions.meta.k8s.io ""
  is invalid``), as in
  ``staging/src/k8s.io/apimachinery/pkg/apis/meta/internalversion/{defaults,validation/
  validation}.go``; booleans decode as ``runtime.Convert_Slice_string_To_bool`` (anything
  but ``0``/``false`` is true).
- ``staging/src/k8s.io/apiserver/pkg/storage/continue.go`` EncodeContinue/DecodeContinue
  (token = unpadded base64url of ``{"v":"meta.k8s.io/v1","rv":N,"start":"<key>\\u0000"}``;
  this simulator appends ``"t"``, the time the list's first page was read, standing in for
  etcd's compaction clock) and their error texts.
- ``staging/src/k8s.io/apiserver/pkg/storage/etcd3/errors.go`` (interpretListError,
  handleCompactedErrorForPaging), ``storage/errors.go`` NewTooLargeResourceVersionError,
  ``storage/api_object_versioner.go`` ParseResourceVersion, and
  ``endpoints/handlers/responsewriters/status.go`` (an error that is no API status is a 500
  without a reason).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any

from simcluster import gofmt
from simcluster.errors import ApiError
from simcluster.fielderrors import FieldError, forbidden, go_quote, invalid_error, not_supported

EXACT, NOT_OLDER = "Exact", "NotOlderThan"

EXPIRED_LIST = "The resourceVersion for the provided list is too old."
CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. "
    "You can start a new list without the continue parameter."
)
INCONSISTENT_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. "
    "You can start a new list without the continue parameter, or use the continue token "
    "in this response to retrieve the remainder of the results. Continuing with the "
    "provided token results in an inconsistent list - objects that were created, "
    "modified, or deleted between the time the first chunk was returned and now may show "
    "up in the list."
)
FUTURE_REVISION = "etcdserver: mvcc: required revision is a future revision"
_INVALID_KEY = "continue key is not valid"
_B64 = re.compile(r"[A-Za-z0-9_-]*")
_UINT64_MAX = 2**64 - 1


class StatusError(ApiError):
    """An error whose ``Status`` body is spelled out: list metadata, or no reason at all."""

    def __init__(
        self,
        code: int,
        message: str,
        reason: str,
        details: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(code, message, reason or "InternalError", details)
        self.status_reason = reason
        self.metadata = metadata or {}

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": dict(self.metadata),
            "status": "Failure",
            "message": self.message,
        }
        if self.status_reason:  # metav1.StatusReasonUnknown ("") is omitted
            body["reason"] = self.status_reason
        if self.details:
            body["details"] = self.details
        body["code"] = self.code
        return body


def internal(message: str) -> StatusError:
    """An error that is not an API status, as ``responsewriters.ErrorToAPIStatus`` renders it."""
    return StatusError(500, message, "")


def too_large(minimum: int, current: int, retry_seconds: int) -> StatusError:
    """``storage.NewTooLargeResourceVersionError``: 504 Timeout (Retry-After when > 0)."""
    details: dict[str, Any] = {
        "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]
    }
    if retry_seconds > 0:
        details["retryAfterSeconds"] = retry_seconds
    return StatusError(
        504,
        f"Timeout: Too large resource version: {minimum}, current: {current}",
        "Timeout",
        details,
    )


def expired(message: str, continue_token: str = "") -> StatusError:
    """``errors.NewResourceExpired`` (410), with ``metadata.continue`` for paging."""
    meta = {"continue": continue_token} if continue_token else {}
    return StatusError(410, message, "Expired", None, meta)


def bad_request(message: str) -> ApiError:
    return ApiError(400, message, "BadRequest")


# ------------------------------------------------------------------- decoding
def _go_bool(value: str | None) -> bool | None:
    """``Convert_Slice_string_To_bool``: absent -> None; ``0``/``false`` -> False; else True."""
    if value is None:
        return None
    return not (value == "0" or value.lower() == "false")


def _go_int64(value: str) -> int:
    """``strconv.ParseInt(v, 10, 64)`` with Go's error text (a 400 from DecodeParameters)."""
    if re.fullmatch(r"[+-]?[0-9]+", value or ""):
        n = int(value)
        if -(2**63) <= n < 2**63:
            return n
        raise bad_request(f"strconv.ParseInt: parsing {go_quote(value)}: value out of range")
    raise bad_request(f"strconv.ParseInt: parsing {go_quote(value)}: invalid syntax")


def rv_error(value: str) -> str | None:
    """``APIObjectVersioner.ParseResourceVersion``'s error text for ``value`` (None if valid)."""
    if value in ("", "0"):
        return None
    if not re.fullmatch(r"[0-9]+", value):
        reason = "invalid syntax"
    elif int(value) > _UINT64_MAX:
        reason = "value out of range"
    else:
        return None
    return (
        f"resourceVersion: Invalid value: {go_quote(value)}: strconv.ParseUint: parsing "
        f"{go_quote(value)}: {reason}"
    )


@dataclass
class ListOptions:
    """``metainternalversion.ListOptions`` after decoding, defaulting and validation."""

    watch: bool = False
    resource_version: str = ""
    match: str = ""
    limit: int = 0
    continue_token: str = ""
    timeout_seconds: int | None = None
    allow_bookmarks: bool = False
    send_initial_events: bool | None = None

    @property
    def rv(self) -> int:
        """The parsed resourceVersion (0 for "" and "0"); call after :func:`rv_error`."""
        return int(self.resource_version) if self.resource_version not in ("", "0") else 0


def parse_options(params: dict[str, str], watch: bool) -> ListOptions:
    """Decode, default and validate list/watch query parameters like ListResource."""
    opts = ListOptions(watch=watch)
    opts.resource_version = params.get("resourceVersion", "")
    opts.match = params.get("resourceVersionMatch", "")
    opts.continue_token = params.get("continue", "")
    if params.get("limit"):
        opts.limit = _go_int64(params["limit"])
    if params.get("timeoutSeconds"):
        opts.timeout_seconds = _go_int64(params["timeoutSeconds"])
    opts.allow_bookmarks = bool(_go_bool(params.get("allowWatchBookmarks")))
    opts.send_initial_events = _go_bool(params.get("sendInitialEvents"))
    # SetListOptionsDefaults (WatchList enabled)
    if (
        watch
        and opts.send_initial_events is None
        and not opts.match
        and opts.resource_version in ("", "0")
    ):
        opts.send_initial_events = True
        opts.match = NOT_OLDER
    errs = _validate(opts)
    if errs:
        raise invalid_error("ListOptions", "meta.k8s.io", "", errs)
    return opts


def _validate(o: ListOptions) -> list[FieldError]:
    """``ValidateListOptions(options, isWatchListFeatureEnabled=true)``."""
    errs: list[FieldError] = []
    path = "resourceVersionMatch"
    if o.watch:
        if o.send_initial_events is not None and o.match != NOT_OLDER:
            errs.append(
                forbidden(
                    path, "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
                )
            )
        if o.match:
            if o.send_initial_events is None:
                errs.append(
                    forbidden(
                        path,
                        "resourceVersionMatch is forbidden for watch unless sendInitialEvents "
                        "is provided",
                    )
                )
            if o.match != NOT_OLDER:
                errs.append(not_supported(path, o.match, [NOT_OLDER]))
            if o.continue_token:
                errs.append(
                    forbidden(path, "resourceVersionMatch is forbidden when continue is provided")
                )
        return errs
    if o.match:
        if not o.resource_version:
            errs.append(
                forbidden(
                    path, "resourceVersionMatch is forbidden unless resourceVersion is provided"
                )
            )
        if o.continue_token:
            errs.append(
                forbidden(path, "resourceVersionMatch is forbidden when continue is provided")
            )
        if o.match not in (EXACT, NOT_OLDER):
            errs.append(not_supported(path, o.match, [EXACT, NOT_OLDER, ""]))
        if o.match == EXACT and o.resource_version == "0":
            errs.append(
                forbidden(path, 'resourceVersionMatch "exact" is forbidden for resourceVersion "0"')
            )
    if o.send_initial_events is not None:
        errs.append(forbidden("sendInitialEvents", "sendInitialEvents is forbidden for list"))
    return errs


# ------------------------------------------------------------- continue tokens
def encode_continue(start: str, rv: int, issued: float | None = None) -> str:
    """``storage.EncodeContinue``: ``start`` is the next key relative to the list prefix."""
    payload: dict[str, Any] = {"v": "meta.k8s.io/v1", "rv": rv, "start": start}
    if issued is not None:
        payload["t"] = round(issued, 3)
    raw = json.dumps(payload, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


@dataclass(frozen=True)
class ContinueToken:
    start: str  # relative to the list's key prefix, as in the token
    rv: int  # < 0: continue at the latest resourceVersion
    issued: float | None


def decode_continue(token: str) -> ContinueToken:
    """``storage.DecodeContinue`` with the API server's 400 texts (``invalid continue token``)."""
    try:
        return _decode(token)
    except _TokenError as exc:
        raise bad_request(f"invalid continue token: {exc}") from None


class _TokenError(Exception):
    pass


def _decode(token: str) -> ContinueToken:
    bad = _B64.match(token).end()  # type: ignore[union-attr]
    if bad < len(token):
        raise _TokenError(f"{_INVALID_KEY}: illegal base64 data at input byte {bad}")
    if len(token) % 4 == 1:
        raise _TokenError(f"{_INVALID_KEY}: illegal base64 data at input byte {len(token) - 1}")
    try:
        data = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError) as exc:  # pragma: no cover - alphabet checked above
        raise _TokenError(f"{_INVALID_KEY}: {exc}") from None
    fields = _go_unmarshal(data)
    version = fields.get("v", "")
    if version != "meta.k8s.io/v1":
        raise _TokenError(
            f"{_INVALID_KEY}: server does not recognize this encoded version {version}"
        )
    rv = fields.get("rv", 0)
    if rv == 0:
        raise _TokenError(
            f"{_INVALID_KEY}: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
        )
    start = fields.get("start", "")
    if not start:
        raise _TokenError(f"{_INVALID_KEY}: encoded start key empty (version meta.k8s.io/v1)")
    key = start if start.startswith("/") else "/" + start
    if go_path_clean(key) != key:  # defends against path traversal, as the real code does
        raise _TokenError(f"{_INVALID_KEY}: {start}")
    issued = fields.get("t")
    return ContinueToken(key[1:], rv, issued if isinstance(issued, float | int) else None)


_GO_FIELDS = {"v": "string", "rv": "int64", "start": "string"}
_JSON_KIND = {str: "string", bool: "bool", list: "array", dict: "object"}


def _go_unmarshal(data: bytes) -> dict[str, Any]:
    """``json.Unmarshal(data, &continueToken{})`` with Go's error texts."""
    text = data.decode("utf-8", "replace")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        # Go's scanner reads bytes: the character it names is the byte as a rune
        # (encoding/json scanner.go ``quoteChar(c byte)``), so positions are bytes too.
        latin = data.decode("latin-1")
        try:
            json.loads(latin)
        except json.JSONDecodeError as exc:
            raise _TokenError(f"{_INVALID_KEY}: {_go_syntax_error(exc, latin)}") from None
        raise _TokenError(f"{_INVALID_KEY}: invalid character") from None
    if not isinstance(obj, dict):
        kind = "number" if isinstance(obj, int | float) else _JSON_KIND.get(type(obj), "")
        if obj is None:
            return {}
        raise _TokenError(
            f"{_INVALID_KEY}: json: cannot unmarshal {kind} into Go value of type "
            "storage.continueToken"
        )
    out: dict[str, Any] = {"t": obj.get("t")}
    for key, value in obj.items():
        name = next((n for n in _GO_FIELDS if n == key), None) or next(
            (n for n in _GO_FIELDS if n.lower() == key.lower()), None
        )
        if name is None or value is None:
            continue
        want = _GO_FIELDS[name]
        is_int = isinstance(value, int) and not isinstance(value, bool)
        if (want == "string" and isinstance(value, str)) or (want == "int64" and is_int):
            out[name] = value
        else:
            if isinstance(value, bool):
                got = "bool"
            elif isinstance(value, int | float):
                got = f"number {value}" if want == "int64" else "number"
            else:
                got = _JSON_KIND.get(type(value), "value")
            raise _TokenError(
                f"{_INVALID_KEY}: json: cannot unmarshal {got} into Go struct field "
                f"continueToken.{name} of type {want}"
            )
    return out


_SYNTAX_CONTEXT = {
    "Expecting value": "looking for beginning of value",
    "Expecting property name enclosed in double quotes": (
        "looking for beginning of object key string"
    ),
    "Expecting ':' delimiter": "after object key",
    "Expecting ',' delimiter": "after object key:value pair",
    "Extra data": "after top-level value",
}


def _go_syntax_error(exc: json.JSONDecodeError, text: str) -> str:
    if exc.pos >= len(text.rstrip()):
        return "unexpected end of JSON input"
    ch = text[exc.pos]
    shown = "'\\''" if ch == "'" else "'" + gofmt.quote(ch)[1:-1].replace('\\"', '"') + "'"
    context = _SYNTAX_CONTEXT.get(exc.msg, "looking for beginning of value")
    return f"invalid character {shown} {context}"


def go_path_clean(p: str) -> str:
    """Go's ``path.Clean`` for a rooted path."""
    out: list[str] = []
    for part in p.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if out:
                out.pop()
            continue
        out.append(part)
    return "/" + "/".join(out)
