"""Where constrained JSON being written stands, and the shortest valid way to finish it.

A grammar keeps structured output valid; the token budget is what ends it. The generation
loop follows the output's bytes with a :class:`Follower` (each alternative of a
:class:`Shape`: a tool call's framing around its arguments, or the schema's bare answer) and
asks it, before each token, for the shortest text that closes the value from where it stands
(close the open string, fill the required members still missing with minimal values, close
every open container, write the framing's tail). When the tokens left are what that text
needs, the loop steers the model onto it (:mod:`ryzenai_core.generation.closer`), so the
answer is complete JSON, and says which values were cut (:meth:`Follower.completion`).

Pure Python over bytes: no runtime, tested directly.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BOUND_MARK", "Alternative", "Cut", "Follower", "Shape", "fresh_value"]

#: Key put beside a ``maxLength`` / ``maxItems`` the library chose (not the caller), so that a value
#: that reaches it is reported as cut. llguidance ignores ``x-`` keys.
BOUND_MARK = "x-ryzenai-bound"

_MAX_DEPTH = 16
_UNKNOWN = 32  # bytes counted for a value the completion cannot write itself (a pattern, a format)
_WS = b" \t\r\n"
_HIGH_SURROGATE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}$")

#: A value a completion cuts or fills: its name, and the offset in the completion's text where that is done.
Cut = tuple[str, int]


@dataclass(frozen=True)
class Alternative:
    """One form the output may take: ``prefix``, then one JSON value of ``schema``, then ``suffix``."""

    schema: Mapping[str, Any]
    prefix: bytes = b""
    suffix: bytes = b""
    label: str = ""
    """How a cut in this alternative is named: a tool's name, or "" for the answer itself."""


@dataclass(frozen=True)
class Shape:
    """What constrained output may be, for closing it within the budget.

    Attributes:
        alternatives: the forms the grammar allows.
        reserve: tokens kept beyond the completion: the end of the turn, and what one token the
            model writes freely may open (an optional member, an array item, an escape).
    """

    alternatives: tuple[Alternative, ...]
    reserve: int = 8


# ---------------------------------------------------------------------- schemas
def _resolve(schema: Any, defs: Mapping[str, Any], depth: int = 0) -> list[dict[str, Any]]:
    """The branches ``schema`` stands for: ``$ref`` followed, ``anyOf``/``oneOf`` split, ``allOf`` merged."""
    if not isinstance(schema, dict) or depth > _MAX_DEPTH:
        return [{}]
    if "$ref" in schema:
        target = defs.get(str(schema["$ref"]).rsplit("/", 1)[-1])
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        return [{**b, **rest} for b in _resolve(target, defs, depth + 1)]
    if isinstance(schema.get("allOf"), list):
        merged = {k: v for k, v in schema.items() if k != "allOf"}
        for part in schema["allOf"]:
            for key, value in _resolve(part, defs, depth + 1)[0].items():
                if key == "properties":
                    merged["properties"] = {**(merged.get("properties") or {}), **value}
                elif key == "required":
                    merged["required"] = [*(merged.get("required") or []), *value]
                else:
                    merged.setdefault(key, value)
        return _resolve(merged, defs, depth + 1)
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            base = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}
            return [{**base, **b} for part in schema[key] for b in _resolve(part, defs, depth + 1)]
    return [schema]


def _types(schema: Mapping[str, Any]) -> set[str]:
    """The JSON types a (resolved) schema admits."""
    if "const" in schema:
        return {_type_of(schema["const"])}
    if isinstance(schema.get("enum"), list):
        return {_type_of(v) for v in schema["enum"]}
    kind = schema.get("type")
    if isinstance(kind, str):
        kinds = {kind}
    elif isinstance(kind, list):
        kinds = {str(k) for k in kind}
    elif "properties" in schema or "additionalProperties" in schema:
        kinds = {"object"}
    elif "items" in schema or "prefixItems" in schema:
        kinds = {"array"}
    else:
        kinds = {"object", "array", "string", "number", "boolean", "null"}
    return {"number"} | kinds if "integer" in kinds else kinds


