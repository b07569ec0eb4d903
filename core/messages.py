"""Framework-neutral chat messages, tool calls and tool definitions.

The adapters translate LangChain / LlamaIndex messages into these; the chat template
renders them with Hugging Face semantics (see :func:`ChatMessage.to_hf`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import InvalidRequestError
from .images import IMAGE_TYPES, image_parts

__all__ = ["ROLES", "ChatMessage", "RawPrompt", "ToolCall", "check_text", "normalize_tools"]

ROLES = ("system", "user", "assistant", "tool")
Role = Literal["system", "user", "assistant", "tool"]


@dataclass
class ToolCall:
    """A tool call made by the model.

    Attributes:
        name: the tool's name.
        arguments: its arguments, parsed.
        id: a call id (made up when the model's format has none).
    """

    name: str
    arguments: dict[str, Any]
    id: str = ""

    def to_hf(self) -> dict[str, Any]:
        """The OpenAI / Hugging Face form used by chat templates."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class ChatMessage:
    """One chat turn.

    Attributes:
        role: ``system``, ``user``, ``assistant`` or ``tool``.
        content: text, or a list of parts ``{"type": "text", "text": ...}`` /
            ``{"type": "image", ...}`` for multimodal templates.
        tool_calls: calls made by an assistant turn.
        tool_call_id: for a ``tool`` turn, the call it answers.
        name: for a ``tool`` turn, the tool's name.
        reasoning: an assistant turn's reasoning (Qwen3 ``reasoning_content``).
    """

    role: Role
    content: str | list[dict[str, Any]] = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    reasoning: str | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise InvalidRequestError(f"message role {self.role!r} is not supported; use one of {', '.join(ROLES)}")
        if not isinstance(self.content, (str, list)):
            raise InvalidRequestError(
                f"message content must be a string or a list of parts, got {type(self.content).__name__}"
            )
        if isinstance(self.content, list):
            for part in self.content:
                if not isinstance(part, dict) or part.get("type") not in ("text", *IMAGE_TYPES):
                    raise InvalidRequestError(
                        f"content part {part!r} is not supported; use {{'type': 'text', 'text': ...}} or an image part"
                    )

    @property
    def text(self) -> str:
        """The text of the message (text parts joined; images left out)."""
        if isinstance(self.content, str):
            return self.content
        return "".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text")

    @property
    def has_images(self) -> bool:
        """Whether any content part is an image."""
        return bool(image_parts(self.content))

    def to_hf(self) -> dict[str, Any]:
        """The dict a Hugging Face chat template expects."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.to_hf() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        if self.reasoning is not None:
            out["reasoning_content"] = self.reasoning
        return out


@dataclass
class RawPrompt:
    """A prompt sent as is, without the chat template: text, or token ids.

    For completion-style callers (``completion_to_prompt``), benchmarks that need exact
    prompt lengths, and prompts rendered elsewhere. The text must carry its own special
    tokens (a BOS, turn headers) if the model needs them.
    """

    text: str | None = None
    token_ids: list[int] | None = None

    def __post_init__(self) -> None:
        if (self.text is None) == (self.token_ids is None):
            raise InvalidRequestError("a RawPrompt takes either text or token_ids, not both and not neither")
        if self.text is not None and not self.text:
            raise InvalidRequestError("the raw prompt is empty; send at least one token")
        if self.token_ids is not None and not self.token_ids:
            raise InvalidRequestError("the raw prompt has no token ids; send at least one token")


def normalize_tools(tools: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    """Check tool definitions and bring them to the OpenAI form chat templates expect.

    Accepts ``{"type": "function", "function": {...}}`` or a bare ``{"name", "description",
    "parameters"}`` function.

    Raises:
        InvalidRequestError: a tool without a name, or with parameters that are not a JSON
            schema object.
    """
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(tools or []):
        if not isinstance(tool, dict):
            raise InvalidRequestError(f"tool #{i} is a {type(tool).__name__}, not a dict with a JSON schema")
        fn = tool.get("function", tool) if tool.get("type", "function") == "function" else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise InvalidRequestError(
                f"tool #{i} has no function name: {json.dumps(tool)[:200]}; give each tool "
                "{'type': 'function', 'function': {'name': ..., 'description': ..., 'parameters': {...}}}"
            )
        params = fn.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict) or params.get("type", "object") != "object":
            raise InvalidRequestError(
                f"tool {fn['name']!r} has parameters {json.dumps(params)[:200]}; they must be a JSON schema "
                "object ({'type': 'object', 'properties': {...}})"
            )
        out.append(
            {
                "type": "function",
                "function": {"name": fn["name"], "description": fn.get("description", ""), "parameters": params},
            }
        )
    return out


_SURROGATE = re.compile("[\ud800-\udfff]")


def _surrogate_error(where: str, text: str, match: re.Match[str]) -> InvalidRequestError:
    return InvalidRequestError(
        f"{where} holds a lone surrogate {match.group()!r} at character {match.start()} "
        f"(...{text[max(0, match.start() - 20) : match.start()]!r}...); it is not valid Unicode and no "
        "tokenizer can encode it. It usually comes from bytes decoded with errors='surrogateescape'; "
        "decode the source with errors='replace', or clean the text with "
        "text.encode('utf-8', 'replace').decode('utf-8')"
    )


def check_text(messages: Sequence[ChatMessage]) -> None:
    """Refuse text that cannot be tokenized, naming the message and the position.

    Raises:
        InvalidRequestError: a lone surrogate (U+D800..U+DFFF) in a message's content,
            reasoning or tool-call arguments.
    """
    for i, message in enumerate(messages):
        fields = [("content", message.text), ("reasoning", message.reasoning or "")]
        fields += [(f"tool call {c.name!r}", json.dumps(c.arguments, ensure_ascii=False)) for c in message.tool_calls]
        for name, text in fields:
            match = _SURROGATE.search(text)
            if match is not None:
                raise _surrogate_error(f"the {name} of message #{i} ({message.role})", text, match)


def check_prompt_text(text: str, where: str = "the prompt") -> None:
    """Refuse a prompt (or any text to tokenize) holding a lone surrogate, naming the position.

    Args:
        text: the text.
        where: which text it is, for the message (``"text 3"``, ``"document 0"``).

    Raises:
        InvalidRequestError: a lone surrogate in ``text``.
    """
    match = _SURROGATE.search(text)
    if match is not None:
        raise _surrogate_error(where, text, match)
