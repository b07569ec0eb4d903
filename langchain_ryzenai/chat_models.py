"""LangChain chat model on Ryzen AI model packages: :class:`ChatRyzenAI`.

Data flow of one call (``invoke``, ``stream``, ``batch`` and their async twins)::

    LangChain messages ──► _to_core_messages() ──► ryzenai_core ChatMessage list
    fields + per-call kwargs ──► ChatRyzenAI._prepare() ──► _Call(engine, GenerationOptions)
        tools (bind_tools)          -> options.tools, rendered by the package's chat template
        tool_choice any/name        -> options.guidance = tool_call_guidance(...)
        response_format json_schema -> options.guidance = json_schema_guidance(schema, budget)
    Engine.stream / Engine.astream (worker process by default) ──► core Chunk
        ──► _generation_chunk() ──► ChatGenerationChunk(AIMessageChunk)
              text      -> content
              reasoning -> additional_kwargs["reasoning_content"] (a reasoning content block)
              last      -> tool_call_chunks, usage_metadata, response_metadata, chunk_position="last"

``_generate`` / ``_agenerate`` are aggregates of ``_stream`` / ``_astream``: there is one
code path. Everything about OGA, templates, budgets and tokens stays in ``ryzenai_core``.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Literal

import pydantic
import pydantic.v1
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.exceptions import OutputParserException
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.base import LangSmithParams
from langchain_core.language_models.chat_models import agenerate_from_stream, generate_from_stream
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages import ChatMessage as LCChatMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.output_parsers import (
    JsonOutputKeyToolsParser,
    PydanticToolsParser,
)
from langchain_core.output_parsers.transform import BaseCumulativeTransformOutputParser
from langchain_core.outputs import ChatGenerationChunk, ChatResult, Generation
from langchain_core.runnables import Runnable, RunnableMap, RunnablePassthrough
from langchain_core.runnables.config import run_in_executor
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_json_schema, convert_to_openai_tool
from langchain_core.utils.json import parse_partial_json
from langchain_core.utils.pydantic import is_basemodel_subclass
from pydantic import AliasChoices, ConfigDict, Field, SecretStr, field_validator

from ryzenai_core import (
    ChatMessage,
    ChatTemplate,
    Chunk,
    Engine,
    GenerationError,
    InvalidRequestError,
    ToolCall,
    WorkerDiedError,
)
from ryzenai_core.options import GenerationOptions, validated_options
from ryzenai_core.session import check_runtime_settings
from ryzenai_core.structured import json_object_guidance, json_schema_guidance, tool_call_guidance

__all__ = ["ChatRyzenAI"]

logger = logging.getLogger(__name__)

PROVIDER = "ryzenai"

#: Keyword arguments a call accepts (``invoke(..., **kwargs)``, ``bind(**kwargs)``).
CALL_KWARGS = frozenset(
    {
        "chat_template",
        "enable_thinking",
        "guidance",
        "kv_reuse",
        "max_tokens",
        "model",
        "model_kwargs",
        "model_name",
        "overflow",
        "reasoning",
        "repetition_penalty",
        "response_format",
        "seed",
        "temperature",
        "timeout",
        "tool_choice",
        "tools",
        "top_k",
        "top_p",
    }
)

#: Other names of per-call options, as other runtimes and providers spell them (accepted in ``model_kwargs``).
_OPTION_ALIASES = {
    "max_new_tokens": "max_tokens",
    "max_completion_tokens": "max_tokens",
    "max_output_tokens": "max_tokens",
    "random_seed": "seed",
    "stop_sequences": "stop",
    "reasoning": "enable_thinking",
    "model_name": "model",
}

_BEAM_SEARCH = "beam search is not supported (decoding is greedy or sampled); leave it out"
#: Generation options of other runtimes and providers that ChatRyzenAI does not have, and what to use instead.
_UNSUPPORTED_OPTIONS = {
    "max_length": (
        "onnxruntime-genai's max_length counts prompt + new tokens and ChatRyzenAI sets it from the package's "
        "budget; use max_tokens (new tokens)"
    ),
    "min_length": "a minimum answer length is not supported; leave it out",
    "min_new_tokens": "a minimum answer length is not supported; leave it out",
    "do_sample": "use temperature=0 for greedy decoding, a positive temperature to sample",
    "num_beams": _BEAM_SEARCH,
    "length_penalty": _BEAM_SEARCH,
    "early_stopping": _BEAM_SEARCH,
    "diversity_penalty": _BEAM_SEARCH,
    "num_return_sequences": "a call returns one answer; use batch() for several",
    "n": "a call returns one answer; use batch() for several",
    "presence_penalty": "use repetition_penalty",
    "frequency_penalty": "use repetition_penalty",
    "no_repeat_ngram_size": "use repetition_penalty",
    "min_p": "use top_p or top_k",
    "typical_p": "use top_p or top_k",
    "num_predict": "use max_tokens",
    "num_ctx": "the context window is the package's (response_metadata['budget_plan']['window'])",
    "logprobs": "token log-probabilities are not reported",
    "top_logprobs": "token log-probabilities are not reported",
    "logit_bias": "constrain the output with response_format or with_structured_output",
}
#: Names the chat template gets from ChatRyzenAI itself, which a template variable cannot replace.
_RESERVED_TEMPLATE_VARS = {
    "messages": "the conversation itself; pass the messages to invoke()",
    "add_generation_prompt": "set by ChatRyzenAI (True: the prompt opens the answer)",
}

#: Options a call takes by keyword or inside ``model_kwargs``, each with every keyword that names it.
_CALL_OPTIONS: dict[str, tuple[str, ...]] = {
    **{name: (name,) for name in CALL_KWARGS - {"model_kwargs", "reasoning", "model_name"}},
    "enable_thinking": ("enable_thinking", "reasoning"),
    "model": ("model", "model_name"),
    "stop": ("stop",),
}

_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
_UNSUPPORTED_BLOCKS = frozenset({"audio", "input_audio", "file", "video", "document", "text-plain", "image_file"})
_IMAGE_BLOCKS = frozenset({"image", "image_url"})
_REASONING_BLOCKS = {"reasoning": "reasoning", "thinking": "thinking"}
_TOOL_CALL_BLOCKS = frozenset({"tool_use", "tool_call", "function_call", "tool_call_chunk"})
# Assistant blocks with nothing a local template can render (redacted or another provider's server-side tools).
_SKIPPED_ASSISTANT_BLOCKS = frozenset(
    {"redacted_thinking", "invalid_tool_call", "server_tool_call", "server_tool_call_chunk", "server_tool_result"}
)

ToolChoice = str | bool | dict[str, Any] | None


# ---------------------------------------------------------------------- pure helpers
def _model_name(model: Any) -> str:
    """The model as the caller named it: a path as given, a repository id, an embedded model's name."""
    return os.fspath(model) if isinstance(model, os.PathLike) else str(model)


