"""Grammars for structured output and forced tool calls (onnxruntime-genai guidance).

A JSON schema alone lets a weak or unlucky model write a string until the token budget
runs out, and JSON cut off there is not an answer. :func:`bound_schema` bounds every
free-form string, array and number from the token budget, counting the longest value in
bytes (a token is at least one byte, whatever tokenization the model picks), so a budget
that passes the check holds the whole output, and one that cannot is refused before
generating. Free-form keys and ``pattern`` strings cannot be bounded: for those the count is
an estimate, and the engine raises a clear error in the rare case the output still does
not close. :func:`tool_call_guidance` forces a tool call in the model family's own format
(Qwen3 ``<tool_call>`` JSON, Llama 3.2 bare JSON) with arguments that match the tool's
schema.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import InvalidRequestError
from ..messages import normalize_tools
from ..options import Guidance
from .formats import call_framing

__all__ = ["bound_schema", "json_object_guidance", "json_schema_guidance", "output_bound", "tool_call_guidance"]

_MAX_ITEMS = 8
_NUMBER_BOUND = 10**12
_NUMBER_STEP = 0.0001
_NO_WHITESPACE = {"whitespace_flexible": False}


def _bound(schema: Any, chars: int, items: int = _MAX_ITEMS) -> None:
    if isinstance(schema, list):
        for s in schema:
            _bound(s, chars, items)
        return
    if not isinstance(schema, dict):
        return
    types = schema.get("type")
    types = types if isinstance(types, list) else [types]
    if "string" in types and not any(k in schema for k in ("enum", "const", "format", "pattern")):
        schema["maxLength"] = min(int(schema.get("maxLength", chars)), chars)
        schema["minLength"] = min(int(schema.get("minLength", 0)), schema["maxLength"])
    if "object" in types:
        extra = schema.get("additionalProperties", "properties" not in schema)
        if extra is not False and not schema.get("patternProperties"):
            # Free-form keys (a dict field): keys of at most `chars` characters without quotes,
            # backslashes or control characters, values as the schema says (any value: a scalar).
            value = extra if isinstance(extra, dict) and extra else {"type": ["string", "number", "boolean", "null"]}
            schema["patternProperties"] = {_key_pattern(chars): value}
            schema["maxProperties"] = min(
                int(schema.get("maxProperties", items)), items + len(schema.get("properties") or {})
            )
        schema["additionalProperties"] = False
    if "array" in types:
        # Never below what the schema itself requires (a tuple's items, minItems).
        floor = max(int(schema.get("minItems", 0)), len(schema.get("prefixItems") or []))
        schema["maxItems"] = max(min(int(schema.get("maxItems", max(items, floor))), items), floor)
        schema["minItems"] = min(int(schema.get("minItems", 0)), schema["maxItems"])
    if "integer" in types or "number" in types:
        schema.setdefault("minimum", -_NUMBER_BOUND)
        schema.setdefault("maximum", _NUMBER_BOUND)
    if "number" in types and "integer" not in types:
        schema.setdefault("multipleOf", _NUMBER_STEP)  # bounds the digits after the point
    for value in schema.values():
        if isinstance(value, (dict, list)):
            _bound(value, chars, items)


def _worst_bytes(schema: Any, defs: Mapping[str, Any], depth: int = 0) -> int:
    r"""The most UTF-8 bytes a value of a bounded ``schema`` can take (no free whitespace).

    Every token is at least one byte, so this bounds the tokens of the value under any
    tokenization the model may choose. Strings count 6 bytes a character (a ``\uXXXX``
    escape); separators are the compact ``,`` and ``:`` (no free whitespace). A value the bounds cannot reach
    (a ``pattern`` or ``format`` string, an object with free keys, an array without
    ``items``) counts as 32 characters of string: an estimate, not a bound.
    """
    if not isinstance(schema, dict) or depth > 20:
        return _free_value()
    if "$ref" in schema:
        return _worst_bytes(defs.get(str(schema["$ref"]).rsplit("/", 1)[-1]), defs, depth + 1)
    if "const" in schema:
        return _literal_bytes([schema["const"]])
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return _literal_bytes(schema["enum"])
    subs = [s for key in ("anyOf", "oneOf", "allOf") for s in (schema.get(key) or [])]
    worst = max((_worst_bytes(s, defs, depth + 1) for s in subs), default=0)
    types = schema.get("type")
    types = types if isinstance(types, list) else [types] if types is not None else []
    if not types and not subs:
        types = ["object"] if "properties" in schema else []
        if not types:
            return _free_value()
    for kind in types:
        worst = max(worst, _type_bytes(kind, schema, defs, depth))
    return worst


def _type_bytes(kind: Any, schema: dict[str, Any], defs: Mapping[str, Any], depth: int) -> int:
    if kind == "string":
        if any(k in schema for k in ("format", "pattern")) or "maxLength" not in schema:
            return _free_value()
        return 2 + 6 * int(schema["maxLength"])
    if kind in ("integer", "number"):
        digits = max(len(str(int(schema.get(k, _NUMBER_BOUND)))) for k in ("minimum", "maximum"))  # sign included
        return digits + (5 if kind == "number" else 0)  # the point and 4 decimals
    if kind == "boolean":
        return 5
    if kind == "null":
        return 4
    if kind == "array":
        items = schema.get("items")
        prefix = [_worst_bytes(p, defs, depth + 1) for p in schema.get("prefixItems") or []]
        n = int(schema.get("maxItems", _MAX_ITEMS))
        rest = max(0, n - len(prefix))
        if isinstance(items, dict):
            per = _worst_bytes(items, defs, depth + 1)
        else:
            per = 0 if items is False or (prefix and "maxItems" in schema and rest == 0) else _free_value()
        values = sum(prefix[:n]) + rest * per
        return 2 + values + max(0, n - 1)
    if kind == "object":
        props = schema.get("properties") or {}
        members = [len(json.dumps(k).encode()) + 1 + _worst_bytes(v, defs, depth + 1) for k, v in props.items()]
        patterns = schema.get("patternProperties") or {}
        if patterns:
            n = max(0, int(schema.get("maxProperties", _MAX_ITEMS)) - len(members))
            key = max(_pattern_key_bytes(p) for p in patterns)
            value = max(_worst_bytes(v, defs, depth + 1) for v in patterns.values())
            members += [key + 1 + value] * n
        elif schema.get("additionalProperties", not props) is not False:
            members += [_free_value() + 1 + _free_value()] * int(schema.get("maxProperties", _MAX_ITEMS))
        return 2 + sum(members) + max(0, len(members) - 1)
    return _free_value()


_KEY_CHARS = '[^"\\\\\\x00-\\x1f]'
_KEY_RE = re.compile(r"^\^" + re.escape(_KEY_CHARS) + r"\{1,(\d+)\}\$$")


def _key_pattern(chars: int) -> str:
    """A key of 1..``chars`` characters that needs no escape (at most 4 UTF-8 bytes each)."""
    return f"^{_KEY_CHARS}{{1,{chars}}}$"


def _pattern_key_bytes(pattern: str) -> int:
    """Bytes of the longest key ``pattern`` admits (quotes included); an estimate for other patterns."""
    match = _KEY_RE.match(pattern)
    return 2 + 4 * int(match.group(1)) if match else _free_value()


def _free_value() -> int:
    return 2 + 6 * 32


def _literal_bytes(values: Sequence[Any]) -> int:
    return max(max(len(json.dumps(v).encode()), len(json.dumps(v, ensure_ascii=False).encode())) for v in values)


def output_bound(schema: Mapping[str, Any]) -> int:
    """The most tokens a value of the bounded ``schema`` can take (see :func:`_worst_bytes`)."""
    out = dict(schema)
    defs = {**(out.get("$defs") or {}), **(out.get("definitions") or {})}
    return _worst_bytes(out, defs)


def bound_schema(
    schema: Mapping[str, Any], max_new_tokens: int, *, overhead: int = 0, budget_name: str = "max_new_tokens"
) -> dict[str, Any]:
    """A copy of ``schema`` whose every value fits in ``max_new_tokens - overhead`` tokens.

    Free-form strings get the largest ``maxLength`` with which the longest value the
    schema admits still fits (counted in bytes, which no tokenization can exceed: see
    :func:`output_bound`), arrays at most 8 items (fewer when 8 would leave strings less
    than 8 characters), numbers at most 13 digits before the
    point and 4 after, objects no extra keys, and no free whitespace. Existing tighter
    bounds are kept. One token is kept for the end of the turn after the value.

    Raises:
        InvalidRequestError: the schema is not a JSON object schema, or the budget is too
            small for its longest value with one character per free-form string.
    """
    if not isinstance(schema, Mapping):
        raise InvalidRequestError(f"a JSON schema must be a dict, got {type(schema).__name__}")
    room = max_new_tokens - overhead - 1

    def widest(items: int) -> int:
        """The largest string bound with which the longest value fits (0: none fits)."""
        if output_bound(_bounded(schema, 1, items)) > room:
            return 0
        lo, hi = 1, max(1, room // 6)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if output_bound(_bounded(schema, mid, items)) <= room:
                lo = mid
            else:
                hi = mid - 1
        return lo

    # Prefer the most array items that leave strings room for a few words, then fewer items.
    fits = [(items, widest(items)) for items in (_MAX_ITEMS, 4, 2, 1)]
    chosen = next(((i, c) for i, c in fits if c >= 8), None) or next(((i, c) for i, c in fits if c >= 1), None)
    if chosen is None:
        need = output_bound(_bounded(schema, 1, 1))
        raise InvalidRequestError(
            f"{budget_name}={max_new_tokens} is too small for this schema: its longest value takes up to "
            f"{need} tokens with one character per free-form string and one item per array"
            f"{f' after {overhead} tokens of framing' if overhead else ''}, and one token ends the turn; raise "
            f"{budget_name} to at least {need + overhead + 1}"
        )
    out = _bounded(schema, chosen[1], chosen[0])
    out["x-guidance"] = {**_NO_WHITESPACE, **(out.get("x-guidance") or {})}
    return out


def json_schema_guidance(
    schema: Mapping[str, Any], max_new_tokens: int, *, budget_name: str = "max_new_tokens"
) -> Guidance:
    """Guidance for output that is one JSON value matching ``schema``, closed within the budget.

    ``budget_name`` is what the caller calls the output budget, for error messages.
    """
    bounded = bound_schema(schema, max_new_tokens, budget_name=budget_name)
    return Guidance(type="json_schema", data=json.dumps(bounded))


def json_object_guidance(max_new_tokens: int, *, budget_name: str = "max_new_tokens") -> Guidance:
    """JSON mode: a flat JSON object whose keys and values are bounded so it closes within the budget.

    Values are strings, numbers, booleans or null. A string character can take up to 4
    tokens (UTF-8 bytes of a byte-level tokenizer); the grammar allows no escapes and no
    free whitespace, so the worst case is countable.

    Raises:
        InvalidRequestError: ``max_new_tokens`` is too small for even a one-key object.
    """
    pairs = max(1, min(8, max_new_tokens // 64))
    per_pair = (max_new_tokens - 2) // pairs
    chars = (per_pair - 5) // 8  # key and value strings: quotes, colon, comma + 4 tokens a character each
    if chars < 1:
        raise InvalidRequestError(
            f"{budget_name}={max_new_tokens} is too small for JSON mode; raise {budget_name} to at least 16"
        )
    digits = max(0, min(11, chars - 1))
    frac = min(4, chars)
    members = "pair"
    for _ in range(pairs - 1):
        members = f'pair ("," {members})?'
    grammar = "\n".join(
        [
            f'start: "{{" ({members})? "}}"',
            'pair: KEY ":" value',
            'value: STRING | NUMBER | "true" | "false" | "null"',
            f'KEY: /"[^"\\\\\\x00-\\x1f]{{1,{chars}}}"/',
            f'STRING: /"[^"\\\\\\x00-\\x1f]{{0,{chars}}}"/',
            f"NUMBER: /-?(0|[1-9][0-9]{{0,{digits}}})(\\.[0-9]{{1,{frac}}})?/",
        ]
    )
    return Guidance(type="lark_grammar", data=grammar)


def _bounded(schema: Mapping[str, Any], chars: int, items: int) -> dict[str, Any]:
    """A copy of ``schema`` with strings of at most ``chars`` characters and arrays of ``items``."""
    out = copy.deepcopy(dict(schema))
    _bound(out, chars, items)
    return out


def _lark_string(text: str) -> str:
    return json.dumps(text)


def tool_call_guidance(
    family: str,
    tools: Sequence[Mapping[str, Any]],
    max_new_tokens: int,
    name: str | None = None,
    *,
    count_tokens: Callable[[str], int] | None = None,
    budget_name: str = "max_new_tokens",
) -> Guidance:
    """Guidance that forces one call to ``name`` (or to any of ``tools``) in the family's format.

    The budget check counts the call's framing (markers, ``{"name": ..., "arguments": ``)
    with ``count_tokens``, the package tokenizer: text the grammar forces is emitted in the
    tokenizer's own tokens. The arguments, which the model writes, are counted in bytes (see
    :func:`bound_schema`). So a budget that passes holds the whole call and its end of turn.

    Args:
        family: the chat template family (``qwen3``, ``chatml``, ``llama3``).
        tools: tool definitions (OpenAI function form).
        max_new_tokens: the output budget the call must fit.
        name: the tool to call; None lets the model choose among all of them.
        count_tokens: tokens of a text with the package tokenizer; None counts bytes (an
            upper bound for any tokenizer).
        budget_name: what the caller calls the output budget, for error messages.

    Raises:
        InvalidRequestError: no tools, an unknown name, or a family without a tool format.
    """
    normalized = normalize_tools(list(tools))
    if not normalized:
        raise InvalidRequestError("a tool call was required but no tools were given; bind at least one tool")
    if name is not None:
        normalized = [t for t in normalized if t["function"]["name"] == name]
        if not normalized:
            known = ", ".join(t["function"]["name"] for t in normalize_tools(list(tools)))
            raise InvalidRequestError(f"tool_choice names {name!r}, which is not a bound tool; bound tools: {known}")
    head, args_key, tail = call_framing(family)
    rules = []
    alternatives = []
    for i, tool in enumerate(normalized):
        fn = tool["function"]
        prefix = head + "{" + f'"name": {json.dumps(fn["name"])}, "{args_key}": '
        count = count_tokens or (lambda text: len(text.encode()))
        framing = count(prefix) + count(tail)
        try:
            params = bound_schema(
                fn["parameters"] or {"type": "object", "properties": {}},
                max_new_tokens,
                overhead=framing,
                budget_name=budget_name,
            )
        except InvalidRequestError:
            need = framing + output_bound(_bounded(fn["parameters"] or {}, 1, 1)) + 1
            raise InvalidRequestError(
                f"{budget_name}={max_new_tokens} is too small for a forced call to {fn['name']!r}: the call takes up "
                f"to {need} tokens ({framing} of framing, the longest arguments with one character per free-form "
                f"string, one to end the turn); raise {budget_name} to at least {need}"
            ) from None
        rules.append(f"call{i}: {_lark_string(prefix)} args{i} {_lark_string(tail)}")
        rules.append(f"args{i}: %json {json.dumps(params)}")
        alternatives.append(f"call{i}")
    grammar = "start: " + " | ".join(alternatives) + "\n" + "\n".join(rules)
    return Guidance(type="lark_grammar", data=grammar)