def _type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return "string" if isinstance(value, str) else "array" if isinstance(value, list) else "object"


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _member_schema(objects: Sequence[Mapping[str, Any]], key: str) -> Any:
    """The schema of member ``key`` in the first object branch that has one."""
    for obj in objects:
        props = obj.get("properties") or {}
        if key in props:
            return props[key]
        patterns = obj.get("patternProperties") or {}
        if patterns:
            return next(iter(patterns.values()))
        extra = obj.get("additionalProperties")
        if isinstance(extra, dict):
            return extra
    return {}


def _item_schema(array: Mapping[str, Any], index: int) -> Any:
    prefix = array.get("prefixItems") or []
    if index < len(prefix):
        return prefix[index]
    items = array.get("items")
    return items if isinstance(items, dict) else {}


def fresh_value(schema: Any, defs: Mapping[str, Any], depth: int = 0) -> tuple[bytes, int]:
    """The shortest value of ``schema`` this module can write, and the bytes it may take.

    Strings are empty (or ``minLength`` spaces), numbers 0 (or the bound nearest to it),
    arrays hold their ``minItems``, objects their required members. A ``pattern`` or
    ``format`` string is written ``""`` but counted as 32 characters: the model writes it.
    """
    best: tuple[bytes, int] | None = None
    for branch in _resolve(schema, defs, depth):
        for option in _fresh_branch(branch, defs, depth):
            if best is None or option[1] < best[1]:
                best = option
    return best if best is not None else (b"null", 4)


def _fresh_branch(s: Mapping[str, Any], defs: Mapping[str, Any], depth: int) -> list[tuple[bytes, int]]:
    if depth > _MAX_DEPTH:
        return [(b"null", 4 + 2 * _UNKNOWN)]
    if "const" in s:
        text = _dumps(s["const"])
        return [(text, len(text))]
    if isinstance(s.get("enum"), list) and s["enum"]:
        text = min((_dumps(v) for v in s["enum"]), key=len)
        return [(text, len(text))]
    out: list[tuple[bytes, int]] = []
    for kind in _types(s) - {"integer"}:
        if kind == "null":
            out.append((b"null", 4))
        elif kind == "boolean":
            out.append((b"false", 5))
        elif kind == "number":  # an integer is a number here: the value written is an integer
            text = _number(s)
            out.append((text, len(text)))
        elif kind == "string":
            if "pattern" in s or "format" in s:
                out.append((b'""', 2 + _UNKNOWN))
            else:
                text = b'"' + b" " * int(s.get("minLength", 0)) + b'"'
                out.append((text, len(text)))
        elif kind == "array":
            parts = [fresh_value(_item_schema(s, i), defs, depth + 1) for i in range(int(s.get("minItems", 0)))]
            text = b"[" + b",".join(p[0] for p in parts) + b"]"
            out.append((text, len(text) + sum(p[1] - len(p[0]) for p in parts)))
        elif kind == "object":
            text, extra = b"{", 0
            for n, key in enumerate(_required(s)):
                value = fresh_value(_member_schema([s], key), defs, depth + 1)
                text += (b"," if n else b"") + _dumps(key) + b":" + value[0]
                extra += value[1] - len(value[0])
            text += b"}"
            out.append((text, len(text) + extra))
    return out


def _required(obj: Mapping[str, Any]) -> list[str]:
    """Required member names in the order the grammar writes them (``properties`` order first)."""
    required = [str(k) for k in obj.get("required") or []]
    order = [k for k in (obj.get("properties") or {}) if k in required]
    return order + [k for k in required if k not in order]