def _close_match(name: str, names: Iterable[str]) -> str | None:
    """The name among ``names`` that ``name`` is most likely a misspelling of, if any."""
    match = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.75)
    return match[0] if match else None


def _generation_option(key: str, value: Any) -> str:
    """The per-call option a ``model_kwargs`` key names (after ``_OPTION_ALIASES``), or ``""``.

    Raises:
        InvalidRequestError: a generation option ChatRyzenAI does not have, or a name the template
            gets from ChatRyzenAI itself.
    """
    if key in _UNSUPPORTED_OPTIONS:
        raise InvalidRequestError(
            f"model_kwargs[{key!r}]={value!r} is a generation option ChatRyzenAI does not have: "
            f"{_UNSUPPORTED_OPTIONS[key]}"
        )
    if key in _RESERVED_TEMPLATE_VARS:
        raise InvalidRequestError(
            f"model_kwargs[{key!r}] cannot be a chat-template variable: it is {_RESERVED_TEMPLATE_VARS[key]}"
        )
    name = _OPTION_ALIASES.get(key, key)
    return name if name in _CALL_OPTIONS else ""


def _given_twice(name: str, first: str, first_value: Any, key: str, value: Any) -> InvalidRequestError:
    return InvalidRequestError(
        f"{name} is given twice: {first}={first_value!r} and model_kwargs[{key!r}]={value!r}; give it once "
        f"(model_kwargs carries generation options as well as chat-template variables)"
    )


def _blocks(
    content: str | list[str | dict[str, Any]], role: str
) -> tuple[str | list[dict[str, Any]], str, list[ToolCall]]:
    """LangChain content to core content: ``(text or parts, reasoning, tool calls from blocks)``.

    Text blocks are joined into one string (templates expect string content); image blocks
    become core image parts (the core says whether the package can see them); reasoning and
    tool-call blocks of assistant turns are split out.

    Raises:
        InvalidRequestError: a content block this library cannot send to a text model.
    """
    if isinstance(content, str):
        return content, "", []
    texts: list[str] = []
    images: list[dict[str, Any]] = []
    reasoning: list[str] = []
    calls: list[ToolCall] = []
    for block in content:
        if isinstance(block, str):
            texts.append(block)
            continue
        if not isinstance(block, dict):
            raise InvalidRequestError(f"content block {block!r} of a {role} message is neither a string nor a dict")
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind in _IMAGE_BLOCKS:
            images.append({**block, "type": kind})
        elif kind in _REASONING_BLOCKS and role == "assistant":
            text = block.get(_REASONING_BLOCKS[kind])
            if isinstance(text, str):
                reasoning.append(text)
        elif kind in _SKIPPED_ASSISTANT_BLOCKS and role == "assistant":
            continue
        elif kind in _TOOL_CALL_BLOCKS and role == "assistant":
            name = block.get("name")
            args = block.get("input", block.get("args", block.get("arguments", {})))
            if isinstance(args, str):
                try:
                    args = json.loads(args) if args.strip() else {}
                except json.JSONDecodeError:
                    args = None
            if isinstance(name, str) and isinstance(args, dict):
                calls.append(ToolCall(name=name, arguments=args, id=str(block.get("id") or "")))
        else:
            what = "audio, video, files and documents" if kind in _UNSUPPORTED_BLOCKS else f"{kind!r} blocks"
            raise InvalidRequestError(
                f"a {role} message has a content block of type {kind!r}; ChatRyzenAI sends text (and images "
                f"to packages with a vision model), not {what}. Send the content as text."
            )
    text = "".join(texts)
    if images:
        parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        return parts + images, "\n".join(reasoning), calls
    return text, "\n".join(reasoning), calls


def _to_core_messages(messages: Sequence[BaseMessage]) -> list[ChatMessage]:
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
            role = {"human": "user", "ai": "assistant"}.get(message.role, message.role)
            if role not in ("system", "user", "assistant"):
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


