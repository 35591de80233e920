"""Label and field selectors, parsed once per request and matched per object.

Label selectors are parsed as apimachinery's ``labels.Parse`` does (``a=b``, ``a==b``,
``a!=b``, ``a in (x,y)``, ``a notin (x,y)``, ``a``, ``!a``, ``a>1``, ``a<1``, comma-joined;
keys and values validated), with its error texts. Field selectors: ``f=v``, ``f==v``,
``f!=v``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from simcluster.errors import ApiError
from simcluster.fielderrors import go_quote
from simcluster.validation_names import is_qualified_name, is_valid_label_value

LabelMatcher = Callable[[Mapping[str, str]], bool]
FieldMatcher = Callable[[Mapping[str, str]], bool]

# ---------------------------------------------------------------- label selectors
# A port of staging/src/k8s.io/apimachinery/pkg/labels/selector.go (v0.36): the lexer,
# the recursive-descent parser and NewRequirement's validation, with their error texts.
_SPECIAL = frozenset("=!(),><")
_WHITESPACE = frozenset(" \t\r\n")
_TOKENS = {
    ")": "ClosedPar", ",": "Comma", "!": "DoesNotExist", "==": "DoubleEquals", "=": "Equals",
    ">": "GreaterThan", "in": "In", "<": "LessThan", "!=": "NotEquals", "notin": "NotIn",
    "(": "OpenPar",
}  # fmt: skip
_BINARY = ("in", "notin", "=", "==", "!=", "gt", "lt")
_OPERATOR_OF = {
    "In": "in", "Equals": "=", "DoubleEquals": "==", "GreaterThan": "gt", "LessThan": "lt",
    "NotIn": "notin", "NotEquals": "!=",
}  # fmt: skip


class _SelectorError(Exception):
    pass


def _lex(text: str) -> list[tuple[str, str]]:
    """``Lexer.Lex`` until the end: (token, literal) pairs."""
    data = text.encode()
    items: list[tuple[str, str]] = []
    pos = 0
    while True:
        while pos < len(data) and chr(data[pos]) in _WHITESPACE:
            pos += 1
        if pos >= len(data):
            items.append(("EndOfString", ""))
            return items
        if chr(data[pos]) in _SPECIAL:  # scanSpecialSymbol
            buf, last = "", None
            while pos < len(data) and chr(data[pos]) in _SPECIAL:
                buf += chr(data[pos])
                pos += 1
                if buf in _TOKENS:
                    last = (_TOKENS[buf], buf)
                elif last is not None:
                    pos -= 1
                    break
            items.append(last or ("Error", f"error expected: keyword found '{buf}'"))
            continue
        start = pos  # scanIDOrKeyword
        while pos < len(data) and chr(data[pos]) not in _SPECIAL | _WHITESPACE:
            pos += 1
        word = data[start:pos].decode(errors="replace")
        items.append((_TOKENS.get(word, "Identifier"), word))


class _Parser:
    def __init__(self, text: str) -> None:
        self.items = _lex(text)
        self.pos = 0

    def lookahead(self, values: bool = True) -> tuple[str, str]:
        tok, lit = self.items[self.pos]
        return ("Identifier" if values and tok in ("In", "NotIn") else tok), lit

    def consume(self, values: bool = True) -> tuple[str, str]:
        tok, lit = self.lookahead(values)
        self.pos += 1
        return tok, lit

    def parse(self) -> list[tuple[str, str, list[str]]]:
        reqs: list[tuple[str, str, list[str]]] = []
        while True:
            tok, lit = self.lookahead()
            if tok in ("Identifier", "DoesNotExist"):
                try:
                    reqs.append(self.requirement())
                except _SelectorError as exc:
                    raise _SelectorError(f"unable to parse requirement: {exc}") from None
                t, lit = self.consume()
                if t == "EndOfString":
                    return reqs
                if t == "Comma":
                    t2, l2 = self.lookahead()
                    if t2 not in ("Identifier", "DoesNotExist"):
                        raise _SelectorError(f"found '{l2}', expected: identifier after ','")
                else:
                    raise _SelectorError(f"found '{lit}', expected: ',' or 'end of string'")
            elif tok == "EndOfString":
                return reqs
            else:
                raise _SelectorError(f"found '{lit}', expected: !, identifier, or 'end of string'")

    def requirement(self) -> tuple[str, str, list[str]]:
        key, op = self.key_and_operator()
        if op in ("exists", "!"):
            return _new_requirement(key, op, [])
        tok, lit = self.consume(values=False)
        if tok not in _OPERATOR_OF:
            raise _SelectorError(f"found '{lit}', expected: {', '.join(_BINARY)}")
        op = _OPERATOR_OF[tok]
        values = self.set_values() if op in ("in", "notin") else self.exact_value()
        return _new_requirement(key, op, sorted(values))

    def key_and_operator(self) -> tuple[str, str]:
        op = ""
        tok, lit = self.consume()
        if tok == "DoesNotExist":
            op = "!"
            tok, lit = self.consume()
        if tok != "Identifier":
            raise _SelectorError(f"found '{lit}', expected: identifier")
        errs = is_qualified_name(lit)
        if errs:  # validateLabelKey with the parser's nil path
            raise _SelectorError(f"<nil>: Invalid value: {go_quote(lit)}: {'; '.join(errs)}")
        if self.lookahead()[0] in ("EndOfString", "Comma") and op != "!":
            op = "exists"
        return lit, op

    def set_values(self) -> set[str]:
        tok, lit = self.consume()
        if tok != "OpenPar":
            raise _SelectorError(f"found '{lit}' expected: '('")
        tok, lit = self.lookahead()
        if tok in ("Identifier", "Comma"):
            values = self.identifiers()
            if self.consume()[0] != "ClosedPar":
                raise _SelectorError(f"found '{lit}', expected: ')'")
            return values
        if tok == "ClosedPar":
            self.consume()
            return {""}
        raise _SelectorError(f"found '{lit}', expected: ',', ')' or identifier")

    def identifiers(self) -> set[str]:
        values: set[str] = set()
        while True:
            tok, lit = self.consume()
            if tok == "Identifier":
                values.add(lit)
                tok2, lit2 = self.lookahead()
                if tok2 == "Comma":
                    continue
                if tok2 == "ClosedPar":
                    return values
                raise _SelectorError(f"found '{lit2}', expected: ',' or ')'")
            if tok == "Comma":
                if not values:
                    values.add("")
                tok2 = self.lookahead()[0]
                if tok2 == "ClosedPar":
                    values.add("")
                    return values
                if tok2 == "Comma":
                    values.add("")
                continue
            raise _SelectorError(f"found '{lit}', expected: ',', or identifier")

    def exact_value(self) -> set[str]:
        if self.lookahead()[0] in ("EndOfString", "Comma"):
            return {""}
        tok, lit = self.consume()
        if tok == "Identifier":
            return {lit}
        raise _SelectorError(f"found '{lit}', expected: identifier")


def _new_requirement(key: str, op: str, values: list[str]) -> tuple[str, str, list[str]]:
    """``NewRequirement``'s checks (the key was checked while parsing)."""
    errs: list[str] = []
    shown = "[" + ",".join(go_quote(v) for v in values) + "]"
    if op in ("in", "notin") and not values:
        errs.append(f"values: Invalid value: {shown}: for 'in', 'notin' operators, values set "
                    "can't be empty")  # fmt: skip
    if op in ("gt", "lt"):
        if len(values) != 1:
            errs.append(f"values: Invalid value: {shown}: for 'Gt', 'Lt' operators, exactly one "
                        "value is required")  # fmt: skip
        for i, v in enumerate(values):
            if not re.fullmatch(r"[+-]?[0-9]+", v) or not -(2**63) <= int(v) < 2**63:
                errs.append(f"values[{i}]: Invalid value: {go_quote(v)}: for 'Gt', 'Lt' "
                            "operators, the value must be an integer")  # fmt: skip
    for i, v in enumerate(values):
        msgs = is_valid_label_value(v)
        if msgs:
            errs.append(f"values[{i}][{key}]: Invalid value: {go_quote(v)}: {'; '.join(msgs)}")
    unique = list(dict.fromkeys(errs))  # ToAggregate drops repeated messages
    if len(unique) == 1:
        raise _SelectorError(unique[0])
    if unique:
        raise _SelectorError("[" + ", ".join(unique) + "]")
    return key, op, values