def _number(s: Mapping[str, Any]) -> bytes:
    lo = s.get("minimum", s.get("exclusiveMinimum"))
    hi = s.get("maximum", s.get("exclusiveMaximum"))
    value = 0
    if isinstance(lo, (int, float)) and lo >= 0:
        value = math.ceil(lo) + (1 if "minimum" not in s and math.ceil(lo) == lo else 0)
    elif isinstance(hi, (int, float)) and hi <= 0:
        value = math.floor(hi) - (1 if "maximum" not in s and math.floor(hi) == hi else 0)
    return str(value).encode()


# ---------------------------------------------------------------------- following the bytes
@dataclass
class _Frame:
    """An open object or array."""

    kind: str  # "object" | "array"
    branches: list[dict[str, Any]]  # object: the object branches still possible; array: [its schema]
    path: str
    state: str  # object: first, key, colon, value, after; array: first, value, after
    seen: list[str] = field(default_factory=list)
    key: str = ""
    count: int = 0


@dataclass
class _Scalar:
    """The string, number or literal being written."""

    kind: str  # "string" | "key" | "number" | "literal"
    schema: dict[str, Any]
    path: str
    text: bytearray = field(default_factory=bytearray)
    chars: int = 0
    escape: int = 0  # 1: after a backslash; 2..5: in a \\uXXXX escape
    pending: int = 0  # UTF-8 continuation bytes still to come