def _tool_choice(choice: ToolChoice, tools: Sequence[Mapping[str, Any]]) -> tuple[bool, bool, str | None]:
    """``(send_tools, forced, name)`` for a LangChain ``tool_choice``; ``name`` None lets the model pick.

    Raises:
        InvalidRequestError: an unknown form, or a name that is not a bound tool.
    """
    if isinstance(choice, dict):
        kind = choice.get("type")
        if kind == "function" and isinstance(choice.get("function"), dict):
            choice = choice["function"].get("name")
        elif kind == "tool":
            choice = choice.get("name")
        elif kind in ("auto", "any", "none", "required"):
            choice = kind
        else:
            raise InvalidRequestError(
                f"tool_choice {choice!r} is not understood; use 'auto', 'any', 'none', a tool name, or "
                "{'type': 'function', 'function': {'name': ...}}"
            )
    if choice is None or choice == "auto":
        return True, False, None
    if choice is False or choice == "none":
        return False, False, None
    if choice is True or choice in ("any", "required"):
        return True, True, None
    if not isinstance(choice, str):
        raise InvalidRequestError(f"tool_choice {choice!r} is not understood; use 'auto', 'any', 'none' or a tool name")
    names = [str(t.get("function", t).get("name")) for t in tools]
    if choice not in names:
        raise InvalidRequestError(
            f"tool_choice names {choice!r}, which is not a bound tool; bound tools: {', '.join(names) or 'none'}"
        )
    return True, True, choice


def _response_schema(response_format: Mapping[str, Any]) -> dict[str, Any] | None:
    """The JSON schema of ``response_format`` (None for ``{"type": "json_object"}``).

    Raises:
        InvalidRequestError: an unknown form.
    """
    kind = response_format.get("type")
    if kind == "json_object":
        return None
    if kind == "json_schema":
        schema = response_format.get("schema")
        if schema is None and isinstance(response_format.get("json_schema"), Mapping):
            schema = response_format["json_schema"].get("schema")
        if isinstance(schema, Mapping):
            return dict(schema)
    raise InvalidRequestError(
        f"response_format {dict(response_format)!r} is not understood; use {{'type': 'json_schema', 'schema': "
        "{...}} or {'type': 'json_object'}"
    )


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
    """What the last chunk reports: why it ended, which package, timings and the budget plan."""
    meta: dict[str, Any] = {
        "model_name": model_name,
        "model_provider": PROVIDER,
        "finish_reason": chunk.finish_reason,
        "stop_reason": _STOP_REASONS.get(str(chunk.finish_reason), chunk.finish_reason),
    }
    if chunk.timings is not None:
        meta["timings"] = chunk.timings.to_dict()
    if chunk.plan is not None:
        meta["budget_plan"] = chunk.plan.to_dict()
    meta["dropped_messages"] = chunk.dropped_messages
    return meta


def _generation_chunk(chunk: Chunk, model_name: str) -> ChatGenerationChunk:
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
    return ChatGenerationChunk(message=message, generation_info={"finish_reason": chunk.finish_reason})


class _StrictJsonOutputParser(BaseCumulativeTransformOutputParser[Any]):
    """JSON output, validated into ``pydantic_object`` when one is given.

    Partial objects while streaming (as LangChain's JSON parsers do); the final result is
    parsed with strict ``json.loads``. LangChain's own parsers repair cut-off JSON; a cut-off
    answer here is an error instead.
    """

    pydantic_object: Any = None
    """A pydantic (v2 or v1) class to validate into, or None for plain JSON."""

    @property
    def _type(self) -> str:
        return "ryzenai_strict_json"

    def parse(self, text: str) -> Any:
        """Parse (and validate) a whole answer."""
        return self._validate(_strict_json(text))

    def parse_result(self, result: list[Generation], *, partial: bool = False) -> Any:
        """Parse (and validate) the model's text; strictly unless ``partial``."""
        if not partial:
            return self.parse(result[0].text)
        try:
            obj = parse_partial_json(result[0].text)
        except json.JSONDecodeError:
            return None
        if obj is None or self.pydantic_object is None:
            return obj
        try:
            return self._validate(obj)
        except OutputParserException:
            return None  # not a whole object yet

    def _validate(self, obj: Any) -> Any:
        model = self.pydantic_object
        if model is None:
            return obj
        try:
            if issubclass(model, pydantic.BaseModel):
                return model.model_validate(obj)
            return model.parse_obj(obj)  # a pydantic.v1 model
        except (pydantic.ValidationError, pydantic.v1.ValidationError) as exc:
            text = json.dumps(obj, ensure_ascii=False)
            raise OutputParserException(
                f"Failed to parse {model.__name__} from completion {text}: {exc}", llm_output=text
            ) from exc


def _strict_json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise OutputParserException(
            f"the model's answer is not one complete JSON value ({exc}); cut-off JSON is not repaired",
            llm_output=text,
        ) from exc


@dataclass
class _Call:
    """One prepared generation."""

    engine: Engine
    messages: list[ChatMessage]
    options: GenerationOptions
    timeout: float | None
    model_name: str


