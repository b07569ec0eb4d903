"""LangChain messages and chunks to and from the core's: the LangChain face's mapping."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages import ChatMessage as LCChatMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGenerationChunk

from ryzenai_core.errors import InvalidRequestError
from ryzenai_core.generation.streaming import Chunk, warn_if_cut
from ryzenai_core.messages import ChatMessage, Role, ToolCall
from ryzenai_core.prompt.formats import parse_arguments

__all__ = ["PROVIDER", "generation_chunk", "to_core_messages"]

PROVIDER = "ryzenai"

_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
#: The roles a LangChain ChatMessage may have -> the core's.
_CHAT_ROLES: dict[str, Role] = {
    "system": "system",
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "ai": "assistant",
}
_UNSUPPORTED_BLOCKS = frozenset(
    {"audio", "input_audio", "file", "input_file", "video", "document", "text-plain", "image_file", "media"}
)
_IMAGE_BLOCKS = frozenset({"image", "image_url"})
_TEXT_BLOCKS = frozenset({"text", "input_text"})  # input_text: OpenAI's Responses API
_REASONING_BLOCKS = {"reasoning": "reasoning", "thinking": "thinking"}
_TOOL_CALL_BLOCKS = frozenset({"tool_use", "tool_call", "function_call", "tool_call_chunk"})
# Assistant blocks with nothing a local template can render (redacted or another provider's server-side tools).
_SKIPPED_ASSISTANT_BLOCKS = frozenset(
    {"redacted_thinking", "invalid_tool_call", "server_tool_call", "server_tool_call_chunk", "server_tool_result"}
)


def _blocks(
    content: str | list[str | dict[str, Any]], role: str
) -> tuple[str | list[dict[str, Any]], str, list[ToolCall]]:
    """LangChain content to core content: ``(text or parts, reasoning, tool calls from blocks)``.

    Without images, the text blocks are joined into one string (templates expect string
    content). With images, the content is a list of parts in the user's order: each run of
    text blocks joined into one text part, each image block a core image part (the core reads
    every image form and says whether the package can see them). Reasoning and tool-call
    blocks of assistant turns are split out.

    Raises:
        InvalidRequestError: a content block this library cannot send to a text model.
    """
    if isinstance(content, str):
        return content, "", []
    parts: list[dict[str, Any]] = []
    reasoning: list[str] = []
    calls: list[ToolCall] = []

    def add_text(text: str) -> None:
        if parts and parts[-1]["type"] == "text":
            parts[-1]["text"] += text
        else:
            parts.append({"type": "text", "text": text})

    for block in content:
        if isinstance(block, str):
            add_text(block)
            continue
        if not isinstance(block, dict):
            raise InvalidRequestError(f"content block {block!r} of a {role} message is neither a string nor a dict")
        kind = block.get("type")
        image = _image_block(block)
        if kind in _TEXT_BLOCKS:
            add_text(str(block.get("text", "")))
        elif image is not None:
            parts.append(image)
        elif kind in _REASONING_BLOCKS and role == "assistant":
            text = block.get(_REASONING_BLOCKS[kind])
            if isinstance(text, str):
                reasoning.append(text)
        elif kind in _SKIPPED_ASSISTANT_BLOCKS and role == "assistant":
            continue
        elif kind in _TOOL_CALL_BLOCKS and role == "assistant":
            name = block.get("name")
            args = parse_arguments(block.get("input", block.get("args", block.get("arguments"))))
            if isinstance(name, str) and args is not None:
                calls.append(ToolCall(name=name, arguments=args, id=str(block.get("id") or "")))
        else:
            what = "audio, video, files and documents" if kind in _UNSUPPORTED_BLOCKS else f"{kind!r} blocks"
            raise InvalidRequestError(
                f"a {role} message has a content block of type {kind!r}; ChatRyzenAI sends text (and images "
                f"to packages with a vision model), not {what}. Send the content as text."
            )
    if any(p["type"] != "text" for p in parts):
        return [p for p in parts if p["type"] != "text" or p["text"]], "\n".join(reasoning), calls
    return "".join(p["text"] for p in parts), "\n".join(reasoning), calls


def _image_block(block: dict[str, Any]) -> dict[str, Any] | None:
    """A content block as a core image part, or None when it holds no image.

    LangChain's own forms and OpenAI's ``image_url`` pass as they are (the core reads each);
    OpenAI Responses' ``input_image`` and Google's ``media`` blocks of an ``image/*`` type are
    renamed to the core's form.
    """
    kind = block.get("type")
    if kind in _IMAGE_BLOCKS:
        return {**block, "type": kind}
    if kind == "input_image":
        url = block.get("image_url")
        return {"type": "image", "url": url} if url is not None else {**block, "type": "image"}
    if kind == "media" and str(block.get("mime_type", "")).startswith("image/"):
        return {**block, "type": "image"}
    return None


def to_core_messages(messages: Sequence[BaseMessage]) -> list[ChatMessage]:
    """LangChain messages to core messages (system, user, assistant with tool calls, tool results).

    Raises:
        InvalidRequestError: a message type or role the chat templates cannot render.
    """
    out: list[ChatMessage] = []
    call_names: dict[str, str] = {}
    for i, message in enumerate(messages):
        if isinstance(message, SystemMessage):
            content, _, _ = _blocks(message.content, "system")
            out.append(ChatMessage("system", content))
        elif isinstance(message, HumanMessage):
            content, _, _ = _blocks(message.content, "user")
            out.append(ChatMessage("user", content))
        elif isinstance(message, AIMessage):
            content, reasoning, block_calls = _blocks(message.content, "assistant")
            kw_reasoning = message.additional_kwargs.get("reasoning_content")
            if isinstance(kw_reasoning, str):
                reasoning = kw_reasoning
            calls = [
                ToolCall(name=c["name"], arguments=dict(c["args"]), id=c.get("id") or "") for c in message.tool_calls
            ]
            calls = calls or block_calls
            call_names.update({c.id: c.name for c in calls if c.id})
            out.append(ChatMessage("assistant", content, tool_calls=calls, reasoning=reasoning or None))
        elif isinstance(message, ToolMessage):
            content, _, _ = _blocks(message.content, "tool")
            if not isinstance(content, str):
                raise InvalidRequestError(
                    f"tool result {message.tool_call_id!r} holds images; ChatRyzenAI sends tool results as text"
                )
            name = message.name or call_names.get(message.tool_call_id)
            out.append(ChatMessage("tool", content, tool_call_id=message.tool_call_id, name=name))
        elif isinstance(message, LCChatMessage):
            role = _CHAT_ROLES.get(message.role)
            if role is None:
                raise InvalidRequestError(
                    f"message #{i} has role {message.role!r}; ChatRyzenAI renders system, user (human), "
                    "assistant (ai) and tool messages (use ToolMessage for tool results)"
                )
            content, _, _ = _blocks(message.content, role)
            out.append(ChatMessage(role, content))
        else:
            raise InvalidRequestError(
                f"message #{i} is a {type(message).__name__}, which ChatRyzenAI cannot render; use SystemMessage, "
                "HumanMessage, AIMessage (with tool_calls) or ToolMessage"
            )
    return out


def _usage(chunk: Chunk) -> UsageMetadata | None:
    if chunk.usage is None:
        return None
    reused = chunk.timings.reused_prompt_tokens if chunk.timings is not None else 0
    return UsageMetadata(
        input_tokens=chunk.usage.prompt_tokens,
        output_tokens=chunk.usage.completion_tokens,
        total_tokens=chunk.usage.total_tokens,
        input_token_details={"cache_read": reused},
    )


def _response_metadata(chunk: Chunk, model_name: str) -> dict[str, Any]:
    """What the last chunk reports: why it ended, which package and provider, timings and the budget plan."""
    finish = _finish_reason(chunk)
    meta: dict[str, Any] = {
        "model_name": model_name,
        "model_provider": PROVIDER,
        "execution_provider": chunk.provider,
        "adapter": chunk.adapter,
        "finish_reason": finish,
        "stop_reason": None if finish is None else _STOP_REASONS.get(finish, finish),
    }
    if chunk.stop_sequence is not None:
        meta["stop_reason"], meta["stop_sequence"] = "stop_sequence", chunk.stop_sequence
    if chunk.timings is not None:
        meta["timings"] = chunk.timings.to_dict()
    if chunk.plan is not None:
        meta["budget_plan"] = chunk.plan.to_dict()
    meta["dropped_messages"] = chunk.dropped_messages
    if chunk.cut:
        meta["truncated_fields"] = list(chunk.cut)
        warn_if_cut(chunk, model_name, "max_tokens")
    return meta


def generation_chunk(chunk: Chunk, model_name: str) -> ChatGenerationChunk:
    """A core chunk as a LangChain chunk (the last one carries calls, usage and metadata)."""
    additional: dict[str, Any] = {"reasoning_content": chunk.reasoning} if chunk.reasoning else {}
    if chunk.finish_reason is None:
        message = AIMessageChunk(
            content=chunk.text, additional_kwargs=additional, response_metadata={"model_provider": PROVIDER}
        )
        return ChatGenerationChunk(message=message)
    meta = _response_metadata(chunk, model_name)
    message = AIMessageChunk(
        content=chunk.text,
        additional_kwargs=additional,
        tool_call_chunks=[
            tool_call_chunk(name=c.name, args=json.dumps(c.arguments, ensure_ascii=False), id=c.id or None, index=i)
            for i, c in enumerate(chunk.tool_calls)
        ],
        usage_metadata=_usage(chunk),
        response_metadata=meta,
        chunk_position="last",
    )
    return ChatGenerationChunk(message=message, generation_info={"finish_reason": _finish_reason(chunk)})


def _finish_reason(chunk: Chunk) -> str | None:
    """The finish reason as LangChain's metadata holds it: a plain string (``"stop"``, ``"length"``, ...)."""
    return None if chunk.finish_reason is None else chunk.finish_reason.value