class _Tracker:
    """One JSON value of a schema, byte by byte (``alive`` turns False on a byte it cannot be)."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.defs: Mapping[str, Any] = {**(schema.get("$defs") or {}), **(schema.get("definitions") or {})}
        self.root = schema
        self.stack: list[_Frame] = []
        self.scalar: _Scalar | None = None
        self.started = False
        self.done = False
        self.alive = True
        self.bound_cuts: list[str] = []
        self._fresh: dict[int, tuple[Any, tuple[bytes, int]]] = {}

    def fresh(self, schema: Any) -> tuple[bytes, int]:
        """:func:`fresh_value` of a schema inside this one (remembered: the schemas live as long as this)."""
        hit = self._fresh.get(id(schema))
        if hit is None or hit[0] is not schema:
            hit = self._fresh[id(schema)] = (schema, fresh_value(schema, self.defs))
        return hit[1]

    # -- feeding
    def feed(self, data: bytes) -> int:
        """Follow ``data``; returns how many bytes belonged to the value (the rest follows it)."""
        for i, b in enumerate(data):
            if self.done:
                return i
            if not self.alive:
                return len(data)
            self._byte(b)
        return len(data)

    def _byte(self, b: int) -> None:
        scalar = self.scalar
        if scalar is not None:
            if scalar.kind in ("string", "key"):
                self._string_byte(scalar, b)
                return
            if scalar.kind == "number" and b in b"0123456789+-.eE":
                scalar.text.append(b)
                return
            if scalar.kind == "literal":
                scalar.text.append(b)
                word = bytes(scalar.text)
                if word in (b"true", b"false", b"null"):
                    self.scalar = None
                    self._value_done()
                elif not any(w.startswith(word) for w in (b"true", b"false", b"null")):
                    self.alive = False
                return
            self.scalar = None  # a number ends at the byte after it
            self._value_done()
            if self.done:
                return
        if b in _WS:
            return
        if not self.stack:
            if self.started:
                self.alive = False
            else:
                self.started = True
                self._start_value(b, self.root, "")
            return
        top = self.stack[-1]
        ch = chr(b)
        if top.kind == "object":
            if top.state in ("first", "key") and ch == '"':
                self.scalar = _Scalar("key", {}, top.path)
            elif top.state in ("first", "after") and ch == "}":
                self._close(top)
            elif top.state == "colon" and ch == ":":
                top.state = "value"
            elif top.state == "after" and ch == ",":
                top.state = "key"
            elif top.state == "value":
                self._start_value(b, _member_schema(top.branches, top.key), _join(top.path, top.key))
            else:
                self.alive = False
        else:
            if top.state == "first" and ch == "]":
                self._close(top)
            elif top.state in ("first", "value"):
                self._start_value(b, _item_schema(top.branches[0], top.count), f"{top.path}[{top.count}]")
            elif top.state == "after" and ch == ",":
                top.state = "value"
            elif top.state == "after" and ch == "]":
                self._close(top)
            else:
                self.alive = False

    def _string_byte(self, s: _Scalar, b: int) -> None:
        if s.escape == 1:
            s.escape = 2 if b == ord("u") else 0
            s.chars += s.escape == 0
        elif s.escape >= 2:
            s.escape = 0 if s.escape == 5 else s.escape + 1
            s.chars += s.escape == 0
        elif s.pending:
            s.pending -= 1
        elif b == ord('"'):
            self.scalar = None
            if s.kind == "key":
                top = self.stack[-1]
                top.key = bytes(s.text).decode("utf-8", "replace")
                limit = _key_limit(top.branches[0])
                if limit is not None and s.chars >= limit:
                    self.bound_cuts.append(_join(top.path, top.key))
                top.state = "colon"
                top.branches = [o for o in top.branches if _admits_key(o, top.key)] or top.branches
                return
            limit = s.schema.get("maxLength")
            if s.schema.get(BOUND_MARK) and isinstance(limit, int) and s.chars >= limit:
                self.bound_cuts.append(s.path)
            self._value_done()
            return
        elif b == ord("\\"):
            s.escape = 1
        else:
            s.chars += 1
            s.pending = 1 if 0xC0 <= b < 0xE0 else 2 if 0xE0 <= b < 0xF0 else 3 if b >= 0xF0 else 0
        s.text.append(b)

    def _start_value(self, b: int, schema: Any, path: str) -> None:
        ch = chr(b)
        kind = {"{": "object", "[": "array", '"': "string", "t": "boolean", "f": "boolean", "n": "null"}.get(ch)
        if kind is None and (ch.isdigit() or ch == "-"):
            kind = "number"
        if kind is None:
            self.alive = False
            return
        branches = [s for s in _resolve(schema, self.defs) if kind in _types(s)] or [{}]
        if kind in ("object", "array"):
            self.stack.append(_Frame(kind, branches, path, "first"))
        elif kind == "string":
            self.scalar = _Scalar("string", branches[0], path)
        elif kind == "number":
            self.scalar = _Scalar("number", branches[0], path, bytearray([b]))
        else:
            self.scalar = _Scalar("literal", branches[0], path, bytearray([b]))

    def _close(self, frame: _Frame) -> None:
        self.stack.pop()
        if frame.kind == "array":
            limit = frame.branches[0].get("maxItems")
            if frame.branches[0].get(BOUND_MARK) and isinstance(limit, int) and frame.count >= limit:
                self.bound_cuts.append(frame.path)
        self._value_done()

    def _value_done(self) -> None:
        if not self.stack:
            self.done = True
            return
        top = self.stack[-1]
        if top.kind == "object":
            top.seen.append(top.key)
        else:
            top.count += 1
        top.state = "after"

    # -- finishing
    def completion(self) -> tuple[bytes, int, list[Cut]]:
        """The shortest text that completes the value, the bytes it may take, and the values it cuts or fills."""
        if self.done:
            return b"", 0, []
        if not self.started:
            text, cost = self.fresh(self.root)
            return text, cost, [("$", len(text))]
        out, extra = bytearray(), 0
        cut: list[Cut] = []
        s = self.scalar
        after_key: _Frame | None = None
        finished_key = ""
        if s is not None:
            out += _continuation(bytes(s.text), s.pending)
            if s.escape == 1:  # a high surrogate's low half begun, or any escape: the shortest
                out += b"udc00" if _HIGH_SURROGATE.search(s.text[:-1]) else b'"'
            elif s.escape >= 2:
                digits = bytes(s.text[len(s.text) - (s.escape - 2) :]) + b"0" * (6 - s.escape)
                out += digits[s.escape - 2 :]
                if 0xD800 <= int(digits, 16) <= 0xDBFF:
                    out += b"\\udc00"  # a high surrogate needs its low half
            elif s.kind in ("string", "key") and _HIGH_SURROGATE.search(s.text):
                out += b"\\udc00"
            if s.kind in ("string", "key"):
                out += b" " * max(0, int(s.schema.get("minLength", 0)) - s.chars)
            if s.kind == "key":
                top = self.stack[-1]
                name = _key_to_finish(top, bytes(s.text))
                out += name[len(s.text) :] if name.startswith(bytes(s.text)) else b""
                out += b'"'
                closed = len(out)  # a free-form key is cut where it closes; a member's name, where its value is
                after_key = top
                finished_key = name.decode("utf-8", "replace")
                value, cost = self.fresh(_member_schema(top.branches, finished_key))
                out += b":" + value
                extra += cost - len(value)
                named = finished_key in (top.branches[0].get("properties") or {})
                cut.append((_join(top.path, finished_key), len(out) if named else closed))
            elif s.kind == "string":
                out += b'"'
                cut.append((s.path, len(out)))
            elif s.kind == "number" and bytes(s.text[-1:]) in (b"-", b"+", b".", b"e", b"E"):
                out += b"0"
            elif s.kind == "literal":
                word = next(w for w in (b"true", b"false", b"null") if w.startswith(bytes(s.text)))
                out += word[len(s.text) :]
        for depth in range(len(self.stack) - 1, -1, -1):
            frame = self.stack[depth]
            inner_done = s is not None or depth < len(self.stack) - 1
            if frame.kind == "object":
                seen = list(frame.seen)
                if frame is after_key:
                    seen.append(finished_key)
                elif inner_done and frame.state == "value":
                    seen.append(frame.key)
                elif frame.state == "colon":
                    value, cost = self.fresh(_member_schema(frame.branches, frame.key))
                    out += b":" + value
                    extra += cost - len(value)
                    seen.append(frame.key)
                    cut.append((_join(frame.path, frame.key), len(out)))
                elif frame.state == "value":
                    value, cost = self.fresh(_member_schema(frame.branches, frame.key))
                    out += value
                    extra += cost - len(value)
                    seen.append(frame.key)
                    cut.append((_join(frame.path, frame.key), len(out)))
                need_member = frame.state == "key" and frame is not after_key
                missing = [k for k in _required(frame.branches[0]) if k not in seen]
                if need_member and not missing:  # after a comma: one more member, the first the schema has
                    missing = [k for k in (frame.branches[0].get("properties") or {}) if k not in seen][:1] or ["_"]
                for key in missing:
                    value, cost = self.fresh(_member_schema(frame.branches, key))
                    comma = b"," if seen and not need_member else b""
                    out += comma + _dumps(key) + b":" + value
                    extra += cost - len(value)
                    seen.append(key)
                    need_member = False
                    cut.append((_join(frame.path, key), len(out)))
                out += b"}"
            else:
                count = frame.count + (1 if inner_done and frame.state in ("first", "value") else 0)
                schema = frame.branches[0]
                needed = int(schema.get("minItems", 0))
                pending_value = frame.state == "value" and not inner_done
                first = True
                while pending_value or count < needed:
                    value, cost = self.fresh(_item_schema(schema, count))
                    out += (b"," if count and not pending_value else b"") + value
                    extra += cost - len(value)
                    count += 1
                    pending_value = False
                    first = False
                out += b"]"
                if first or count > frame.count:
                    cut.append((frame.path, len(out)))
        return bytes(out), len(out) + extra, cut


def _continuation(text: bytes, pending: int) -> bytes:
    """Bytes that complete the UTF-8 character ``text`` ends in (``pending`` still to come)."""
    if not pending:
        return b""
    lead = text[-1] if text and text[-1] >= 0xC0 else None  # right after the lead: a narrower range for two
    head = b"\xa0" if lead == 0xE0 else b"\x90" if lead == 0xF0 else b"\x80"
    return head + b"\x80" * (pending - 1)


_KEY_LIMIT = re.compile(r"\{1,(\d+)\}\$$")


def _key_limit(obj: Mapping[str, Any]) -> int | None:
    """The length bound the library set on an object's free-form keys, if it did."""
    if not obj.get(BOUND_MARK):
        return None
    for pattern in obj.get("patternProperties") or {}:
        match = _KEY_LIMIT.search(pattern)
        if match:
            return int(match.group(1))
    return None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _admits_key(obj: Mapping[str, Any], key: str) -> bool:
    return (
        key in (obj.get("properties") or {})
        or bool(obj.get("patternProperties"))
        or bool(obj.get("additionalProperties"))
    )


