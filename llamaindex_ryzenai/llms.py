"""RyzenAILLM: a LlamaIndex ``FunctionCallingLLM`` over a Ryzen AI model package.

Data flow of every call::

    chat / stream_chat / achat / astream_chat          LlamaIndex decorators fire the
    complete / stream_complete / acomplete / ...       instrumentation events (start, chunks, end)
      -> _request: LlamaIndex messages -> core messages, through the package's chat template
         (or, when messages_to_prompt / completion_to_prompt is given, their text verbatim);
         fields + call kwargs -> GenerationOptions; a forced tool call or a JSON schema
         becomes onnxruntime-genai guidance
      -> Engine.stream / Engine.astream: the one core stream (model in a worker process by default)
      -> _Fold: a ChatResponse per chunk (ThinkingBlock, TextBlock, ToolCallBlock);
         usage, finish reason and the BudgetPlan in additional_kwargs and raw
      -> complete* = the same stream with one user message, as CompletionResponse

``metadata.context_window`` is what LlamaIndex's PromptHelper must see so that what it packs,
counted with ``Settings.tokenizer``, fits the package's real prompt limit: see
:meth:`RyzenAILLM.metadata`. When the application never set ``Settings.tokenizer``, the first
``metadata`` read sets it to the package's tokenizer (``use_package_tokenizer``), so counts
are exact. "Never set" includes the tiktoken default LlamaIndex installs by itself.
"""

from __future__ import annotations

import difflib
import functools
import json
import logging
import math
import os
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

import llama_index.core
from llama_index.core import Settings
from llama_index.core.base.llms.generic_utils import messages_to_prompt as generic_messages_to_prompt
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    ImageBlock,
    LLMMetadata,
    MessageRole,
    TextBlock,
)
from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr, field_validator, model_validator
from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined]
from llama_index.core.instrumentation.events.llm import LLMStructuredPredictEndEvent, LLMStructuredPredictStartEvent
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection, default_completion_to_prompt
from llama_index.core.program.streaming_utils import process_streaming_content_incremental
from llama_index.core.prompts import BasePromptTemplate, PromptTemplate
from llama_index.core.types import Model, PydanticProgramMode
from llama_index.core.utils import get_tokenizer
from typing_extensions import Self

from ryzenai_core.budget import ContextBudget
from ryzenai_core.chat_template import ChatTemplate
from ryzenai_core.engine import Engine
from ryzenai_core.errors import ChatTemplateError, InvalidRequestError
from ryzenai_core.messages import ChatMessage as CoreMessage
from ryzenai_core.messages import RawPrompt
from ryzenai_core.options import GenerationOptions, Guidance, validated_options
from ryzenai_core.session import check_runtime_settings
from ryzenai_core.structured import json_schema_guidance, tool_call_guidance

from ._calibration import SEGMENTS
from ._convert import _Fold, image_blocks, keep_first_tool_call, to_completion, to_core_messages, tool_selections

__all__ = ["PackageTokenizer", "RyzenAILLM"]

dispatcher = get_dispatcher(__name__)

#: Safety factor over the measured tokenizer ratio (text unlike every calibration segment).
RATIO_MARGIN = 1.1
#: Below this much prompt room (Settings.tokenizer tokens) LlamaIndex's synthesizers struggle.
SMALL_ROOM = 1024

logger = logging.getLogger(__name__)

_OPTION_KWARGS = frozenset(
    {
        "max_new_tokens",
        "temperature",
        "top_p",
        "top_k",
        "repetition_penalty",
        "do_sample",
        "seed",
        "stop",
        "enable_thinking",
        "guidance",
        "kv_reuse",
        "overflow",
    }
)
_CALL_KWARGS = _OPTION_KWARGS | {"max_tokens", "tools", "tool_choice", "template_vars", "chat_template", "timeout"}
_FORCED = ("required", "any")
#: Constructor names other LlamaIndex LLMs use for a field of ours (OpenAI's ``max_tokens``).
_FIELD_ALIASES = {"max_tokens": "max_new_tokens"}
#: Private attributes that belong to the model package, shared by copies (never copied).
_SHARED_PRIVATE = ("_engine", "_tokenizer", "_template")
#: Template families with a tool-call format the core can parse and force.
_TOOL_FAMILIES = ("llama3", "qwen3", "chatml")


