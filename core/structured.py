"""Grammars for structured output and forced tool calls (onnxruntime-genai guidance).

A JSON schema alone lets a weak or unlucky model write a string until the token budget
runs out, and JSON cut off there is not an answer. :func:`bound_schema` bounds every
free-form string, array and number from the token budget, so the grammar itself closes
within ``max_new_tokens``; the engine raises a clear error in the rare case it still
does not. :func:`tool_call_guidance` forces a tool call in the model family's own format
(Qwen3 ``<tool_call>`` JSON, Llama 3.2 bare JSON) with arguments that match the tool's
schema.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import InvalidRequestError
from .messages import normalize_tools
from .options import Guidance

__all__ = ["bound_schema", "json_object_guidance", "json_schema_guidance", "tool_call_guidance"]

_MAX_ITEMS = 8
_NUMBER_BOUND = 10**12
_NUMBER_STEP = 0.0001
_NO_WHITESPACE = {"whitespace_flexible": False}


def _slots(schema: Any, defs: Mapping[str, Any], depth: int = 0) -> int:
    """How many free-form strings a value of ``schema`` can hold (arrays multiply)."""
    if not isinstance(schema, dict) or depth > 20:
        return 0
    if "$ref" in schema:
        ref = str(schema["$ref"]).rsplit("/", 1)[-1]
        return _slots(defs.get(ref), defs, depth + 1)
    total = 0
    types = schema.get("type")
    types = types if isinstance(types, list) else [types]
    if "string" in types and not any(k in schema for k in ("enum", "const", "format", "pattern")):
        total += 1
    for key in ("properties",):
        for sub in (schema.get(key) or {}).values():
            total += _slots(sub, defs, depth + 1)
    if isinstance(schema.get("items"), dict):
        total += _MAX_ITEMS * _slots(schema["items"], defs, depth + 1)
    for key in ("anyOf", "oneOf", "allOf"):
        subs = schema.get(key) or []
        if subs:
            total += max(_slots(s, defs, depth + 1) for s in subs)
    return total


def _bound(schema: Any, chars: int) -> None:
    if isinstance(schema, list):
        for s in schema:
            _bound(s, chars)
        return
    if not isinstance(schema, dict):
        return
    types = schema.get("type")
    types = types if isinstance(types, list) else [types]
    if "string" in types and not any(k in schema for k in ("enum", "const", "format", "pattern")):
        schema["maxLength"] = min(int(schema.get("maxLength", chars)), chars)
        schema["minLength"] = min(int(schema.get("minLength", 0)), schema["maxLength"])
    if "object" in types and "properties" in schema:
        schema.setdefault("additionalProperties", False)
    if "array" in types:
        schema["maxItems"] = min(int(schema.get("maxItems", _MAX_ITEMS)), _MAX_ITEMS)
        schema["minItems"] = min(int(schema.get("minItems", 0)), schema["maxItems"])
    if "integer" in types or "number" in types:
        schema.setdefault("minimum", -_NUMBER_BOUND)
        schema.setdefault("maximum", _NUMBER_BOUND)
    if "number" in types and "integer" not in types:
        schema.setdefault("multipleOf", _NUMBER_STEP)  # bounds the digits after the point
    for value in schema.values():
        if isinstance(value, (dict, list)):
            _bound(value, chars)


def bound_schema(schema: Mapping[str, Any], max_new_tokens: int) -> dict[str, Any]:
    """A copy of ``schema`` whose every value fits in about ``max_new_tokens`` tokens.

    Free-form strings get a ``maxLength`` shared out of the budget (a sixth of a token per
    character: escapes and multi-byte text can take several tokens a character), arrays at
    most 8 items, numbers at most 13 digits before the point and 4 after, objects no extra keys, and
    no free whitespace. Existing tighter bounds are kept.

    Raises:
        InvalidRequestError: the schema is not a JSON object schema, or the budget is too small.
    """
    if not isinstance(schema, Mapping):
        raise InvalidRequestError(f"a JSON schema must be a dict, got {type(schema).__name__}")
    out = copy.deepcopy(dict(schema))
    defs = {**(out.get("$defs") or {}), **(out.get("definitions") or {})}
    slots = _slots(out, defs)
    skeleton = len(json.dumps(out.get("properties", {})).split('"')) // 2  # rough: one token per key
    room = max_new_tokens - skeleton
    if slots and room < 4 * slots:
        raise InvalidRequestError(
            f"max_tokens={max_new_tokens} is too small for this schema ({slots} free-form strings and "
            f"about {skeleton} tokens of structure); raise max_tokens to at least {skeleton + 4 * slots}"
        )
    chars = max(1, room // (6 * slots)) if slots else 1
    _bound(out, chars)
    out["x-guidance"] = {**_NO_WHITESPACE, **(out.get("x-guidance") or {})}
    return out


def json_schema_guidance(schema: Mapping[str, Any], max_new_tokens: int) -> Guidance:
    """Guidance for output that is one JSON value matching ``schema``, closed within the budget."""
    return Guidance(type="json_schema", data=json.dumps(bound_schema(schema, max_new_tokens)))


def json_object_guidance(max_new_tokens: int) -> Guidance:
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
            f"max_tokens={max_new_tokens} is too small for JSON mode; raise max_tokens to at least 16"
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


def _lark_string(text: str) -> str:
    return json.dumps(text)


def tool_call_guidance(
    family: str,
    tools: Sequence[Mapping[str, Any]],
    max_new_tokens: int,
    name: str | None = None,
) -> Guidance:
    """Guidance that forces one call to ``name`` (or to any of ``tools``) in the family's format.

    Args:
        family: the chat template family (``qwen3``, ``chatml``, ``llama3``).
        tools: tool definitions (OpenAI function form).
        max_new_tokens: the output budget the arguments must fit.
        name: the tool to call; None lets the model choose among all of them.

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
    if family in ("qwen3", "chatml"):
        head, args_key, tail = "<tool_call>\n", "arguments", "}\n</tool_call>"
    elif family == "llama3":
        head, args_key, tail = "", "parameters", "}"
    else:
        raise InvalidRequestError(
            f"the {family!r} chat template has no tool-call format; use a Llama 3.2 or Qwen3 package for tools"
        )
    rules = []
    alternatives = []
    for i, tool in enumerate(normalized):
        fn = tool["function"]
        prefix = head + "{" + f'"name": {json.dumps(fn["name"])}, "{args_key}": '
        # The call's own text comes first: about one token per two characters (its markers and
        # keys are common tokens); the engine still fails clearly if a call overruns.
        wrapper = (len(prefix) + len(tail) + 1) // 2
        budget = max_new_tokens - wrapper
        try:
            if budget < 4:
                raise InvalidRequestError("no room")
            params = bound_schema(fn["parameters"] or {"type": "object", "properties": {}}, budget)
        except InvalidRequestError:
            need = wrapper + max(16, 4 * _slots(fn["parameters"] or {}, {}) + 8)
            raise InvalidRequestError(
                f"max_tokens={max_new_tokens} is too small for a forced call to {fn['name']!r}: the call's own "
                f"text takes up to {wrapper} tokens before its arguments; raise max_tokens to at least {need}"
            ) from None
        rules.append(f"call{i}: {_lark_string(prefix)} args{i} {_lark_string(tail)}")
        rules.append(f"args{i}: %json {json.dumps(params)}")
        alternatives.append(f"call{i}")
    grammar = "start: " + " | ".join(alternatives) + "\n" + "\n".join(rules)
    return Guidance(type="lark_grammar", data=grammar)
