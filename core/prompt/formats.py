"""The output formats of the chat template families: how a model ends a turn, thinks and calls tools.

A chat template (:mod:`ryzenai_core.prompt.templates`) writes the prompt; this module knows what
the model writes back in each family's format:

- ``llama3``: turns end with ``<|eot_id|>``; a tool call is the whole answer as JSON
  ``{"name": ..., "parameters": {...}}`` (optionally after ``<|python_tag|>``);
- ``qwen3``: ``<|im_end|>``; reasoning in ``<think>...</think>``; calls in
  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks;
- ``chatml``: as Qwen3, without reasoning;
- ``gemma3``: ``<end_of_turn>``; no tool-call format;
- ``plain``: a format this module does not know (a model type and template it cannot tell):
  turns end at the tokenizer's end-of-sequence tokens, no reasoning split, no tool calls: the
  answer is plain text.

The streaming parser (:class:`ryzenai_core.generation.streaming.OutputParser`) uses the markers; the
forced-call grammar (:func:`ryzenai_core.prompt.structured.tool_call_guidance`) writes
:func:`call_framing`; :func:`parse_tool_calls` reads the calls back, and
:func:`parse_arguments` is the one reading of a call's arguments.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from typing import Any, Literal

from ..errors import InvalidRequestError
from ..messages import ToolCall

__all__ = [
    "FAMILIES",
    "Family",
    "call_framing",
    "check_family",
    "end_of_turn_markers",
    "family_for_model_type",
    "has_tool_calls",
    "infer_family",
    "parse_arguments",
    "parse_tool_calls",
    "reasoning_markers",
    "tool_call_markers",
]

Family = Literal["llama3", "qwen3", "gemma3", "chatml", "plain"]
#: The prompt/output formats (``plain``: none of the others, the answer read as plain text).
FAMILIES: tuple[Family, ...] = ("llama3", "qwen3", "gemma3", "chatml", "plain")

_MODEL_TYPE_FAMILY: Mapping[str, Family] = {
    "llama": "llama3",
    "qwen3": "qwen3",
    "qwen3_moe": "qwen3",
    "gemma": "gemma3",
    "gemma2": "gemma3",
    "gemma3": "gemma3",
    "gemma3_text": "gemma3",
}

_END_OF_TURN: Mapping[Family, tuple[str, ...]] = {
    "llama3": ("<|eot_id|>", "<|eom_id|>"),
    "qwen3": ("<|im_end|>",),
    "gemma3": ("<end_of_turn>",),
    "chatml": ("<|im_end|>",),
    "plain": (),
}

_TOOL_CALL_TAGS = ("<tool_call>", "</tool_call>")
_THINK_TAGS = ("<think>", "</think>")
_PYTHON_TAG = "<|python_tag|>"


# ---------------------------------------------------------------------- families
def family_for_model_type(model_type: str) -> Family | None:
    """The template family of a ``genai_config.json`` ``model.type``, or None for a type not known here.

    Args:
        model_type: e.g. ``llama``, ``qwen3``, ``gemma3_text``, ``qwen2``, ``phi3``.
    """
    return _MODEL_TYPE_FAMILY.get(model_type)


def infer_family(source: str) -> Family | None:
    """Guess the family of a template from the control tokens it writes.

    Args:
        source: the Jinja source.

    Returns:
        ``llama3`` (``<|start_header_id|>``), ``gemma3`` (``<start_of_turn>``), ``qwen3``
        (ChatML with ``<think>`` or ``enable_thinking``), ``chatml`` (``<|im_start|>``), or
        ``None`` when none of these appear.
    """
    if "<|start_header_id|>" in source or "<|eot_id|>" in source:
        return "llama3"
    if "<start_of_turn>" in source:
        return "gemma3"
    if "<|im_start|>" in source:
        return "qwen3" if ("<think>" in source or "enable_thinking" in source) else "chatml"
    return None


def check_family(family: str) -> Family:
    """``family`` if it is one of :data:`FAMILIES`.

    Raises:
        InvalidRequestError: an unknown family.
    """
    if family not in FAMILIES:
        raise InvalidRequestError(f"template family {family!r} is not known; use one of {', '.join(FAMILIES)}")
    return family


def end_of_turn_markers(family: str) -> list[str]:
    """The strings that end an assistant turn in ``family``'s format.

    Args:
        family: one of :data:`FAMILIES`.
    """
    return list(_END_OF_TURN[check_family(family)])


def tool_call_markers(family: str) -> tuple[str, str] | None:
    """The tags around one tool call, or ``None`` when the family has none.

    Llama 3 writes a whole message of JSON (see :func:`parse_tool_calls`) and Gemma 3 has no
    tool-call format, so both give ``None``.

    Args:
        family: one of :data:`FAMILIES`.
    """
    return _TOOL_CALL_TAGS if check_family(family) in ("qwen3", "chatml") else None


def reasoning_markers(family: str) -> tuple[str, str] | None:
    """The tags around the model's reasoning (``<think>``/``</think>`` for Qwen3), else ``None``.

    Args:
        family: one of :data:`FAMILIES`.
    """
    return _THINK_TAGS if check_family(family) == "qwen3" else None


def has_tool_calls(family: str) -> bool:
    """Whether ``family`` has a tool-call format (calls can be parsed and forced)."""
    return check_family(family) in ("llama3", "qwen3", "chatml")


def call_framing(family: str) -> tuple[str, str, str]:
    """``(head, arguments key, tail)`` of one forced call in ``family``'s format.

    The call is ``head + '{"name": "<tool>", "<arguments key>": ' + arguments + tail``.

    Raises:
        InvalidRequestError: a family without a tool-call format.
    """
    fam = check_family(family)
    if fam in ("qwen3", "chatml"):
        return "<tool_call>\n", "arguments", "}\n</tool_call>"
    if fam == "llama3":
        return "", "parameters", "}"
    raise InvalidRequestError(
        f"the {family!r} chat template has no tool-call format; use a Llama 3.2 or Qwen3 package for tools"
    )


def parse_arguments(value: Any) -> dict[str, Any] | None:
    """A tool call's arguments as a dict: a dict as it is, JSON text decoded, nothing as ``{}``.

    Returns None when the arguments are not a JSON object (invalid JSON, a list, a number): the
    caller keeps such a call as text (model output) or leaves it out (a framework's history).
    """
    if value is None:
        return {}
    if isinstance(value, str):
        if not value.strip():
            return {}
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    return dict(value) if isinstance(value, Mapping) else None


def _call_id(index: int, name: str, arguments: Mapping[str, Any]) -> str:
    key = json.dumps([index, name, arguments], sort_keys=True, ensure_ascii=False, default=str)
    return "call_" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]


def _to_call(
    obj: Any, index: int, *, arg_keys: tuple[str, ...], require_args: bool, tool_names: Collection[str] | None
) -> ToolCall | None:
    """A ToolCall from a decoded ``{"name": ..., "arguments": {...}}`` object, or None."""
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict):  # OpenAI-style {"type": "function", "function": {...}}
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return None
    if tool_names is not None and name not in tool_names:
        return None
    key = next((k for k in arg_keys if k in obj), None)
    if key is None:
        if require_args:
            return None
        args: Any = {}
    else:
        args = obj[key]
    args = parse_arguments(args)
    if args is None:
        return None
    return ToolCall(name=name, arguments=args, id=_call_id(index, name, args))


def _parse_tagged(text: str, tool_names: Collection[str] | None) -> tuple[str, list[ToolCall]]:
    """Calls in ``<tool_call>`` blocks, each read by its JSON: a closing tag inside an argument is the argument's."""
    open_tag, close_tag = _TOOL_CALL_TAGS
    decoder = json.JSONDecoder()
    calls: list[ToolCall] = []
    kept: list[str] = []
    pos = 0
    while (start := text.find(open_tag, pos)) >= 0:
        body = start + len(open_tag)
        call, end = None, -1
        try:
            obj, after = decoder.raw_decode(text, _skip_space(text, body))
        except json.JSONDecodeError:
            obj = after = None
        if after is not None:
            after = _skip_space(text, after)
            if text.startswith(close_tag, after):
                end = after + len(close_tag)
            elif after == len(text):
                end = after  # a last block cut off before its closing tag
        if end >= 0:
            call = _to_call(
                obj, len(calls), arg_keys=("arguments", "parameters"), require_args=False, tool_names=tool_names
            )
        if call is None:  # not a call: the block stays in the content as the model wrote it
            close = text.find(close_tag, body)
            end = len(text) if close < 0 else close + len(close_tag)
            kept.append(text[pos:end])
        else:
            kept.append(text[pos:start])
            calls.append(call)
        pos = end
    if not calls:
        return text, []
    kept.append(text[pos:])
    return "".join(kept).strip(), calls


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _parse_llama3(text: str, tool_names: Collection[str] | None) -> tuple[str, list[ToolCall]]:
    body = text.strip()
    if body.startswith(_PYTHON_TAG):
        body = body[len(_PYTHON_TAG) :]
    for end in _END_OF_TURN["llama3"]:
        body = body.removesuffix(end)
    decoder = json.JSONDecoder()
    calls: list[ToolCall] = []
    pos = 0
    while True:
        while pos < len(body) and (body[pos].isspace() or body[pos] == ";"):
            pos += 1
        if pos >= len(body):
            break
        try:
            obj, pos = decoder.raw_decode(body, pos)
        except json.JSONDecodeError:
            return text, []
        for item in obj if isinstance(obj, list) else [obj]:
            call = _to_call(
                item, len(calls), arg_keys=("parameters", "arguments"), require_args=True, tool_names=tool_names
            )
            if call is None:
                return text, []
            calls.append(call)
    if not calls:
        return text, []
    return "", calls


def parse_tool_calls(
    text: str, family: str, *, tool_names: Collection[str] | None = None
) -> tuple[str, list[ToolCall]]:
    """Find the tool calls in a model's answer, in the format of its family.

    * ``qwen3``/``chatml``: one or more ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
      blocks, each read by its JSON (a ``</tool_call>`` inside an argument is part of the
      argument; a last block cut off before ``</tool_call>`` is accepted); the text around them
      is the content. A block that is not valid JSON stays in the content, where it was.
    * ``llama3``: the whole answer (optionally after ``<|python_tag|>``) is a JSON object
      ``{"name": ..., "parameters": {...}}`` (or ``"arguments"``), or several separated by ``;``
      or newlines, or a JSON list of them. Anything else is plain content without calls.
    * ``gemma3``, ``plain``: no tool-call format; the text is content.

    Arguments given as a JSON string are decoded. Each call gets a deterministic id
    ``call_<12 hex>`` from its index, name and arguments.

    Args:
        text: the model's answer (reasoning already removed).
        family: one of :data:`FAMILIES`.
        tool_names: when given, only calls to these tools count (useful for Llama 3, whose
            format is plain JSON and could be an ordinary JSON answer).

    Returns:
        ``(content, calls)``. Without calls, ``content`` is ``text`` unchanged; with calls it is
        the remaining text, stripped.
    """
    fam = check_family(family)
    if fam == "llama3":
        return _parse_llama3(text, tool_names)
    if fam in ("qwen3", "chatml"):
        return _parse_tagged(text, tool_names)
    return text, []