class PackageTokenizer:
    """A model package's own tokenizer, callable the way LlamaIndex expects.

    Assign it to ``Settings.tokenizer`` (``Settings.tokenizer = llm.tokenizer``) and every count
    LlamaIndex makes (PromptHelper, text splitters, memory) is in the package's tokens, so
    :meth:`RyzenAILLM.metadata` can report the full prompt limit. Counts come from the model's
    tokenizer (in the worker process with ``execution="process"``); texts of up to 4096
    characters are cached (LRU), since text splitters count the same words again and again.
    """

    _CACHE_MAX_CHARS = 4096

    def __init__(self, engine: Engine, cache_size: int = 8192) -> None:
        self._engine = engine
        self.path = engine.package.path
        self._cache: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def encode(self, text: str, *args: Any, **kwargs: Any) -> list[int]:
        """Token ids of ``text`` (no special tokens added)."""
        with self._lock:
            hit = self._cache.get(text)
            if hit is not None:
                self._cache.move_to_end(text)
                return list(hit)
        ids = tuple(self._engine.encode(text)) if text else ()
        if len(text) <= self._CACHE_MAX_CHARS:
            with self._lock:
                self._cache[text] = ids
                if len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
        return list(ids)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of token ids."""
        return self._engine.decode(ids) if ids else ""

    def __call__(self, text: str) -> list[int]:
        """Token ids of ``text`` (what LlamaIndex calls)."""
        return self.encode(text)

    def __repr__(self) -> str:
        return f"PackageTokenizer({str(self.path)!r})"


def _tokenizer_owner(tokenizer: Any) -> Any:
    """The object behind a tokenizer callable (``Settings.tokenizer`` stores ``obj.encode``)."""
    return tokenizer if isinstance(tokenizer, PackageTokenizer) else getattr(tokenizer, "__self__", tokenizer)


def _is_default_tokenizer(tokenizer: Any) -> bool:
    """True when nobody chose LlamaIndex's tokenizer.

    That is: unset, or the tiktoken default that ``llama_index.core.utils.get_tokenizer``
    installs on first use (cl100k_base, ``allowed_special="all"``).
    """
    if tokenizer is None:
        return True
    if not isinstance(tokenizer, functools.partial) or tokenizer.keywords != {"allowed_special": "all"}:
        return False
    encoding = getattr(tokenizer.func, "__self__", None)
    return type(encoding).__module__.startswith("tiktoken") and getattr(encoding, "name", None) == "cl100k_base"


_RATIOS: dict[tuple[str, int], tuple[Any, float]] = {}
_RATIOS_LOCK = threading.Lock()


def measure_ratio(package_tokenizer: Callable[[str], list[int]], other: Callable[[str], list[Any]]) -> float:
    """The largest (package tokens / other tokens) over the calibration segments.

    Args:
        package_tokenizer: counts in the package's tokens.
        other: counts in the tokenizer LlamaIndex uses (``Settings.tokenizer``).
    """
    return max(len(package_tokenizer(s)) / max(1, len(other(s))) for s in SEGMENTS)


class RyzenAILLM(FunctionCallingLLM):
    """A Ryzen AI model package as a LlamaIndex LLM: query engines, chat engines, agents.

    Construction is cheap: nothing is read or loaded until the first call (or ``metadata``,
    which needs the tokenizer). The model runs in a worker process by default
    (``execution="process"``), shared with every adapter that names the same folder.

    An unknown field is an error (with the closest accepted name); ``max_tokens``, the name
    LlamaIndex's OpenAI-style LLMs use, is accepted for ``max_new_tokens``. Copies
    (``copy.deepcopy``, ``model_copy``) share the loaded model.

    Example:
        >>> from llama_index.core import Settings
        >>> Settings.llm = RyzenAILLM(model="C:/models/Llama-3.2-1B_rai_1.8.0_npu_4K")
        >>> Settings.tokenizer = Settings.llm.tokenizer  # exact token counts (optional)
    """

    model_config = ConfigDict(extra="forbid")

    model: str = Field(
        description="The model package: a folder, an embedded model's name or a Hugging Face repository id."
    )
    temperature: float | None = Field(None, ge=0.0, le=100.0, description="0 = greedy; None = package default.")
    max_new_tokens: int | None = Field(
        None, ge=1, description="Output tokens per call (not prompt + output); None = the package's output budget."
    )
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="Nucleus sampling mass; None = package default.")
    top_k: int | None = Field(None, ge=0, description="Sample among the k most likely tokens; None = package default.")
    seed: int | None = Field(None, ge=0, description="Random seed for sampling.")
    stop: list[str] = Field(default_factory=list, description="Strings that end the output (never part of it).")
    timeout: float | None = Field(None, gt=0, description="Seconds a call may take before it is cancelled.")
    provider: str | None = Field(None, description="None = the package's own; 'cpu', 'cuda' or 'dml' to override.")
    num_threads: int | None = Field(None, ge=1, description="Intra-op threads for CPU execution.")
    execution: Literal["process", "inline"] | None = Field(
        None, description="'process' (default: a worker process keeps the event loop free) or 'inline'."
    )
    release: str | None = Field(None, description="Ryzen AI release to plan the prompt limit for (e.g. '1.8.0').")
    session_options: dict[str, Any] = Field(
        default_factory=dict, description="ONNX Runtime session options overlaid on the package's."
    )
    enable_thinking: bool | None = Field(None, description="Qwen3-style reasoning on/off; None = template default.")
    kv_reuse: bool | None = Field(None, description="Reuse the previous call's KV prefix; None = package default.")
    overflow: Literal["error", "drop_oldest"] = Field(
        "error", description="A prompt over the limit: raise, or drop the oldest turns."
    )
    chat_template: str | None = Field(None, description="A Jinja chat template (source or file) to use instead.")
    template_vars: dict[str, Any] = Field(default_factory=dict, description="Extra chat template variables.")
    tokenizer_ratio: float | None = Field(
        None,
        gt=0.0,
        description="Package tokens per Settings.tokenizer token for context_window; None = measured.",
    )
    context_window: int | None = Field(
        None,
        ge=2,
        description=(
            "At most this many tokens (prompt + output, in Settings.tokenizer tokens) in what LlamaIndex packs: "
            "metadata.context_window reports the smaller of this and the package's real room; calls without "
            "max_new_tokens then produce at most metadata.num_output tokens. None = the package's real limit. "
            "It cannot exceed the package's window."
        ),
    )
    use_package_tokenizer: bool = Field(
        True,
        description=(
            "When Settings.tokenizer was never set (None, or LlamaIndex's own tiktoken default), make it this "
            "package's tokenizer on the first metadata read "
            "(exact counts); a tokenizer the application set is never replaced. False: keep LlamaIndex's default "
            "(tiktoken) and scale context_window by the measured token ratio."
        ),
    )

    _engine: Engine | None = PrivateAttr(default=None)
    _engine_key: str | None = PrivateAttr(default=None)
    _tokenizer: PackageTokenizer | None = PrivateAttr(default=None)
    _template: tuple[str, ChatTemplate] | None = PrivateAttr(default=None)
    _scaffold: dict[str, int] = PrivateAttr(default_factory=dict)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _warned: bool = PrivateAttr(default=False)

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        return _checked_fields(cls, data) if isinstance(data, Mapping) else data

    @field_validator("model", mode="before")
    @classmethod
    def _path_to_str(cls, value: Any) -> Any:
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    @field_validator("provider")
    @classmethod
    def _known_provider(cls, value: str | None) -> str | None:
        check_runtime_settings(value)  # at construction, not at the first call
        return value

    @model_validator(mode="after")
    def _window_fits_the_output(self) -> Self:
        if self.context_window is not None and self.max_new_tokens is not None:
            if self.max_new_tokens >= self.context_window:
                raise ValueError(
                    f"context_window={self.context_window} leaves no room for a prompt after "
                    f"max_new_tokens={self.max_new_tokens}; lower max_new_tokens or raise context_window"
                )
        return self

    # ------------------------------------------------------------------ copies
    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy sharing the loaded model; ``update`` keys are checked like constructor fields.

        Raises:
            ValueError: an unknown field in ``update`` (values are not validated, as in pydantic).
        """
        checked = _checked_fields(type(self), update) if update else None
        source = self.__deepcopy__() if deep else self  # pydantic's deep update path would copy the engine
        return super(RyzenAILLM, source).model_copy(update=checked)

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> Self:
        """A deep copy of the fields; the engine (loaded model), tokenizer and template are shared.

        The copy gets its own lock; nothing is loaded or started twice.
        """
        memo = {} if memo is None else memo
        private = self.__pydantic_private__ or {}
        for name in _SHARED_PRIVATE:
            value = private.get(name)
            if value is not None:
                memo[id(value)] = value
        lock = private.get("_lock")
        if lock is not None:
            memo[id(lock)] = threading.Lock()
        return super().__deepcopy__(memo)

    def __getstate__(self) -> dict[str, Any]:
        """Fields only: the engine, locks and caches belong to this process (reopened on first use)."""
        bare = self.__copy__()  # LlamaIndex's filter may drop unpicklable fields: never from this object
        object.__setattr__(bare, "__pydantic_private__", None)
        state: dict[str, Any] = super(RyzenAILLM, bare).__getstate__()
        return state

    @classmethod
    def class_name(cls) -> str:
        """The LlamaIndex component name."""
        return "RyzenAILLM"

    # ------------------------------------------------------------------ the package
    @property
    def engine(self) -> Engine:
        """The shared :class:`~ryzenai_core.engine.Engine` (opened on first use, model loaded lazily)."""
        key = json.dumps(
            [self.model, self.provider, self.num_threads, self.release, self.execution, self.session_options],
            sort_keys=True,
            default=str,
        )
        with self._lock:
            if self._engine is None or self._engine_key != key:  # a copy with another model, provider, ...
                engine = Engine.get(
                    self.model,
                    provider=self.provider,
                    num_threads=self.num_threads,
                    release=self.release,
                    execution=self.execution,
                    session_options=self.session_options or None,
                )
                if engine is not self._engine:
                    self._tokenizer, self._template, self._scaffold = None, None, {}
                self._engine, self._engine_key = engine, key
            return self._engine

    @property
    def budget(self) -> ContextBudget:
        """The package's real limits: window, prompt limit for the release, prefill buckets."""
        return self.engine.budget

    @property
    def template(self) -> ChatTemplate:
        """The chat template messages are rendered with (the package's, or ``chat_template``)."""
        engine = self.engine
        if self.chat_template is None:
            return engine.template
        if self._template is None or self._template[0] != self.chat_template:
            self._template = (self.chat_template, ChatTemplate.for_package(engine.package, override=self.chat_template))
        return self._template[1]

    @property
    def tokenizer(self) -> PackageTokenizer:
        """The package's tokenizer; ``Settings.tokenizer = llm.tokenizer`` makes LlamaIndex's counts exact."""
        engine = self.engine
        if self._tokenizer is None:
            self._tokenizer = PackageTokenizer(engine)
        return self._tokenizer

    def _num_output(self) -> int:
        """Output tokens of a call without ``max_new_tokens`` as metadata reports them.

        Raises:
            InvalidRequestError: ``context_window`` over the package's window, or not above the output.
        """
        budget = self.budget
        n = int(min(self.max_new_tokens or budget.num_output, budget.window - 1))
        if self.context_window is not None:
            name = self.engine.package.name
            if self.context_window > budget.window:
                raise InvalidRequestError(
                    f"context_window={self.context_window} is larger than the window of {name} "
                    f"({budget.window} tokens, prompt limit {budget.prompt_limit}); it can only lower the limit: "
                    "use a value up to the window, or leave context_window unset for the package's own"
                )
            if n >= self.context_window:
                raise InvalidRequestError(
                    f"context_window={self.context_window} leaves no room for a prompt after {n} output tokens "
                    f"({'max_new_tokens' if self.max_new_tokens else 'the default output budget of ' + name}); "
                    f"set max_new_tokens below {self.context_window} or raise context_window"
                )
        return n

    @property
    def metadata(self) -> LLMMetadata:
        """LLM metadata from the package's budget.

        ``num_output`` is ``max_new_tokens`` (or the package's output budget). ``context_window``
        is chosen so that a prompt PromptHelper accepts (at most ``context_window - num_output``
        tokens counted with ``Settings.tokenizer``) fits the real limit, ``min(prompt limit,
        window - num_output)`` package tokens, after the chat template's own tokens:

        * ``Settings.tokenizer`` is this package's tokenizer (``llm.tokenizer``): counts are
          exact and the whole room is reported.
        * any other tokenizer (LlamaIndex's default, tiktoken cl100k_base): the room is divided
          by ``tokenizer_ratio``, or by the largest package/LlamaIndex token ratio measured on
          prose, code, JSON and several languages, times 1.1.

        When ``Settings.tokenizer`` was never set (None, or the tiktoken default LlamaIndex
        installs on first use) and ``use_package_tokenizer`` is on (the default), the first read
        sets it to ``llm.tokenizer``: the first case.

        The first access loads the model's tokenizer (the model, for a worker process).
        """
        self._adopt_tokenizer()
        n = self._num_output()
        room = max(0, math.floor(self._prompt_room(n) / self._ratio()))
        window = n + room if self.context_window is None else min(n + room, self.context_window)
        if room < SMALL_ROOM and not self._warned:  # the package's room: a smaller context_window is chosen
            self._warned = True
            logger.warning(
                "%s leaves LlamaIndex only %d tokens of prompt (counted with Settings.tokenizer) after %d "
                "output tokens; compact and refine keep 500 of them free. Set Settings.tokenizer = llm.tokenizer "
                "for exact counts, or lower max_new_tokens.",
                self.engine.package.name,
                room,
                n,
            )
        return LLMMetadata(
            context_window=window,
            num_output=n,
            is_chat_model=True,
            is_function_calling_model=self.template.supports_tools and self.template.family in _TOOL_FAMILIES,
            model_name=self.model,  # as the caller named it: a path, a repository id or an embedded name
            system_role=MessageRole.SYSTEM,
        )

    def _adopt_tokenizer(self) -> None:
        """``Settings.tokenizer = self.tokenizer`` when the application has not chosen one."""
        if (
            not self.use_package_tokenizer
            or self.tokenizer_ratio is not None  # the caller asked for scaling
            or not _is_default_tokenizer(llama_index.core.global_tokenizer)
        ):
            return
        tokenizer = self.tokenizer
        with _RATIOS_LOCK:  # two LLMs racing: the first one wins, the other measures against it
            if _is_default_tokenizer(llama_index.core.global_tokenizer):
                Settings.tokenizer = tokenizer
                logger.info(
                    "Settings.tokenizer was not set: LlamaIndex now counts with the tokenizer of %s "
                    "(use_package_tokenizer=False keeps tiktoken)",
                    self.engine.package.name,
                )

    def _prompt_room(self, num_output: int) -> int:
        """Package tokens left for what PromptHelper counts: the limit minus the template's own tokens."""
        budget = self.budget
        return int(min(budget.max_prompt_tokens, budget.window - num_output) - self._scaffold_tokens())

    def _scaffold_tokens(self) -> int:
        """Tokens the chat template adds around an empty system + user turn (headers, BOS, ...)."""
        key = json.dumps(
            [self.chat_template, self.enable_thinking, self.template_vars, id(self.messages_to_prompt)],
            sort_keys=True,
            default=str,
        )
        if key not in self._scaffold:
            empty = [ChatMessage(role=MessageRole.SYSTEM, content=""), ChatMessage(role=MessageRole.USER, content="")]
            try:
                count = self.count_tokens(empty)
            except ChatTemplateError:
                count = self.count_tokens(empty[1:])
            self._scaffold[key] = count
        return self._scaffold[key]

    def _ratio(self) -> float:
        """Package tokens per token of the tokenizer LlamaIndex counts with (1.0 when it is ours)."""
        current = llama_index.core.global_tokenizer or get_tokenizer()
        owner = _tokenizer_owner(current)
        if isinstance(owner, PackageTokenizer) and owner.path == self.engine.package.path:
            return 1.0
        if self.tokenizer_ratio is not None:
            return self.tokenizer_ratio
        key = (str(self.engine.package.path), id(current))
        with _RATIOS_LOCK:
            hit = _RATIOS.get(key)
        if hit is not None and hit[0] is current:
            return hit[1]
        ratio = measure_ratio(self.tokenizer, current) * RATIO_MARGIN
        with _RATIOS_LOCK:
            _RATIOS[key] = (current, ratio)
        return ratio

    # ------------------------------------------------------------------ requests
    def _custom_messages_to_prompt(self) -> bool:
        return self.messages_to_prompt is not generic_messages_to_prompt

    def _custom_completion_to_prompt(self) -> bool:
        return self.completion_to_prompt is not default_completion_to_prompt

    def _completion_messages(
        self, prompt: str, formatted: bool, image_documents: Sequence[Any] | None = None
    ) -> tuple[list[ChatMessage], str | None]:
        """(messages, raw prompt) for a completion: verbatim text, or one user message.

        Images (``image_documents``) come before the text in that message.

        Raises:
            InvalidRequestError: images with a verbatim prompt (it carries text only).
        """
        images: list[ImageBlock] = image_blocks(image_documents or [])
        if images and (formatted or self._custom_completion_to_prompt()):
            raise InvalidRequestError(
                "image_documents need the chat template: a verbatim prompt (formatted=True or "
                "completion_to_prompt) carries text only; send the images with formatted=False"
            )
        if formatted:
            return [], prompt
        if self._custom_completion_to_prompt():
            assert self.completion_to_prompt is not None
            return [], self.completion_to_prompt(prompt)
        if images:
            return [ChatMessage(role=MessageRole.USER, blocks=[*images, TextBlock(text=prompt)])], None
        return [ChatMessage(role=MessageRole.USER, content=prompt)], None

    def _request(
        self, messages: Sequence[ChatMessage], kwargs: dict[str, Any], raw: str | None = None
    ) -> tuple[list[CoreMessage] | RawPrompt, GenerationOptions, float | None]:
        """Core messages, options and timeout for one call.

        Raises:
            InvalidRequestError: an unknown keyword, a bad option value, or a forced tool call
                without tools.
        """
        call = dict(kwargs)
        unknown = sorted(set(call) - _CALL_KWARGS)
        if unknown:
            raise InvalidRequestError(
                f"RyzenAILLM got unknown keyword argument(s) {', '.join(unknown)}; accepted: "
                f"{', '.join(sorted(_CALL_KWARGS))}"
            )
        timeout = call.pop("timeout", self.timeout)
        if "max_tokens" in call:
            value = call.pop("max_tokens")
            call.setdefault("max_new_tokens", value)
        template_vars = {**self.template_vars, **(call.pop("template_vars", None) or {})}
        chat_template = call.pop("chat_template", None) or self.chat_template
        if chat_template:
            template_vars["chat_template"] = chat_template
        tools = [_tool_spec(t) for t in (call.pop("tools", None) or [])]
        choice = call.pop("tool_choice", None)

        if raw is None and self._custom_messages_to_prompt():
            assert self.messages_to_prompt is not None
            raw = self.messages_to_prompt(messages)
        core: list[CoreMessage] | RawPrompt = RawPrompt(text=raw) if raw is not None else to_core_messages(messages)

        values: dict[str, Any] = {
            "temperature": self.temperature,
            "max_new_tokens": self.max_new_tokens,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "seed": self.seed,
            "stop": list(self.stop),
            "enable_thinking": self.enable_thinking,
            "kv_reuse": self.kv_reuse,
            "overflow": self.overflow,
        }
        values.update(call)
        if values["max_new_tokens"] is None and self.context_window is not None:
            values["max_new_tokens"] = self._num_output()  # the smaller window holds the output too
        forced, name = _forced_tool(choice)
        if choice == "none":
            tools = []
        if tools:
            values["tools"] = tools
        if forced:
            values["guidance"] = tool_call_guidance(
                self.template.family,
                tools,
                values.get("max_new_tokens") or self._num_output(),
                name,
                count_tokens=self.engine.count_text,
            )
        guidance = values.get("guidance")
        if isinstance(guidance, dict):
            values["guidance"] = Guidance(**guidance)
        if values.get("guidance") is not None and values.get("enable_thinking") is None:
            # A grammar decides every token: close the thinking block so the template matches.
            if self.template.supports_thinking:
                values["enable_thinking"] = False
        options = validated_options(**values, template_vars=template_vars)
        return core, options, timeout

    def count_tokens(self, messages: str | Sequence[ChatMessage], **kwargs: Any) -> int:
        """Prompt tokens that ``chat(messages, **kwargs)`` (or ``complete(text)``) would send.

        Exact: the package's template and tokenizer (or ``messages_to_prompt`` /
        ``completion_to_prompt`` when given).
        """
        if isinstance(messages, str):
            msgs, raw = self._completion_messages(messages, False)
            core, options, _ = self._request(msgs, kwargs, raw)
        else:
            core, options, _ = self._request(messages, kwargs)
        if isinstance(core, RawPrompt):
            return len(self.engine.encode(core.text or ""))
        return int(self.engine.count_tokens(core, options))

    # ------------------------------------------------------------------ the one stream
    def _stream(
        self, messages: Sequence[ChatMessage], kwargs: dict[str, Any], raw: str | None = None
    ) -> ChatResponseGen:
        core, options, timeout = self._request(messages, kwargs, raw)
        engine = self.engine
        name = self.model

        def gen() -> ChatResponseGen:
            fold = _Fold(name)
            chunks = engine.stream(core, options, timeout=timeout)
            try:
                for chunk in chunks:
                    response = fold.add(chunk)
                    if response is not None:
                        yield response
            finally:
                close = getattr(chunks, "close", None)
                if close is not None:
                    close()

        return gen()

    def _astream(
        self, messages: Sequence[ChatMessage], kwargs: dict[str, Any], raw: str | None = None
    ) -> ChatResponseAsyncGen:
        core, options, timeout = self._request(messages, kwargs, raw)
        engine = self.engine
        name = self.model

        async def gen() -> ChatResponseAsyncGen:
            fold = _Fold(name)
            chunks = engine.astream(core, options, timeout=timeout)
            try:
                async for chunk in chunks:
                    response = fold.add(chunk)
                    if response is not None:
                        yield response
            finally:
                aclose = getattr(chunks, "aclose", None)
                if aclose is not None:
                    await aclose()

        return gen()

    # ------------------------------------------------------------------ chat
    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """The whole answer (the aggregate of the stream)."""
        return _last(self._stream(messages, kwargs))

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        """Stream the answer; closing the generator cancels the generation."""
        return self._stream(messages, kwargs)

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """Async twin of :meth:`chat`; never blocks the event loop in ``process`` execution."""
        return await _alast(self._astream(messages, kwargs))

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        """Async twin of :meth:`stream_chat`; cancelling the consumer cancels the generation."""
        return self._astream(messages, kwargs)

    # ------------------------------------------------------------------ completion (from chat)
    @llm_completion_callback()
    def complete(
        self, prompt: str, formatted: bool = False, image_documents: Sequence[Any] | None = None, **kwargs: Any
    ) -> CompletionResponse:
        """Complete ``prompt``: one user message through the chat template.

        With ``formatted=True`` or a ``completion_to_prompt`` function, the text is sent
        verbatim (special tokens written as text are tokenized as such; nothing is added).
        ``image_documents`` (``ImageDocument`` / ``ImageNode`` objects or ``ImageBlock`` s, the
        multimodal LLMs' argument) go before the text in the user message, for vision packages.
        """
        messages, raw = self._completion_messages(prompt, formatted, image_documents)
        return to_completion(_last(self._stream(messages, kwargs, raw)))

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, image_documents: Sequence[Any] | None = None, **kwargs: Any
    ) -> CompletionResponseGen:
        """Stream a completion (see :meth:`complete`)."""
        messages, raw = self._completion_messages(prompt, formatted, image_documents)
        responses = self._stream(messages, kwargs, raw)

        def gen() -> CompletionResponseGen:
            try:
                for response in responses:
                    yield to_completion(response)
            finally:
                responses.close()

        return gen()

    @llm_completion_callback()
    async def acomplete(
        self, prompt: str, formatted: bool = False, image_documents: Sequence[Any] | None = None, **kwargs: Any
    ) -> CompletionResponse:
        """Async twin of :meth:`complete`."""
        messages, raw = self._completion_messages(prompt, formatted, image_documents)
        return to_completion(await _alast(self._astream(messages, kwargs, raw)))

    @llm_completion_callback()
    async def astream_complete(
        self, prompt: str, formatted: bool = False, image_documents: Sequence[Any] | None = None, **kwargs: Any
    ) -> CompletionResponseAsyncGen:
        """Async twin of :meth:`stream_complete`."""
        messages, raw = self._completion_messages(prompt, formatted, image_documents)
        responses = self._astream(messages, kwargs, raw)

        async def gen() -> CompletionResponseAsyncGen:
            try:
                async for response in responses:
                    yield to_completion(response)
            finally:
                await responses.aclose()

        return gen()

    # ------------------------------------------------------------------ tools
    def _prepare_chat_with_tools(
        self,
        tools: Sequence[Any],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        tool_choice: Any = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Arguments for :meth:`chat`: tools in OpenAI form; ``tool_required`` forces a call.

        ``tool_choice`` may be ``"auto"``, ``"none"``, ``"required"``, a tool name or
        ``{"type": "function", "function": {"name": ...}}``; a forced call is generated under a
        grammar in the model family's own tool-call format.
        """
        messages = list(chat_history or [])
        if user_msg is not None:
            messages.append(
                ChatMessage(role=MessageRole.USER, content=user_msg) if isinstance(user_msg, str) else user_msg
            )
        if tool_choice is None and tool_required:
            tool_choice = "required"
        return {"messages": messages, "tools": [_tool_spec(t) for t in tools], "tool_choice": tool_choice, **kwargs}

    def _validate_chat_with_tools_response(
        self,
        response: ChatResponse,
        tools: Sequence[Any],
        allow_parallel_tool_calls: bool = False,
        **kwargs: Any,
    ) -> ChatResponse:
        """Keep only the first tool call unless parallel calls are allowed."""
        if not allow_parallel_tool_calls:
            response.message = keep_first_tool_call(response.message)
        return response

    def get_tool_calls_from_response(
        self, response: ChatResponse, error_on_no_tool_call: bool = True, **kwargs: Any
    ) -> list[ToolSelection]:
        """The tool calls of a response (its ``ToolCallBlock`` s).

        Raises:
            ValueError: no tool call and ``error_on_no_tool_call``.
        """
        calls = tool_selections(response.message)
        if not calls and error_on_no_tool_call:
            raise ValueError(
                f"expected at least one tool call from {self.engine.package.name}, got none; "
                "force one with tool_required=True (or tool_choice=<name>)"
            )
        return calls

    # ------------------------------------------------------------------ structured output
    def _structured_messages(
        self, output_cls: type[Model], prompt: BasePromptTemplate, prompt_args: dict[str, Any]
    ) -> list[ChatMessage]:
        messages = self._get_messages(prompt, **prompt_args)
        schema = json.dumps(output_cls.model_json_schema(), separators=(",", ":"))
        hint = f"Answer with one JSON object that matches this JSON schema: {schema}"
        last = messages[-1] if messages else None
        if last is not None and last.role == MessageRole.USER:
            messages[-1] = last.model_copy(update={"blocks": [*last.blocks, TextBlock(text=hint)]})
        else:
            messages.append(ChatMessage(role=MessageRole.USER, content=hint))
        return messages

    def _structured_kwargs(self, output_cls: type[Model], llm_kwargs: dict[str, Any] | None) -> dict[str, Any]:
        kwargs = dict(llm_kwargs or {})
        for key in ("tool_choice", "tools", "tool_required"):
            kwargs.pop(key, None)
        budget = kwargs.get("max_new_tokens") or kwargs.get("max_tokens") or self._num_output()
        kwargs["guidance"] = json_schema_guidance(output_cls.model_json_schema(), budget)
        return kwargs

    @dispatcher.span
    def structured_predict(
        self,
        output_cls: type[Model],
        prompt: PromptTemplate,
        llm_kwargs: dict[str, Any] | None = None,
        **prompt_args: Any,
    ) -> Model:
        """A pydantic object, generated under a JSON-schema grammar bounded by the token budget.

        With ``pydantic_program_mode`` other than DEFAULT, LlamaIndex's own programs are used.
        """
        if self.pydantic_program_mode != PydanticProgramMode.DEFAULT:
            own: Model = super().structured_predict(output_cls, prompt, llm_kwargs, **prompt_args)
            return own
        dispatcher.event(
            LLMStructuredPredictStartEvent(output_cls=output_cls, template=prompt, template_args=prompt_args)
        )
        messages = self._structured_messages(output_cls, prompt, prompt_args)
        response = self.chat(messages, **self._structured_kwargs(output_cls, llm_kwargs))
        result = _parse(output_cls, response)
        dispatcher.event(LLMStructuredPredictEndEvent(output=result))
        return result

    @dispatcher.span
    async def astructured_predict(
        self,
        output_cls: type[Model],
        prompt: PromptTemplate,
        llm_kwargs: dict[str, Any] | None = None,
        **prompt_args: Any,
    ) -> Model:
        """Async twin of :meth:`structured_predict`."""
        if self.pydantic_program_mode != PydanticProgramMode.DEFAULT:
            own: Model = await super().astructured_predict(output_cls, prompt, llm_kwargs, **prompt_args)
            return own
        dispatcher.event(
            LLMStructuredPredictStartEvent(output_cls=output_cls, template=prompt, template_args=prompt_args)
        )
        messages = self._structured_messages(output_cls, prompt, prompt_args)
        response = await self.achat(messages, **self._structured_kwargs(output_cls, llm_kwargs))
        result = _parse(output_cls, response)
        dispatcher.event(LLMStructuredPredictEndEvent(output=result))
        return result

    def _structured_stream_call(
        self,
        output_cls: type[Model],
        prompt: PromptTemplate,
        llm_kwargs: dict[str, Any] | None = None,
        **prompt_args: Any,
    ) -> Any:
        """Partial objects while the JSON streams in, then the validated object."""
        if self.pydantic_program_mode != PydanticProgramMode.DEFAULT:
            return super()._structured_stream_call(output_cls, prompt, llm_kwargs, **prompt_args)
        messages = self._structured_messages(output_cls, prompt, prompt_args)
        responses = self.stream_chat(messages, **self._structured_kwargs(output_cls, llm_kwargs))

        def gen() -> Iterator[Any]:
            current: Any = None
            last: ChatResponse | None = None
            for response in responses:
                last = response
                update = process_streaming_content_incremental(response, output_cls, current)
                if update != current:
                    current = update
                    yield current
            assert last is not None
            final = _parse(output_cls, last)
            if final != current:
                yield final

        return gen()

    async def _structured_astream_call(
        self,
        output_cls: type[Model],
        prompt: PromptTemplate,
        llm_kwargs: dict[str, Any] | None = None,
        **prompt_args: Any,
    ) -> Any:
        """Async twin of :meth:`_structured_stream_call`."""
        if self.pydantic_program_mode != PydanticProgramMode.DEFAULT:
            return await super()._structured_astream_call(output_cls, prompt, llm_kwargs, **prompt_args)
        messages = self._structured_messages(output_cls, prompt, prompt_args)
        responses = await self.astream_chat(messages, **self._structured_kwargs(output_cls, llm_kwargs))

        async def gen() -> AsyncIterator[Any]:
            current: Any = None
            last: ChatResponse | None = None
            async for response in responses:
                last = response
                update = process_streaming_content_incremental(response, output_cls, current)
                if update != current:
                    current = update
                    yield current
            assert last is not None
            final = _parse(output_cls, last)
            if final != current:
                yield final

        return gen()


# ---------------------------------------------------------------------- helpers
def _checked_fields(cls: type[RyzenAILLM], data: Mapping[str, Any]) -> dict[str, Any]:
    """Constructor (or ``model_copy`` update) fields with aliases resolved; unknown names refused.

    ``class_name`` (added by ``to_dict`` / ``model_dump``) is dropped when it names this class.

    Raises:
        ValueError: an unknown field (with the closest accepted names), another class's
            ``class_name``, or an alias and its field given different values.
    """
    fields = dict(data)
    if "class_name" in fields:
        if fields["class_name"] != cls.class_name():
            raise ValueError(
                f"class_name={fields['class_name']!r}: these fields describe another LLM, not {cls.class_name()}; "
                f"load them with that class (or llama_index.core.llms.loading.load_llm)"
            )
        del fields["class_name"]
    for alias, name in _FIELD_ALIASES.items():
        if alias in fields:
            value = fields.pop(alias)
            if name in fields and fields[name] != value:
                raise ValueError(
                    f"{alias}={value!r} and {name}={fields[name]!r} disagree ({alias} is another name for "
                    f"{name}); pass only {name}"
                )
            fields[name] = value
    accepted = sorted(cls.model_fields)
    unknown = [key for key in fields if key not in cls.model_fields]
    if unknown:
        named = []
        for key in unknown:
            close = difflib.get_close_matches(str(key), [*accepted, *_FIELD_ALIASES], n=2, cutoff=0.6)
            hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
            named.append(f"{key!r}{hint}")
        raise ValueError(
            f"{cls.__name__} got unknown field(s) {', '.join(named)}; accepted fields: {', '.join(accepted)} "
            f"(and {', '.join(f'{a} for {n}' for a, n in _FIELD_ALIASES.items())})"
        )
    return fields


def _tool_spec(tool: Any) -> dict[str, Any]:
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


def _forced_tool(choice: Any) -> tuple[bool, str | None]:
    """(forced, tool name) for a ``tool_choice`` value."""
    if choice is None or choice in ("auto", "none"):
        return False, None
    if choice in _FORCED:
        return True, None
    if isinstance(choice, str):
        return True, choice
    if isinstance(choice, dict):
        fn = choice.get("function", choice)
        name = fn.get("name") if isinstance(fn, dict) else None
        if isinstance(name, str) and name:
            return True, name
    raise InvalidRequestError(
        f"tool_choice {choice!r} is not understood; use 'auto', 'none', 'required', a tool name, or "
        "{'type': 'function', 'function': {'name': ...}}"
    )


def _last(responses: ChatResponseGen) -> ChatResponse:
    last: ChatResponse | None = None
    try:
        for response in responses:
            last = response
    finally:
        responses.close()
    if last is None:  # pragma: no cover - the core always sends a final chunk
        raise InvalidRequestError("the generation ended without an answer")
    return last


async def _alast(responses: ChatResponseAsyncGen) -> ChatResponse:
    last: ChatResponse | None = None
    try:
        async for response in responses:
            last = response
    finally:
        await responses.aclose()
    if last is None:  # pragma: no cover - the core always sends a final chunk
        raise InvalidRequestError("the generation ended without an answer")
    return last


def _parse(output_cls: type[Model], response: ChatResponse) -> Model:
    text = response.message.content or ""
    try:
        return output_cls.model_validate_json(text)
    except ValueError as exc:
        raise ValueError(
            f"the model's answer is not a valid {output_cls.__name__} ({exc}); the answer was {text[:200]!r}. "
            "Raise max_new_tokens if it was cut off."
        ) from exc
