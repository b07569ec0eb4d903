"""Pure translations between LlamaIndex types and ryzenai_core types.

Data flow::

    LlamaIndex ChatMessage (blocks, additional_kwargs) -> core ChatMessage (role, text, tool calls,
        tool call id, reasoning)
    core Chunk stream -> ResponseFold -> LlamaIndex ChatResponse (ThinkingBlock, TextBlock, ToolCallBlock;
        usage and budget in additional_kwargs and raw)
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
from collections.abc import AsyncGenerator, Callable, Generator, Mapping, Sequence
from pathlib import Path
from typing import Any

from llama_index.core.base.llms.types import (
    CachePoint,
    ChatMessage,
    ChatResponse,
    CompletionResponse,
    ImageBlock,
    MessageRole,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)
from llama_index.core.llms.llm import ToolSelection
from llama_index.core.schema import ImageDocument, ImageNode

from ryzenai_core.errors import GenerationError, InvalidRequestError
from ryzenai_core.generation.streaming import Chunk, Completion, warn_if_cut
from ryzenai_core.messages import ChatMessage as CoreMessage
from ryzenai_core.messages import Role, ToolCall
from ryzenai_core.prompt.formats import parse_arguments

__all__: list[str] = []

_ROLES: dict[MessageRole, Role] = {
    MessageRole.SYSTEM: "system",
    MessageRole.DEVELOPER: "system",
    MessageRole.USER: "user",
    MessageRole.ASSISTANT: "assistant",
    MessageRole.CHATBOT: "assistant",
    MessageRole.MODEL: "assistant",
    MessageRole.TOOL: "tool",
    MessageRole.FUNCTION: "tool",
}


def _arguments(value: Any) -> dict[str, Any]:
    """Tool-call arguments as a dict (read by the core's :func:`~ryzenai_core.prompt.formats.parse_arguments`).

    Arguments that are not a JSON object stay in the history as ``{"input": ...}`` (the decoded
    value, or the text when it is not JSON) rather than being dropped.
    """
    args: dict[str, Any] | None = parse_arguments(value)
    if args is not None:
        return args
    if not isinstance(value, str):
        return {}
    try:
        return {"input": json.loads(value)}
    except json.JSONDecodeError:
        return {"input": value}


def _legacy_tool_calls(raw: Any) -> list[ToolCall]:
    """Tool calls from ``additional_kwargs['tool_calls']`` (OpenAI dicts or objects)."""
    out: list[ToolCall] = []
    for item in raw or []:
        fn = item.get("function") if isinstance(item, Mapping) else getattr(item, "function", None)
        call_id = item.get("id") if isinstance(item, Mapping) else getattr(item, "id", None)
        if fn is None:
            continue
        name = fn.get("name") if isinstance(fn, Mapping) else getattr(fn, "name", None)
        args = fn.get("arguments") if isinstance(fn, Mapping) else getattr(fn, "arguments", None)
        if name:
            out.append(ToolCall(name=str(name), arguments=_arguments(args), id=str(call_id or "")))
    return out


def to_core_message(message: ChatMessage) -> CoreMessage:
    """One LlamaIndex message as a core message.

    Text blocks are joined by newlines (as ``ChatMessage.content`` joins them); a
    :class:`ThinkingBlock` becomes the turn's reasoning; tool calls come from
    :class:`ToolCallBlock` s or from ``additional_kwargs['tool_calls']``; a tool turn's call id
    from ``additional_kwargs['tool_call_id']``. With images, the content is a list of parts in
    the blocks' order: each run of text blocks one text part, each image an image part (the
    core says whether the package can see them).

    A :class:`CachePoint` (a provider's prompt-cache marker) is skipped.

    Raises:
        InvalidRequestError: an unknown role, or audio, video or document blocks.
    """
    role = _ROLES.get(MessageRole(message.role))
    if role is None:
        raise InvalidRequestError(f"message role {message.role!r} is not supported")
    texts: list[str] = []
    parts: list[dict[str, Any]] = []
    reasoning: list[str] = []
    calls: list[ToolCall] = []
    for block in message.blocks:
        if isinstance(block, TextBlock):
            texts.append(block.text)
            if parts and parts[-1]["type"] == "text":
                parts[-1]["text"] += "\n" + block.text
            else:
                parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ThinkingBlock):
            if block.content:
                reasoning.append(block.content)
        elif isinstance(block, ToolCallBlock):
            calls.append(
                ToolCall(name=block.tool_name, arguments=_arguments(block.tool_kwargs), id=block.tool_call_id or "")
            )
        elif isinstance(block, ImageBlock):
            parts.append({"type": "image", "image": _image_source(block)})
        elif isinstance(block, CachePoint):
            continue  # a provider's prompt-cache marker; the engine reuses a shared prefix by itself
        else:
            raise InvalidRequestError(
                f"{type(block).__name__} content is not supported by Ryzen AI text models; send text (and tool results)"
            )
    if not calls:
        calls = _legacy_tool_calls(message.additional_kwargs.get("tool_calls"))
    has_image = any(p["type"] == "image" for p in parts)
    kwargs = message.additional_kwargs
    return CoreMessage(
        role=role,
        content=parts if has_image else "\n".join(texts),
        tool_calls=calls if role == "assistant" else [],
        tool_call_id=kwargs.get("tool_call_id") if role == "tool" else None,
        name=kwargs.get("name") if role == "tool" else None,
        reasoning="\n".join(reasoning) if reasoning and role == "assistant" else None,
    )


def to_core_messages(messages: Sequence[ChatMessage]) -> list[CoreMessage]:
    """Every message converted with :func:`to_core_message`."""
    return [to_core_message(m) for m in messages]


def tool_selections(message: ChatMessage) -> list[ToolSelection]:
    """The tool calls of an assistant message as LlamaIndex :class:`ToolSelection` s."""
    return [
        ToolSelection(
            tool_id=block.tool_call_id or "",
            tool_name=block.tool_name,
            tool_kwargs=_arguments(block.tool_kwargs),
        )
        for block in message.blocks
        if isinstance(block, ToolCallBlock)
    ]


class ResponseFold:
    """Folds core chunks into LlamaIndex chat responses: a stream's, one per chunk with news (:meth:`add`).

    Each response holds the whole message so far; a call that is not streamed folds every chunk
    first (:meth:`fold`) and builds one response, from its last chunk (:meth:`response`).
    """

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self.answer = Completion()

    def message(self) -> ChatMessage:
        answer = self.answer
        blocks: list[Any] = []
        if answer.reasoning:
            blocks.append(ThinkingBlock(content=answer.reasoning, additional_information={"format": "think-tags"}))
        blocks.append(TextBlock(text=answer.text))
        blocks.extend(
            ToolCallBlock(tool_call_id=c.id, tool_name=c.name, tool_kwargs=dict(c.arguments)) for c in answer.tool_calls
        )
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=blocks)

    def add(self, chunk: Chunk) -> ChatResponse | None:
        """Fold one chunk; return the response to emit (None when the chunk brought nothing)."""
        self.fold(chunk)
        return self.response(chunk)

    def fold(self, chunk: Chunk) -> None:
        """Fold one chunk into the answer, building no response."""
        self.answer.add(chunk)

    def whole(self, chunks: Generator[Chunk, None, None]) -> ChatResponse:
        """The one response of an answer that is not streamed: every chunk folded, built once from the last."""
        last = None
        with contextlib.closing(chunks):
            for last in chunks:
                self.fold(last)
        return self._final(last)

    async def awhole(self, chunks: AsyncGenerator[Chunk, None]) -> ChatResponse:
        """Async twin of :meth:`whole`."""
        last = None
        async with contextlib.aclosing(chunks):
            async for last in chunks:
                self.fold(last)
        return self._final(last)

    def _final(self, last: Chunk | None) -> ChatResponse:
        response = self.response(last) if last is not None else None
        if response is None:
            raise GenerationError("the model's answer ended without its final chunk")
        return response

    def response(self, chunk: Chunk) -> ChatResponse | None:
        """The response for ``chunk``, the last chunk folded (None when it brought nothing and is not the last)."""
        finish = chunk.finish_reason
        if not (finish is not None or chunk.text or chunk.reasoning or chunk.tool_calls):
            return None
        extra: dict[str, Any] = {}
        raw: dict[str, Any] | None = None
        if chunk.reasoning:
            extra["thinking_delta"] = chunk.reasoning
        if finish is not None:
            usage = chunk.usage.to_dict() if chunk.usage is not None else {}
            plan = chunk.plan.to_dict() if chunk.plan is not None else None
            extra.update(usage)
            extra["finish_reason"] = finish.value  # a plain string, as LlamaIndex's LLMs give
            extra["execution_provider"] = chunk.provider
            extra["adapter"] = chunk.adapter
            extra["budget_plan"] = plan
            if chunk.dropped_messages:
                extra["dropped_messages"] = chunk.dropped_messages
            if chunk.stop_sequence is not None:
                extra["stop_sequence"] = chunk.stop_sequence
            if chunk.cut:
                extra["truncated_fields"] = list(chunk.cut)
                warn_if_cut(chunk, self.model_name, "max_new_tokens")
            raw = {
                "model": self.model_name,
                "execution_provider": chunk.provider,
                "adapter": chunk.adapter,
                "usage": usage,
                "finish_reason": finish.value,
                "stop_sequence": chunk.stop_sequence,
                "budget_plan": plan,
                "dropped_messages": chunk.dropped_messages,
                "timings": chunk.timings.to_dict() if chunk.timings is not None else None,
                "reasoning": self.answer.reasoning or None,
                "truncated_fields": list(chunk.cut),
            }
        return ChatResponse(message=self.message(), delta=chunk.text, raw=raw, additional_kwargs=extra)


def to_completion(response: ChatResponse, text: str | None = None) -> CompletionResponse:
    """A chat response as a completion response (the same usage, budget and raw data).

    Args:
        response: the chat response.
        text: the accumulated text (default: the message's content).
    """
    extra = dict(response.additional_kwargs)
    reasoning = next((b.content for b in response.message.blocks if isinstance(b, ThinkingBlock)), None)
    if reasoning:
        extra.setdefault("thinking", reasoning)
    return CompletionResponse(
        text=(response.message.content or "") if text is None else text,
        delta=response.delta,
        raw=response.raw,
        additional_kwargs=extra,
    )


def _image_source(block: ImageBlock) -> bytes | str:
    """What the core reads for an ImageBlock: its bytes, its path, or its URL (file:, data:).

    A web URL is passed on as is, and the core refuses it: the engine does not fetch
    from the network (LlamaIndex would, from inside the call).
    """
    if block.image is not None:
        data = block.resolve_image(as_base64=False).read()
        return data if isinstance(data, bytes) else bytes(data)
    if block.path is not None:
        return str(block.path)
    return str(block.url) if block.url is not None else ""


def image_blocks(documents: Sequence[Any]) -> list[ImageBlock]:
    """ImageBlocks for ``image_documents`` (LlamaIndex's multimodal ``complete`` argument).

    An :class:`ImageBlock` is kept; an ``ImageNode`` / ``ImageDocument`` gives its ``image``
    (base64 text), else its ``image_path``, else its ``image_url`` (a web URL is refused by the
    core like any other), else ``metadata['file_path']``.

    Raises:
        InvalidRequestError: an item that is neither, a node without an image, or ``image``
            that is not base64 text.
    """
    blocks: list[ImageBlock] = []
    for n, item in enumerate(documents, 1):
        if isinstance(item, ImageBlock):
            blocks.append(item)
        elif isinstance(item, (ImageNode, ImageDocument)):
            if item.image:
                try:
                    data = base64.b64decode(item.image, validate=True)
                except (binascii.Error, ValueError) as exc:
                    raise InvalidRequestError(f"image document {n}: its image is not base64 text ({exc})") from exc
                blocks.append(ImageBlock(image=data, image_mimetype=item.image_mimetype))
            elif item.image_path:
                blocks.append(ImageBlock(path=Path(item.image_path)))
            elif item.image_url:
                blocks.append(ImageBlock(url=item.image_url))
            elif item.metadata.get("file_path"):
                blocks.append(ImageBlock(path=Path(str(item.metadata["file_path"]))))
            else:
                raise InvalidRequestError(f"image document {n} has no image (image, image_path or image_url)")
        else:
            raise InvalidRequestError(
                f"image document {n} is a {type(item).__name__}; pass ImageDocument / ImageNode objects or ImageBlocks"
            )
    return blocks


def tool_spec(tool: Any) -> dict[str, Any]:
    """A tool as an OpenAI function dict (LlamaIndex tools, or dicts as they are)."""
    if isinstance(tool, dict):
        return tool
    metadata = getattr(tool, "metadata", None)
    if metadata is None or not hasattr(metadata, "to_openai_tool"):
        raise InvalidRequestError(
            f"tool {tool!r} is neither a LlamaIndex tool nor an OpenAI function dict; "
            "wrap the function with FunctionTool.from_defaults"
        )
    spec: dict[str, Any] = metadata.to_openai_tool(skip_length_check=True)
    return spec


def completion_messages(
    prompt: str,
    formatted: bool,
    image_documents: Sequence[Any] | None,
    completion_to_prompt: Callable[[str], str] | None,
) -> tuple[list[ChatMessage], str | None]:
    """(messages, raw prompt) for a completion: verbatim text, or one user message.

    Images (``image_documents``) come before the text in that message.

    Raises:
        InvalidRequestError: images with a verbatim prompt (it carries text only).
    """
    images: list[ImageBlock] = image_blocks(image_documents or [])
    if images and (formatted or completion_to_prompt is not None):
        raise InvalidRequestError(
            "image_documents need the chat template: a verbatim prompt (formatted=True or "
            "completion_to_prompt) carries text only; send the images with formatted=False"
        )
    if formatted:
        return [], prompt
    if completion_to_prompt is not None:
        return [], completion_to_prompt(prompt)
    if images:
        return [ChatMessage(role=MessageRole.USER, blocks=[*images, TextBlock(text=prompt)])], None
    return [ChatMessage(role=MessageRole.USER, content=prompt)], None