def _matcher(key: str, op: str, values: list[str]) -> LabelMatcher:
    """``Requirement.Matches``."""
    vals = frozenset(values)
    if op in ("in", "=", "=="):
        return lambda lb: key in lb and lb[key] in vals
    if op in ("notin", "!="):
        return lambda lb: key not in lb or lb[key] not in vals
    if op == "exists":
        return lambda lb: key in lb
    if op == "!":
        return lambda lb: key not in lb
    bound = int(values[0])

    def compare(lb: Mapping[str, str]) -> bool:
        try:
            n = int(lb[key]) if re.fullmatch(r"[+-]?[0-9]+", lb.get(key, "")) else None
        except ValueError:
            n = None
        if n is None:
            return False
        return n > bound if op == "gt" else n < bound

    return compare


def parse_label_selector(text: str | None) -> LabelMatcher | None:
    """Compile a label selector; ``None`` when empty. Raises 400 with the parser's error."""
    if not text or not text.strip():
        return None
    try:
        reqs = _Parser(text).parse()
    except _SelectorError as exc:
        raise ApiError(400, str(exc), "BadRequest") from None
    if not reqs:
        return None
    matchers = [_matcher(*r) for r in reqs]
    return lambda lb: all(m(lb) for m in matchers)


# Kinds with a field label conversion of their own (pkg/apis/core/v1/conversion.go,
# pkg/apis/batch/v1/conversion.go, pkg/apis/events/v1/conversion.go): an unknown label is
# "field label not supported: x". Every other built-in kind uses the scheme's default,
# runtime.DefaultMetaV1FieldSelectorConversion (apimachinery/pkg/runtime/conversion.go).
_OWN_CONVERSION = frozenset(
    {"pods", "nodes", "replicationcontrollers", "events", "namespaces", "secrets", "services",
     "jobs"}
)  # fmt: skip


def _unknown_field(resource: str, field: str) -> ApiError:
    if resource and resource not in _OWN_CONVERSION:
        return ApiError(
            400,
            f'"{field}" is not a known field selector: only "metadata.name", "metadata.namespace"',
            "BadRequest",
        )
    return ApiError(400, f"field label not supported: {field}", "BadRequest")


def parse_field_selector(
    text: str | None, allowed: frozenset[str], resource: str = ""
) -> FieldMatcher | None:
    """Compile a field selector restricted to the fields the resource supports."""
    if not text or not text.strip():
        return None
    reqs: list[FieldMatcher] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        for op in ("!=", "==", "="):
            if op in part:
                field, val = part.split(op, 1)
                break
        else:
            raise ApiError(400, f"invalid selector: '{text}'; can't understand '{part}'")
        field = field.strip()
        if field not in allowed:
            raise _unknown_field(resource, field)
        val = val.strip()
        if op == "!=":
            reqs.append(lambda f, k=field, v=val: f.get(k, "") != v)
        else:
            reqs.append(lambda f, k=field, v=val: f.get(k, "") == v)
    if not reqs:
        return None
    return lambda f: all(r(f) for r in reqs)
