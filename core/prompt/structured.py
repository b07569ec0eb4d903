"""Grammars for structured output and forced tool calls (onnxruntime-genai guidance).

A JSON schema alone lets a weak or unlucky model write a string until the token budget runs
out, and JSON cut off there is not an answer. Two bounds keep every answer whole:

* :func:`bound_schema` gives every free-form string a ``maxLength`` and every array a
  ``maxItems`` from a share of the budget at a realistic cost (:data:`CHARS_PER_TOKEN`
  characters a token), so one value cannot take the room of the others. A ``maxLength`` /
  ``maxItems`` the caller set is kept as given.
* While decoding, the generation loop follows the output (:mod:`ryzenai_core.prompt.completion`)
  and, when the tokens left are what closing needs, steers the model onto the shortest valid
  completion (:mod:`ryzenai_core.generation.closer`). The answer is complete JSON; the values
  cut (or filled with minimal values) are reported, with ``finish_reason="length"``.

A budget is refused before generating only when it cannot hold the shortest value the schema
admits. :func:`tool_call_guidance` forces a tool call in the model family's own format (Qwen3
``<tool_call>`` JSON, Llama 3.2 bare JSON) with arguments that match the tool's schema;
:func:`tool_or_answer_guidance` allows a tool call or the schema's answer.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import InvalidRequestError
from ..messages import normalize_tools
from ..options import Guidance
from .completion import BOUND_MARK, Alternative, Shape, fresh_value
from .formats import call_framing

__all__ = [
    "CHARS_PER_TOKEN",
    "bound_schema",
    "json_object_guidance",
    "json_schema_guidance",
    "output_bound",
    "tool_call_guidance",
    "tool_or_answer_guidance",
]

#: Characters a token of text costs when the library sizes a string it bounds (English prose
#: runs about 4, code and JSON about 3; text that costs more is closed by the budget, and reported).
CHARS_PER_TOKEN = 3
_MAX_KEY = 40  # characters of a free-form key
_MIN_CHARS = 16  # a string bound never below this: at a tight budget the closing while decoding decides
_MAX_ITEMS = 8
_NUMBER_BOUND = 10**12
_NUMBER_STEP = 0.0001
_NO_WHITESPACE = {"whitespace_flexible": False}


def _bound(schema: Any, chars: int, items: int = _MAX_ITEMS) -> None:
    """Bound ``schema`` in place: strings of ``chars`` characters, arrays of ``items`` (the caller's own kept)."""
    if isinstance(schema, list):
        for s in schema:
            _bound(s, chars, items)
        return
    if not isinstance(schema, dict):
        return
    types = schema.get("type")
    types = types if isinstance(types, list) else [types]
    if "string" in types and not any(k in schema for k in ("enum", "const", "format", "pattern")):
        if "maxLength" not in schema:
            schema["maxLength"] = max(chars, int(schema.get("minLength", 0)))
            schema[BOUND_MARK] = True
        schema["minLength"] = min(int(schema.get("minLength", 0)), int(schema["maxLength"]))
    if "object" in types:
        extra = schema.get("additionalProperties", "properties" not in schema)
        if extra is not False and not schema.get("patternProperties"):
            # Free-form keys (a dict field): short keys without quotes, backslashes or control
            # characters, values as the schema says (any value: a scalar).
            value = extra if isinstance(extra, dict) and extra else {"type": ["string", "number", "boolean", "null"]}
            schema["patternProperties"] = {_key_pattern(min(chars, _MAX_KEY)): value}
            schema.setdefault("maxProperties", items + len(schema.get("properties") or {}))
            schema[BOUND_MARK] = True
        schema["additionalProperties"] = False
    if "array" in types and "maxItems" not in schema:
        # Never below what the schema itself requires (a tuple's items, minItems).
        schema["maxItems"] = max(items, int(schema.get("minItems", 0)), len(schema.get("prefixItems") or []))
        schema[BOUND_MARK] = True
    if "integer" in types or "number" in types:
        schema.setdefault("minimum", -_NUMBER_BOUND)
        schema.setdefault("maximum", _NUMBER_BOUND)
    if "number" in types and "integer" not in types:
        schema.setdefault("multipleOf", _NUMBER_STEP)  # bounds the digits after the point
    for key, value in schema.items():
        if isinstance(value, (dict, list)) and key != BOUND_MARK:
            _bound(value, chars, items)


def _cost(schema: Any, defs: Mapping[str, Any], cap: int, depth: int = 0) -> int:
    """Tokens the longest value of a bounded ``schema`` takes at a realistic cost (no free whitespace).

    A string counts :data:`CHARS_PER_TOKEN` characters a token, up to ``cap`` characters (a
    longer bound the caller set takes the same share as the library's own); everything else
    counts its bytes. A value the bounds cannot reach (a ``pattern`` or ``format`` string, an
    array without ``items``) counts as a 32-character string.
    """
    if not isinstance(schema, dict) or depth > 20:
        return _free_value()
    if "$ref" in schema:
        return _cost(defs.get(str(schema["$ref"]).rsplit("/", 1)[-1]), defs, cap, depth + 1)
    if "const" in schema:
        return _literal_bytes([schema["const"]])
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return _literal_bytes(schema["enum"])
    subs = [s for key in ("anyOf", "oneOf", "allOf") for s in (schema.get(key) or [])]
    worst = max((_cost(s, defs, cap, depth + 1) for s in subs), default=0)
    types = schema.get("type")
    types = types if isinstance(types, list) else [types] if types is not None else []
    if not types and not subs:
        types = ["object"] if "properties" in schema else []
        if not types:
            return _free_value()
    for kind in types:
        worst = max(worst, _type_cost(kind, schema, defs, cap, depth))
    return worst


def _text_tokens(chars: int) -> int:
    return 2 + math.ceil(chars / CHARS_PER_TOKEN)


def _type_cost(kind: Any, schema: dict[str, Any], defs: Mapping[str, Any], cap: int, depth: int) -> int:
    if kind == "string":
        if any(k in schema for k in ("format", "pattern")) or "maxLength" not in schema:
            return _free_value()
        return _text_tokens(min(int(schema["maxLength"]), cap))
    if kind in ("integer", "number"):
        digits = max(len(str(int(schema.get(k, _NUMBER_BOUND)))) for k in ("minimum", "maximum"))  # sign included
        return digits + (5 if kind == "number" else 0)  # the point and 4 decimals
    if kind == "boolean":
        return 5
    if kind == "null":
        return 4
    if kind == "array":
        items = schema.get("items")
        prefix = [_cost(p, defs, cap, depth + 1) for p in schema.get("prefixItems") or []]
        n = int(schema.get("maxItems", _MAX_ITEMS))
        if items is False:  # a tuple: its prefix items only
            n = min(n, len(prefix))
        rest = max(0, n - len(prefix))
        if isinstance(items, dict):
            per = _cost(items, defs, cap, depth + 1)
        else:
            per = 0 if items is False or (prefix and "maxItems" in schema and rest == 0) else _free_value()
        values = sum(prefix[:n]) + min(rest, _MAX_ITEMS) * per  # the caller's longer arrays: the same share
        return 2 + values + max(0, n - 1)
    if kind == "object":
        props = schema.get("properties") or {}
        members = [len(json.dumps(k).encode()) + 1 + _cost(v, defs, cap, depth + 1) for k, v in props.items()]
        patterns = schema.get("patternProperties") or {}
        if patterns:
            n = max(0, min(int(schema.get("maxProperties", _MAX_ITEMS)), len(members) + _MAX_ITEMS) - len(members))
            key = max(_pattern_key_tokens(p) for p in patterns)
            value = max(_cost(v, defs, cap, depth + 1) for v in patterns.values())
            members += [key + 1 + value] * n
        elif schema.get("additionalProperties", not props) is not False:
            members += [_free_value() + 1 + _free_value()] * int(schema.get("maxProperties", _MAX_ITEMS))
        return 2 + sum(members) + max(0, len(members) - 1)
    return _free_value()


_KEY_CHARS = '[^"\\\\\\x00-\\x1f]'
_KEY_RE = re.compile(r"^\^" + re.escape(_KEY_CHARS) + r"\{1,(\d+)\}\$$")


def _key_pattern(chars: int) -> str:
    """A key of 1..``chars`` characters that needs no escape."""
    return f"^{_KEY_CHARS}{{1,{chars}}}$"


def _pattern_key_tokens(pattern: str) -> int:
    """Tokens of the longest key ``pattern`` admits (quotes included); an estimate for other patterns."""
    match = _KEY_RE.match(pattern)
    return _text_tokens(int(match.group(1))) if match else _free_value()


def _free_value() -> int:
    return _text_tokens(32)


def _literal_bytes(values: Sequence[Any]) -> int:
    return max(max(len(json.dumps(v).encode()), len(json.dumps(v, ensure_ascii=False).encode())) for v in values)


def output_bound(schema: Mapping[str, Any], cap: int = 10**9) -> int:
    """Tokens the longest value of the bounded ``schema`` takes at a realistic cost (see :func:`_cost`)."""
    out = dict(schema)
    defs = {**(out.get("$defs") or {}), **(out.get("definitions") or {})}
    return _cost(out, defs, cap)


def shortest_value(schema: Mapping[str, Any]) -> int:
    """Bytes (so, at most tokens) of the shortest value of ``schema`` (see :func:`~.completion.fresh_value`)."""
    defs = {**(schema.get("$defs") or {}), **(schema.get("definitions") or {})}
    return fresh_value(schema, defs)[1]


def reserve(schema: Mapping[str, Any]) -> int:
    """Tokens kept beyond the completion while decoding: the end of the turn, and what one free token may open.

    A token the model writes freely may start an escape or a character (6 bytes to finish), an
    optional member or one more array item (its key and shortest value).
    """
    defs = {**(schema.get("$defs") or {}), **(schema.get("definitions") or {})}
    grow = 6
    seen: set[int] = set()

    def walk(node: Any, depth: int) -> None:
        nonlocal grow
        if isinstance(node, list):
            for item in node:
                walk(item, depth)
            return
        if not isinstance(node, dict) or id(node) in seen or depth > 20:
            return
        seen.add(id(node))
        if "$ref" in node:
            walk(defs.get(str(node["$ref"]).rsplit("/", 1)[-1]), depth + 1)
        required = set(node.get("required") or [])
        for key, value in (node.get("properties") or {}).items():
            if key not in required:
                grow = max(grow, len(json.dumps(key).encode()) + 2 + fresh_value(value, defs)[1])
        for value in (node.get("patternProperties") or {}).values():
            grow = max(grow, 4 + fresh_value(value, defs)[1])
        if isinstance(node.get("items"), dict):
            grow = max(grow, 1 + fresh_value(node["items"], defs)[1])
        for value in node.values():
            if isinstance(value, (dict, list)):
                walk(value, depth + 1)

    walk(schema, 0)
    return 2 + grow


def _too_small(budget_name: str, max_new_tokens: int, need: int, what: str, framing: int = 0) -> InvalidRequestError:
    parts = f"its framing ({framing} tokens), its shortest value" if framing else "its shortest value"
    return InvalidRequestError(
        f"{budget_name}={max_new_tokens} is too small for {what}: {parts}, the room one more token "
        f"may open and the end of the turn take up to {need} tokens; raise {budget_name} to at least {need}"
    )


def bound_schema(
    schema: Mapping[str, Any], max_new_tokens: int, *, overhead: int = 0, budget_name: str = "max_new_tokens"
) -> dict[str, Any]:
    """A copy of ``schema`` with every free-form string, array, number and object bounded.

    Free-form strings get the largest ``maxLength`` with which the longest value the schema
    admits fits ``max_new_tokens - overhead`` tokens at a realistic cost (see :func:`_cost`),
    arrays at most 8 items (fewer when 8 would leave strings less than 32 characters; strings never
    less than 16 characters), numbers
    at most 13 digits before the point and 4 after, objects no extra keys, and no free
    whitespace. The caller's own ``maxLength`` and ``maxItems`` are kept as given. Text that
    costs more than the realistic rate is closed while decoding (see the module docstring).

    Raises:
        InvalidRequestError: the schema is not a JSON object schema, or the budget cannot hold
            its shortest value.
    """
    if not isinstance(schema, Mapping):
        raise InvalidRequestError(f"a JSON schema must be a dict, got {type(schema).__name__}")
    need = overhead + shortest_value(schema) + reserve(schema)
    if need > max_new_tokens:
        raise _too_small(budget_name, max_new_tokens, need, "this schema", overhead)
    room = max_new_tokens - overhead - 1

    def widest(items: int) -> int:
        """The largest string bound with which the longest value fits (0: none fits)."""
        if output_bound(_bounded(schema, 1, items), 1) > room:
            return 0
        lo, hi = 1, max(1, room * CHARS_PER_TOKEN)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if output_bound(_bounded(schema, mid, items), mid) <= room:
                lo = mid
            else:
                hi = mid - 1
        return lo

    # Prefer the most array items that leave strings room for a sentence, then fewer items.
    fits = [(items, widest(items)) for items in (_MAX_ITEMS, 4, 2, 1)]
    items, chars = next(((i, c) for i, c in fits if c >= 32), None) or (1, max(c for _, c in fits))
    out = _bounded(schema, max(chars, _MIN_CHARS), items)
    out["x-guidance"] = {**_NO_WHITESPACE, **(out.get("x-guidance") or {})}
    return out


def json_schema_guidance(
    schema: Mapping[str, Any], max_new_tokens: int, *, budget_name: str = "max_new_tokens"
) -> Guidance:
    """Guidance for output that is one JSON value matching ``schema``, closed within the budget.

    ``budget_name`` is what the caller calls the output budget, for error messages.
    """
    bounded = bound_schema(schema, max_new_tokens, budget_name=budget_name)
    shape = Shape((Alternative(bounded),), reserve(bounded))
    return Guidance(type="json_schema", data=json.dumps(bounded), shape=shape)


#: JSON mode: a flat object of string, number, boolean or null values under free keys.
JSON_OBJECT = {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean", "null"]}}


def json_object_guidance(max_new_tokens: int, *, budget_name: str = "max_new_tokens") -> Guidance:
    """JSON mode: a flat JSON object (string, number, boolean or null values), closed within the budget.

    Raises:
        InvalidRequestError: ``max_new_tokens`` is too small for even an empty object.
    """
    try:
        return json_schema_guidance(JSON_OBJECT, max_new_tokens, budget_name=budget_name)
    except InvalidRequestError:
        need = shortest_value(JSON_OBJECT) + reserve(_bounded(JSON_OBJECT, 1, 1))
        raise InvalidRequestError(
            f"{budget_name}={max_new_tokens} is too small for JSON mode; raise {budget_name} to at least {need}"
        ) from None


def _bounded(schema: Mapping[str, Any], chars: int, items: int) -> dict[str, Any]:
    """A copy of ``schema`` with strings of at most ``chars`` characters and arrays of ``items``."""
    out = copy.deepcopy(dict(schema))
    _bound(out, chars, items)
    return out


def _lark_string(text: str) -> str:
    return json.dumps(text)


def _calls(
    family: str,
    tools: Sequence[Mapping[str, Any]],
    max_new_tokens: int,
    name: str | None,
    count_tokens: Callable[[str], int] | None,
    budget_name: str,
    what: str = "a forced call to",
) -> tuple[list[str], list[str], list[Alternative]]:
    """Grammar rules, their names and the alternatives of a call to ``name`` (or to any of ``tools``)."""
    normalized = normalize_tools(list(tools))
    if not normalized:
        raise InvalidRequestError("a tool call was required but no tools were given; bind at least one tool")
    if name is not None:
        normalized = [t for t in normalized if t["function"]["name"] == name]
        if not normalized:
            known = ", ".join(t["function"]["name"] for t in normalize_tools(list(tools)))
            raise InvalidRequestError(f"tool_choice names {name!r}, which is not a bound tool; bound tools: {known}")
    head, args_key, tail = call_framing(family)
    rules: list[str] = []
    names: list[str] = []
    alternatives: list[Alternative] = []
    count = count_tokens or (lambda text: len(text.encode()))
    for i, tool in enumerate(normalized):
        fn = tool["function"]
        prefix = head + "{" + f'"name": {json.dumps(fn["name"])}, "{args_key}": '
        parameters = fn["parameters"] or {"type": "object", "properties": {}}
        # The framing in the tokenizer's own tokens (the closing while decoding counts its bytes).
        framing = count(prefix) + count(tail)
        need = framing + shortest_value(parameters) + reserve(_bounded(parameters, 1, 1))
        if need > max_new_tokens:
            raise _too_small(budget_name, max_new_tokens, need, f"{what} {fn['name']!r}", framing)
        params = bound_schema(parameters, max_new_tokens, overhead=framing, budget_name=budget_name)
        rules.append(f"call{i}: {_lark_string(prefix)} args{i} {_lark_string(tail)}")
        rules.append(f"args{i}: %json {json.dumps(params)}")
        names.append(f"call{i}")
        alternatives.append(Alternative(params, prefix.encode(), tail.encode(), fn["name"]))
    return rules, names, alternatives


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

    The arguments' strings are sized with the framing (markers, ``{"name": ..., "arguments": ``)
    counted by ``count_tokens``, the package tokenizer; a budget that cannot hold the framing
    and the shortest arguments is refused. The call closes within the budget (see the module docstring).

    Args:
        family: the chat template family (``qwen3``, ``chatml``, ``llama3``).
        tools: tool definitions (OpenAI function form).
        max_new_tokens: the output budget the call must fit.
        name: the tool to call; None lets the model choose among all of them.
        count_tokens: tokens of a text with the package tokenizer; None counts bytes.
        budget_name: what the caller calls the output budget, for error messages.

    Raises:
        InvalidRequestError: no tools, an unknown name, a family without a tool format, a budget
            too small for the call.
    """
    rules, names, alternatives = _calls(family, tools, max_new_tokens, name, count_tokens, budget_name)
    grammar = "start: " + " | ".join(names) + "\n" + "\n".join(rules)
    shape = Shape(tuple(alternatives), max(reserve(a.schema) for a in alternatives))
    return Guidance(type="lark_grammar", data=grammar, shape=shape)


def tool_or_answer_guidance(
    family: str,
    tools: Sequence[Mapping[str, Any]],
    schema: Mapping[str, Any],
    max_new_tokens: int,
    *,
    count_tokens: Callable[[str], int] | None = None,
    budget_name: str = "max_new_tokens",
) -> Guidance:
    """Guidance for a turn that either calls one of ``tools`` (in the family's format) or answers with ``schema``.

    What an agent with tools and a response format needs: it calls tools until it has what it
    needs, then answers in the schema. Each form is bounded and closed within the budget as
    :func:`tool_call_guidance` and :func:`json_schema_guidance` do.

    Raises:
        InvalidRequestError: as those two functions.
    """
    rules, names, alternatives = _calls(family, tools, max_new_tokens, None, count_tokens, budget_name, "a call to")
    answer = bound_schema(schema, max_new_tokens, budget_name=budget_name)
    rules.append(f"answer: %json {json.dumps(answer)}")
    alternatives.append(Alternative(answer))
    grammar = "start: " + " | ".join([*names, "answer"]) + "\n" + "\n".join(rules)
    shape = Shape(tuple(alternatives), max(reserve(a.schema) for a in alternatives))
    return Guidance(type="lark_grammar", data=grammar, shape=shape)