def _key_to_finish(frame: _Frame, typed: bytes) -> bytes:
    """The member name a key being typed is finished as: a required one first, then any that fits."""
    obj = frame.branches[0]
    names = [k for k in _required(obj) if k not in frame.seen]
    names += [k for k in (obj.get("properties") or {}) if k not in frame.seen and k not in names]
    for name in names:
        if name.encode().startswith(typed):
            return name.encode()
    return typed or b"_"  # a free-form key has at least one character


# ---------------------------------------------------------------------- alternatives
class _Branch:
    """One alternative being followed: its prefix, its value, its suffix."""

    def __init__(self, alt: Alternative) -> None:
        self.alt = alt
        self.pos = 0  # bytes of the prefix matched
        self.value = _Tracker(alt.schema)
        self.tail = 0  # bytes of the suffix matched
        self.alive = True

    def feed(self, data: bytes) -> None:
        prefix = self.alt.prefix
        while data and self.alive:
            if self.pos < len(prefix):
                n = min(len(data), len(prefix) - self.pos)
                if data[:n] != prefix[self.pos : self.pos + n]:
                    self.alive = False
                self.pos += n
                data = data[n:]
            elif not self.value.done:
                used = self.value.feed(data)
                self.alive = self.value.alive
                data = data[used:]
            else:
                suffix = self.alt.suffix
                if self.tail >= len(suffix):
                    return  # past the end: only the end of the turn may follow
                n = min(len(data), len(suffix) - self.tail)
                if data[:n] != suffix[self.tail : self.tail + n]:
                    self.alive = False
                self.tail += n
                data = data[n:]

    def completion(self) -> tuple[bytes, int, list[Cut]]:
        prefix = self.alt.prefix[self.pos :]
        text, cost, cut = self.value.completion()
        suffix = self.alt.suffix[self.tail :]
        if self.alt.label:
            cut = [(f"{self.alt.label}({p})" if p != "$" else self.alt.label, len(prefix) + e) for p, e in cut]
        else:
            cut = [(p or "$", len(prefix) + e) for p, e in cut]
        return prefix + text + suffix, len(prefix) + cost + len(suffix), cut


class Follower:
    """Follows generated bytes through the alternatives of a :class:`Shape` (see the module docstring)."""

    def __init__(self, shape: Shape) -> None:
        self.shape = shape
        self._branches = [_Branch(a) for a in shape.alternatives]

    def feed(self, data: bytes) -> None:
        """Follow the bytes of one generated token."""
        if not data:
            return
        for branch in self._branches:
            branch.feed(data)
        live = [b for b in self._branches if b.alive]
        self._branches = live or self._branches[:0]

    def completion(self) -> tuple[bytes, int, list[Cut]] | None:
        """The cheapest completion of the live alternatives (with each cut's offset in its text), or None."""
        best = None
        for branch in self._branches:
            option = branch.completion()
            if best is None or option[1] < best[1]:
                best = option
        return best

    def bound_cuts(self) -> list[str]:
        """Values that reached a bound the library set (a string's ``maxLength``, an array's ``maxItems``)."""
        if len(self._branches) != 1:
            return []
        branch = self._branches[0]
        label = branch.alt.label
        return [f"{label}({p})" if label else p for p in branch.value.bound_cuts]