def _field_names(cls: type[pydantic.BaseModel], fields: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """Each field with every name the constructor takes for it (the name, its alias and validation aliases)."""
    out: dict[str, tuple[str, ...]] = {}
    for name in fields:
        info = cls.model_fields[name]
        names = [name]
        if info.alias:
            names.append(info.alias)
        if isinstance(info.validation_alias, str):
            names.append(info.validation_alias)
        elif isinstance(info.validation_alias, AliasChoices):
            names.extend(c for c in info.validation_alias.choices if isinstance(c, str))
        out[name] = tuple(dict.fromkeys(names))
    return out


def _init_kwargs(cls: type[ChatRyzenAI], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Constructor arguments, checked, with the generation options of ``model_kwargs`` moved to their fields.

    Raises:
        InvalidRequestError: an unknown parameter; an option given both directly and in
            ``model_kwargs`` with different values; an option ChatRyzenAI does not have.
    """
    every = _field_names(cls, cls.model_fields)
    accepted = {n for names in every.values() for n in names}
    unknown = [k for k in kwargs if k not in accepted]
    if unknown:
        own = sorted(set(cls.model_fields) - set(BaseChatModel.model_fields) - {"api_key", "base_url"})
        problems = []
        for key in unknown:
            match = _close_match(key, accepted)
            problems.append(
                f"{cls.__name__} got an unknown parameter {key!r}" + (f"; did you mean {match!r}?" if match else ".")
            )
        raise InvalidRequestError(
            " ".join(problems) + f" {cls.__name__} takes {', '.join(own)} (and LangChain's callbacks, tags, "
            "metadata, cache, rate_limiter, ...); chat-template variables go in model_kwargs."
        )
    extra = kwargs.get("model_kwargs")
    if not isinstance(extra, Mapping) or not extra:
        return kwargs
    fields = set(cls.model_fields) - set(BaseChatModel.model_fields) - {"model_kwargs", "api_key", "base_url"}
    own_names = _field_names(cls, fields)
    field_of = {n: field for field, names in own_names.items() for n in names}
    out = dict(kwargs)
    kept: dict[str, Any] = {}
    lifted: dict[str, tuple[str, Any]] = {}
    for key, value in extra.items():
        _generation_option(key, value)  # refuses what ChatRyzenAI does not have
        field = field_of.get(_OPTION_ALIASES.get(key) or key)
        if field is None:
            kept[key] = value  # a chat-template variable, or a call option such as tools (taken per call)
            continue
        value = _normalised(field, value)
        if field in lifted and lifted[field][1] != value:
            first_key, first_value = lifted[field]
            raise _given_twice(field, f"model_kwargs[{first_key!r}]", first_value, key, value)
        lifted[field] = (key, value)
        for name in own_names[field]:
            given = _normalised(field, kwargs.get(name))
            if given is not None and given != value:
                raise _given_twice(field, name, kwargs[name], key, value)
            out.pop(name, None)
        out[field] = value
    out["model_kwargs"] = kept
    return out


def _normalised(name: str, value: Any) -> Any:
    """``stop`` as a list (one string may be given); other values as they are."""
    return [value] if name == "stop" and isinstance(value, str) else value


# ---------------------------------------------------------------------- the chat model
class ChatRyzenAI(BaseChatModel):
    """Chat model on an AMD Ryzen AI model package (ONNX Runtime GenAI), for LangChain.

    Runs the package's own chat template and tokenizer, knows its context budget (prompt
    limit, prefill buckets, window), and streams from a worker process so the caller's
    event loop stays responsive. The model loads on the first call.

    Setup:
        On a Ryzen AI PC, in the environment of the Ryzen AI installer::

            pip install 'ryzenai-llm[langchain]'
            git lfs install && git clone https://huggingface.co/amd/Qwen3-4B_rai_1.8.0_npu_4K

        Elsewhere (CPU build of onnxruntime-genai, plain ONNX packages or ``provider="cpu"``)::

            pip install 'ryzenai-llm[langchain,cpu]'

    Key init args — generation:
        model: the package folder (``model_name`` also accepted), a Hugging Face repository
            id (``"amd/Qwen3-4B_rai_1.8.0_npu_4K"``, cached on first use) or the name of a
            model embedded in ryzenai-llm (``"tiny-qa-llama"``).
        temperature, top_p, top_k, seed, repetition_penalty: sampling (None: the package's
            ``genai_config.json`` search defaults); ``temperature=0`` is greedy.
        max_tokens: new tokens at most (None: the package default, as many as fit).
        stop: strings that end the answer (never part of it).
        enable_thinking: Qwen3-style reasoning on/off (alias ``reasoning``; None: template default).
        model_kwargs: generation options by name, honoured as if given directly (``{"max_tokens": 64}``;
            also ``max_new_tokens``, ``max_completion_tokens``, ``random_seed``, ``stop_sequences``),
            and extra chat-template variables (``{"date_string": "1 Jan 2026"}``). Options
            ChatRyzenAI does not have (``max_length``, ``num_beams``, ``presence_penalty``, ...) and
            an option given both directly and here with another value are errors. Per call too:
            ``invoke(msgs, model_kwargs={...})``.
        chat_template: a Jinja template (source or file) that replaces the package's.

    Key init args — runtime:
        provider: None (the package's own: Ryzen AI), or ``"cpu"``, ``"cuda"``, ``"dml"``.
        num_threads, release: CPU threads; the Ryzen AI release to plan budgets for.
        execution: ``"process"`` (default: a worker process) or ``"inline"``.
        kv_reuse: reuse the KV cache of a shared prompt prefix (None: package default).
        overflow: a prompt over the limit raises ``ContextWindowExceededError`` (``"error"``)
            or drops the oldest turns, keeping the system prompt and the newest message
            (``"drop_oldest"``).
        timeout, max_retries: seconds per call; retries after the worker process died.
        api_key, base_url: accepted, as LangChain's standard chat-model parameters, and unused: the
            model runs on this machine. Any other unknown parameter is an error that names the
            closest known one (``temprature`` -> ``temperature``).

    Instantiate:
        .. code-block:: python

            from langchain_ryzenai import ChatRyzenAI

            llm = ChatRyzenAI(model="Qwen3-4B_rai_1.8.0_npu_4K", temperature=0, max_tokens=256)

    Invoke:
        .. code-block:: python

            msg = llm.invoke([("system", "Answer briefly."), ("human", "What is an NPU?")])
            msg.content                      # the answer
            msg.additional_kwargs            # {"reasoning_content": "..."} for Qwen3 thinking
            msg.usage_metadata               # {"input_tokens": 24, "output_tokens": 57, "total_tokens": 81, ...}
            msg.response_metadata            # finish_reason, model_name, timings, budget_plan

    Stream:
        .. code-block:: python

            for chunk in llm.stream("Write a haiku about silicon."):
                print(chunk.content, end="", flush=True)

    Async:
        .. code-block:: python

            msg = await llm.ainvoke("Hello")
            async for chunk in llm.astream("Hello"):
                ...
            msgs = await llm.abatch(["Hello", "Hi"])

    Tools:
        .. code-block:: python

            from langchain_core.tools import tool

            @tool
            def multiply(a: int, b: int) -> int:
                \"\"\"Multiply two integers.\"\"\"
                return a * b

            llm_tools = llm.bind_tools([multiply], tool_choice="any")  # "auto", "any", "none" or a name
            msg = llm_tools.invoke("What is 6 times 7?")
            msg.tool_calls  # [{"name": "multiply", "args": {"a": 6, "b": 7}, "id": "call_...", ...}]

    Structured output:
        .. code-block:: python

            from pydantic import BaseModel

            class Joke(BaseModel):
                setup: str
                punchline: str

            joke = llm.with_structured_output(Joke).invoke("Tell me a joke about cats")
            # method="json_schema" (default, grammar-constrained), "function_calling" or "json_mode";
            # include_raw=True returns {"raw": AIMessage, "parsed": Joke | None, "parsing_error": ...}

    Token counting:
        .. code-block:: python

            from langchain_core.messages import trim_messages

            llm.get_num_tokens_from_messages(history)  # the package's template and tokenizer
            trim_messages(history, max_tokens=2048, token_counter=llm, strategy="last")
    """

    model_config = ConfigDict(populate_by_name=True, extra="forbid", arbitrary_types_allowed=True)

    model: str = Field(
        alias="model_name",
        min_length=1,
        description="model package folder, Hugging Face repository id or embedded model name",
    )
    temperature: float | None = Field(None, ge=0.0, description="0 = greedy; None = the package's default")
    max_tokens: int | None = Field(None, ge=1, description="new tokens at most; None = the package's default")
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="nucleus sampling mass")
    top_k: int | None = Field(None, ge=0, description="sample among the k most likely tokens")
    repetition_penalty: float | None = Field(None, gt=0.0, description="1.0 = none")
    seed: int | None = Field(None, ge=0, description="random seed for sampling")
    stop: list[str] | None = Field(None, description="strings that end the answer (one string or a list)")
    timeout: float | None = Field(None, gt=0.0, description="seconds a call may take; it is cancelled after")
    max_retries: int = Field(1, ge=0, description="new attempts after the model worker died before any output")
    provider: str | None = Field(None, description="None (the package's own), 'cpu', 'cuda' or 'dml'")
    num_threads: int | None = Field(None, ge=1, description="CPU threads of the runtime")
    release: str | None = Field(None, description="Ryzen AI release to plan the budget for (default: detected)")
    execution: Literal["process", "inline"] | None = Field(None, description="run the model in a worker process")
    enable_thinking: bool | None = Field(
        None,
        validation_alias=AliasChoices("enable_thinking", "reasoning"),
        description="Qwen3-style reasoning on/off; None = the template's default",
    )
    kv_reuse: bool | None = Field(None, description="reuse the KV cache of a shared prompt prefix")
    overflow: Literal["error", "drop_oldest"] = Field("error", description="what to do with a prompt over the limit")
    model_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="generation options by name (max_tokens, temperature, stop, ...; also max_new_tokens, "
        "random_seed, stop_sequences), which are honoured as if given directly, and extra chat-template variables; "
        "options ChatRyzenAI does not have (max_length, num_beams, presence_penalty, ...) are refused",
    )
    chat_template: str | None = Field(None, description="Jinja chat template (source or file) to use instead")
    streaming: bool = Field(False, description="stream to callbacks also in invoke()")
    api_key: SecretStr | None = Field(
        None, exclude=True, repr=False, description="accepted for LangChain compatibility and unused: no key needed"
    )
    base_url: str | None = Field(
        None, exclude=True, repr=False, description="accepted for LangChain compatibility and unused: no server"
    )

    def __init__(self, **kwargs: Any) -> None:
        """Build the chat model; see the class docstring for the parameters.

        Raises:
            InvalidRequestError: an unknown parameter (with the closest known name), a generation
                option given both directly and in ``model_kwargs``, or one ChatRyzenAI does not have.
            pydantic.ValidationError: a value out of range.
        """
        super().__init__(**_init_kwargs(type(self), kwargs))

    @field_validator("model", mode="before")
    @classmethod
    def _path_to_str(cls, value: Any) -> Any:
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    @field_validator("provider")
    @classmethod
    def _known_provider(cls, value: str | None) -> str | None:
        check_runtime_settings(value)  # at construction, not at the first call
        return value

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [value]
        if isinstance(value, list) and any(s == "" for s in value):
            raise ValueError(f"stop strings must be non-empty, got {value!r}")
        return value

    # ------------------------------------------------------------------ LangChain identity
    @property
    def _llm_type(self) -> str:
        return "ryzenai-chat"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "provider": self.provider,
            "execution": self.execution,
            "release": self.release,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "repetition_penalty": self.repetition_penalty,
            "seed": self.seed,
            "stop": self.stop,
            "enable_thinking": self.enable_thinking,
            "kv_reuse": self.kv_reuse,
            "overflow": self.overflow,
            "model_kwargs": self.model_kwargs,
            "chat_template": self.chat_template,
        }

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        try:
            stop, kwargs = self._call_kwargs(stop, kwargs)
        except InvalidRequestError:
            pass  # the call itself raises it
        params = LangSmithParams(ls_provider=PROVIDER, ls_model_name=self._requested(kwargs), ls_model_type="chat")
        temperature = kwargs.get("temperature", self.temperature)
        if temperature is not None:
            params["ls_temperature"] = temperature
        max_tokens = kwargs.get("max_tokens", self.max_tokens)
        if max_tokens is not None:
            params["ls_max_tokens"] = max_tokens
        stops = stop if stop is not None else self.stop
        if stops:
            params["ls_stop"] = list(stops)
        return params

    # ------------------------------------------------------------------ engine and options
    def _engine(self, model: str | None = None) -> Engine:
        """The shared engine of ``model`` (default: this model's); the model loads on first use."""
        return Engine.get(
            model or self.model,
            provider=self.provider,
            num_threads=self.num_threads,
            release=self.release,
            execution=self.execution,
        )

    def _requested(self, kwargs: Mapping[str, Any]) -> str:
        """The model of a call as the caller named it (per-call ``model``/``model_name``, else the field)."""
        return _model_name(kwargs.get("model") or kwargs.get("model_name") or self.model)

    def _call_kwargs(
        self, stop: list[str] | None, kwargs: Mapping[str, Any]
    ) -> tuple[list[str] | None, dict[str, Any]]:
        """``(stop, kwargs)`` of one call with the generation options of ``model_kwargs`` taken out of it.

        A generation option in ``model_kwargs`` counts as if given by keyword: per call it
        overrides the fields; the field's ``model_kwargs`` (what construction left in it:
        template variables and call options such as ``tools``) gives defaults below the
        call's. What is left is ``kwargs["model_kwargs"]``: the chat-template variables.

        Raises:
            InvalidRequestError: an unknown keyword; an option given twice in one call; an option
                ChatRyzenAI does not have, or one that is set when ChatRyzenAI is created.
        """
        unknown = sorted(set(kwargs) - CALL_KWARGS)
        if unknown:
            hints = [(k, _close_match(k, CALL_KWARGS)) for k in unknown]
            named = ", ".join(f"{k} (did you mean {m!r}?)" if m else k for k, m in hints)
            raise InvalidRequestError(
                f"ChatRyzenAI does not take the keyword argument(s) {named}; "
                f"accepted per call: {', '.join(sorted(CALL_KWARGS))}"
            )
        call_extra = kwargs.get("model_kwargs")
        if call_extra is None:
            call_extra = {}
        if not isinstance(call_extra, Mapping):
            raise InvalidRequestError(
                f"model_kwargs must be a dict of generation options and chat-template variables, got "
                f"{type(call_extra).__name__}: {call_extra!r}"
            )
        out = dict(kwargs)
        template: dict[str, Any] = {}
        explicit_stop = stop
        fixed = set(type(self).model_fields) - set(BaseChatModel.model_fields) - {"model_kwargs"}
        for per_call, extra in ((False, self.model_kwargs), (True, call_extra)):
            for key, value in extra.items():
                name = _generation_option(key, value)
                if not name:
                    if key in fixed:
                        raise InvalidRequestError(
                            f"model_kwargs[{key!r}]={value!r} is set when ChatRyzenAI is created "
                            f"(ChatRyzenAI(..., {key}=...)), not per call"
                        )
                    template[key] = value
                    continue
                value = _normalised(name, value)
                keywords = _CALL_OPTIONS[name]
                given = [(k, explicit_stop if k == "stop" else kwargs.get(k)) for k in keywords]
                given = [(k, _normalised(name, v)) for k, v in given if v is not None]
                if per_call and given and given[0][1] != value:
                    raise _given_twice(name, given[0][0], given[0][1], key, value)
                if not given:
                    if name == "stop":
                        stop = value
                    else:
                        out[name] = value
        out["model_kwargs"] = template
        return stop, out

    def _template_values(self, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        chat_template = kwargs.get("chat_template") or self.chat_template
        values = dict(kwargs.get("model_kwargs") or {})
        if chat_template:
            values["chat_template"] = chat_template
        return values

    def _option_values(self, stop: list[str] | None, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """Generation options of one call: per-call kwargs (and ``model_kwargs``) over fields; None left out."""
        stop, kwargs = self._call_kwargs(stop, kwargs)
        return self._options(stop, kwargs)

    def _options(self, stop: list[str] | None, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """:meth:`_option_values` of kwargs that :meth:`_call_kwargs` already resolved."""

        def pick(name: str, *aliases: str) -> Any:
            for key in (name, *aliases):
                if kwargs.get(key) is not None:
                    return kwargs[key]
            return getattr(self, name)

        values: dict[str, Any] = {
            "max_new_tokens": pick("max_tokens"),
            "temperature": pick("temperature"),
            "top_p": pick("top_p"),
            "top_k": pick("top_k"),
            "repetition_penalty": pick("repetition_penalty"),
            "seed": pick("seed"),
            "enable_thinking": pick("enable_thinking", "reasoning"),
            "kv_reuse": pick("kv_reuse"),
            "overflow": pick("overflow"),
            "stop": stop if stop is not None else self.stop,
            "template_vars": self._template_values(kwargs),
        }
        return {k: v for k, v in values.items() if v is not None and v != {} and v != []}

    def _prepare(self, messages: Sequence[BaseMessage], stop: list[str] | None, kwargs: Mapping[str, Any]) -> _Call:
        """Messages, options and guidance of one call (no generation yet).

        Raises:
            InvalidRequestError: an unknown keyword, bad options, messages or tools.
        """
        stop, kwargs = self._call_kwargs(stop, kwargs)
        model_name = self._requested(kwargs)
        engine = self._engine(model_name)
        values = self._options(stop, kwargs)
        tools = [convert_to_openai_tool(t) for t in kwargs.get("tools") or []]
        send_tools, forced, name = _tool_choice(kwargs.get("tool_choice"), tools)
        if send_tools and tools:
            values["tools"] = tools
        guidance = kwargs.get("guidance")
        response_format = kwargs.get("response_format")
        wanted = [
            w
            for w, on in (
                ("guidance", guidance),
                ("response_format", response_format),
                ("a forced tool_choice", forced),
            )
            if on
        ]
        if len(wanted) > 1:
            raise InvalidRequestError(f"a call can constrain its output one way only; it got {' and '.join(wanted)}")
        if forced or response_format is not None:
            budget = values.get("max_new_tokens") or engine.budget.num_output
            values["max_new_tokens"] = budget
            if forced:
                family = self._family(engine, values.get("template_vars", {}).get("chat_template"))
                guidance = tool_call_guidance(family, tools, budget, name, count_tokens=engine.count_text)
            elif not isinstance(response_format, Mapping):
                raise InvalidRequestError(f"response_format must be a dict, got {type(response_format).__name__}")
            else:
                schema = _response_schema(response_format)
                guidance = json_object_guidance(budget) if schema is None else json_schema_guidance(schema, budget)
        if guidance is not None:
            values["guidance"] = guidance
        timeout = kwargs.get("timeout", self.timeout)
        return _Call(engine, _to_core_messages(messages), validated_options(**values), timeout, model_name)

    @staticmethod
    def _family(engine: Engine, chat_template: str | None) -> str:
        template = engine.template if not chat_template else ChatTemplate.for_package(engine.package, chat_template)
        return str(template.family)

    # ------------------------------------------------------------------ the one stream
    def _chunks(self, call: _Call) -> Iterator[Chunk]:
        """The core stream, started again (up to ``max_retries``) if the worker process died before any output."""
        attempt = 0
        while True:
            started = False
            try:
                for chunk in call.engine.stream(call.messages, call.options, timeout=call.timeout):
                    started = True
                    yield chunk
                return
            except GenerationError as exc:
                # Only a worker that died is worth a new attempt (on a new worker): timeouts,
                # runtime errors and constrained output that did not close would fail again.
                if started or attempt >= self.max_retries or not isinstance(exc, WorkerDiedError):
                    raise
                attempt += 1
                logger.warning("ChatRyzenAI: %s; retrying (%d of %d)", exc, attempt, self.max_retries)

    async def _achunks(self, call: _Call) -> AsyncIterator[Chunk]:
        """Async twin of :meth:`_chunks`."""
        attempt = 0
        while True:
            started = False
            try:
                async for chunk in call.engine.astream(call.messages, call.options, timeout=call.timeout):
                    started = True
                    yield chunk
                return
            except GenerationError as exc:
                # Only a worker that died is worth a new attempt (on a new worker): timeouts,
                # runtime errors and constrained output that did not close would fail again.
                if started or attempt >= self.max_retries or not isinstance(exc, WorkerDiedError):
                    raise
                attempt += 1
                logger.warning("ChatRyzenAI: %s; retrying (%d of %d)", exc, attempt, self.max_retries)

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        call = self._prepare(messages, stop, kwargs)
        for chunk in self._chunks(call):
            out = _generation_chunk(chunk, call.model_name)
            if run_manager is not None:
                run_manager.on_llm_new_token(out.text, chunk=out)
            yield out

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        # Opening a package reads files and compiles its template: keep that off the event loop.
        call = await run_in_executor(None, self._prepare, messages, stop, kwargs)
        async for chunk in self._achunks(call):
            out = _generation_chunk(chunk, call.model_name)
            if run_manager is not None:
                await run_manager.on_llm_new_token(out.text, chunk=out)
            yield out

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return generate_from_stream(self._stream(messages, stop=stop, run_manager=run_manager, **kwargs))

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return await agenerate_from_stream(self._astream(messages, stop=stop, run_manager=run_manager, **kwargs))

    # ------------------------------------------------------------------ tokens
    def get_token_ids(self, text: str) -> list[int]:
        """Token ids of ``text`` with the package's tokenizer (no special tokens added).

        Args:
            text: any text.
        """
        if self.custom_get_token_ids is not None:
            return list(self.custom_get_token_ids(text))
        return [int(i) for i in self._engine().encode(text)]

    def get_num_tokens_from_messages(self, messages: LanguageModelInput, tools: Sequence[Any] | None = None) -> int:
        """Prompt tokens of ``messages`` rendered by the package's chat template, as a call would send them.

        The count includes the template's framing and the opening of the answer, and the
        tool definitions when ``tools`` are given, so it equals ``usage_metadata["input_tokens"]``
        of a call with the same messages and tools (``trim_messages(token_counter=llm)``).

        Args:
            messages: what :meth:`invoke` takes: messages, ``(role, text)`` tuples, ``{"role": ...,
                "content": ...}`` dicts and strings (a human message), in a list or mixed; one string;
                a prompt value.
            tools: tools as for :meth:`bind_tools` (default: those in ``model_kwargs``, if any).

        Raises:
            ValueError: something :meth:`invoke` would refuse too (an unknown role, a bad content block).
        """
        converted = self._convert_input(messages).to_messages()
        if not converted:
            return 0
        stop, kwargs = self._call_kwargs(None, {})
        values = self._options(stop, kwargs)
        tools = tools if tools is not None else kwargs.get("tools")
        if tools:
            values["tools"] = [convert_to_openai_tool(t) for t in tools]
        return int(self._engine().count_tokens(_to_core_messages(converted), validated_options(**values)))

    # ------------------------------------------------------------------ tools and structured output
    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: ToolChoice = None,
        strict: bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools; the package's template renders them in its family's format.

        Args:
            tools: pydantic models, functions, LangChain tools or OpenAI tool dicts.
            tool_choice: None/``"auto"``: the model may call a tool; ``"any"``/``"required"``/
                True: it must call one (grammar-constrained); a tool name or
                ``{"type": "function", "function": {"name": ...}}``: it must call that one;
                ``"none"``: tools are not sent.
            strict: passed to ``convert_to_openai_tool`` (forced calls always match the schema).
            **kwargs: more call options (see :data:`CALL_KWARGS`).

        Raises:
            InvalidRequestError: ``tool_choice`` names a tool that is not bound.
        """
        formatted = [convert_to_openai_tool(t, strict=strict) for t in tools]
        _tool_choice(tool_choice, formatted)
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return super().bind(tools=formatted, **kwargs)

    def with_structured_output(
        self,
        schema: dict[str, Any] | type,
        *,
        method: Literal["json_schema", "function_calling", "json_mode"] = "json_schema",
        include_raw: bool = False,
        strict: bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, dict[str, Any] | Any]:
        """A runnable whose output follows ``schema``.

        ``json_schema`` (default) constrains decoding to the schema, with every free-form
        string and array bounded so the JSON closes within ``max_tokens``; ``function_calling``
        forces a call of a tool made from the schema; ``json_mode`` constrains the output to a
        flat JSON object (say in the prompt which keys you want). The final result is parsed
        strictly: never cut-off JSON repaired.

        Args:
            schema: a pydantic class, a TypedDict, or a JSON schema / OpenAI tool dict.
            method: ``json_schema``, ``function_calling`` or ``json_mode``.
            include_raw: return ``{"raw": AIMessage, "parsed": ..., "parsing_error": ...}``.
            strict: accepted for compatibility; output is always grammar-constrained.
            **kwargs: not accepted.

        Raises:
            ValueError: an unknown method or keyword.
        """
        if kwargs:
            raise ValueError(f"with_structured_output() got unexpected keyword arguments: {sorted(kwargs)}")
        is_pydantic = isinstance(schema, type) and is_basemodel_subclass(schema)
        ls_format = {"kwargs": {"method": method, "strict": strict}, "schema": schema}
        parser: Runnable[Any, Any]
        if method == "function_calling":
            tool = convert_to_openai_tool(schema)
            name = tool["function"]["name"]
            ls_format["schema"] = tool
            llm = self.bind_tools([schema], tool_choice=name, ls_structured_output_format=ls_format)
            if is_pydantic:
                parser = PydanticToolsParser(tools=[schema], first_tool_only=True)
            else:
                parser = JsonOutputKeyToolsParser(key_name=name, first_tool_only=True)
        elif method in ("json_schema", "json_mode"):
            if method == "json_schema":
                response_format: dict[str, Any] = {"type": "json_schema", "schema": convert_to_json_schema(schema)}
            else:
                response_format = {"type": "json_object"}
                ls_format["kwargs"] = {"method": method}
            llm = self.bind(response_format=response_format, ls_structured_output_format=ls_format)
            parser = _StrictJsonOutputParser(pydantic_object=schema if is_pydantic else None)
        else:
            raise ValueError(
                f"method {method!r} is not supported; use 'json_schema', 'function_calling' or 'json_mode'"
            )
        if not include_raw:
            return llm | parser
        parsed = RunnablePassthrough.assign(parsed=itemgetter("raw") | parser, parsing_error=lambda _: None)
        fallback = RunnablePassthrough.assign(parsed=lambda _: None)
        return RunnableMap(raw=llm) | parsed.with_fallbacks([fallback], exception_key="parsing_error")
