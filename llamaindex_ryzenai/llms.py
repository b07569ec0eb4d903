"""RyzenAILLM: a LlamaIndex ``FunctionCallingLLM`` over a Ryzen AI model package.

The face maps LlamaIndex's vocabulary onto the core's :class:`~ryzenai_core.Request` and the
core's chunks back; the core decides everything else (template, grammar, budget, thinking,
retries, timeouts)::

    chat / stream_chat / complete / ... (and async)   LlamaIndex's decorators fire its events
      -> _request: messages (or messages_to_prompt's text) and fields + call kwargs -> Request
      -> Engine.run / Engine.arun -> core chunks -> ResponseFold: a ChatResponse per chunk (streams),
         or the chunks folded and one ChatResponse (chat, complete and their async twins)

``metadata.context_window`` is what LlamaIndex's PromptHelper must see so that what it packs,
counted with ``Settings.tokenizer``, fits the package's real prompt limit: see
:meth:`RyzenAILLM.metadata`. When the application never set ``Settings.tokenizer``, the first
``metadata`` read sets it to the package's tokenizer (``use_package_tokenizer``), so counts
are exact. "Never set" includes the tiktoken default LlamaIndex installs by itself.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
from collections.abc import AsyncGenerator, Callable, Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

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
    LLMMetadata,
    MessageRole,
)
from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr, model_validator
from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined]
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.llm import ToolSelection, default_completion_to_prompt
from llama_index.core.utils import get_tokenizer
from typing_extensions import Self

from ryzenai_core.errors import ChatTemplateError, InvalidRequestError
from ryzenai_core.faces import LLMSettings
from ryzenai_core.messages import ChatMessage as CoreMessage
from ryzenai_core.messages import RawPrompt
from ryzenai_core.package.capabilities import Capabilities, capabilities
from ryzenai_core.package.packing import packing_limit
from ryzenai_core.request import Request

from ._convert import (
    ResponseFold,
    completion_messages,
    to_completion,
    to_core_messages,
    tool_selections,
    tool_spec,
)
from ._fields import checked_fields
from ._structured import StructuredOutput
from ._tokens import (
    RATIO_MARGIN,
    RATIOS,
    RATIOS_LOCK,
    PackageTokenizer,
    is_default_tokenizer,
    measure_ratio,
    tokenizer_owner,
)

if TYPE_CHECKING:  # the engine and the template machinery load when the model is first used
    from ryzenai_core.engine.engine import Engine
    from ryzenai_core.package.budget import ContextBudget
    from ryzenai_core.prompt.templates import ChatTemplate

__all__ = ["RyzenAILLM"]

dispatcher = get_dispatcher(__name__)

#: Below this much prompt room (Settings.tokenizer tokens) LlamaIndex's synthesizers struggle.
SMALL_ROOM = 1024

logger = logging.getLogger(__name__)

#: Private attributes that belong to the model package, shared by copies (never copied).
_SHARED_PRIVATE = ("_engine", "_tokenizer")


class RyzenAILLM(StructuredOutput, LLMSettings):
    """A Ryzen AI model package as a LlamaIndex LLM: query engines, chat engines, agents.

    Construction is cheap: nothing is read or loaded until the first call (or ``metadata``,
    which needs the tokenizer). The model runs in a worker process by default
    (``execution="process"``), shared with every adapter that names the same folder; that
    process starts with the first call.

    An unknown field is an error (with the closest accepted name); ``max_tokens``, the name
    LlamaIndex's OpenAI-style LLMs use, is accepted for ``max_new_tokens``. Copies
    (``copy.deepcopy``, ``model_copy``) share the loaded model.

    Example:
        >>> from llama_index.core import Settings
        >>> Settings.llm = RyzenAILLM(model="C:/models/Llama-3.2-1B_rai_1.8.0_npu_4K")
        >>> Settings.tokenizer = Settings.llm.tokenizer  # exact token counts (optional)
    """

    model_config = ConfigDict(extra="forbid")

    # The settings both faces share (model, runtime, sampling, limits, retries) are LLMSettings';
    # the ones below are LlamaIndex's names (max_new_tokens, template_vars) and this face's own.
    max_new_tokens: int | None = Field(
        None, ge=1, description="Output tokens per call (not prompt + output); None = the package's output budget."
    )
    stop: list[str] = Field(default_factory=list, description="Strings that end the output (never part of it).")
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
    _tokenizer: PackageTokenizer | None = PrivateAttr(default=None)
    _scaffold: dict[str, int] = PrivateAttr(default_factory=dict)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _warned: bool = PrivateAttr(default=False)

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        return checked_fields(cls, data) if isinstance(data, Mapping) else data

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
        checked = checked_fields(type(self), update) if update else None
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
        """The shared :class:`~ryzenai_core.engine.engine.Engine` (opened on first use, model loaded lazily)."""
        engine = self.open_engine()
        with self._lock:
            if engine is not self._engine:  # the first call, or a copy with another model, provider, ...
                self._tokenizer, self._scaffold = None, {}
                self._engine = engine
            return engine

    @property
    def budget(self) -> ContextBudget:
        """The package's real limits: window, prompt limit for the release, prefill buckets."""
        return self.engine.budget

    @property
    def capabilities(self) -> Capabilities:
        """What the package can do with this LLM's template: limits, images, tools, reasoning.

        The facts LangChain's ``ChatRyzenAI.profile`` reports, from the same core function;
        ``metadata`` is LlamaIndex's smaller view of them (it has no field for images or reasoning).
        """
        return capabilities(self.engine.package, self.template)

    @property
    def template(self) -> ChatTemplate:
        """The chat template messages are rendered with (the package's, or ``chat_template``)."""
        return self.engine.template_for(self.chat_template)

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
        n = int(budget.output_tokens(self.max_new_tokens))
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
            is_function_calling_model=self.capabilities.tools,
            model_name=self.model,  # as the caller named it: a path, a repository id or an embedded name
            system_role=MessageRole.SYSTEM,
        )

    def _adopt_tokenizer(self) -> None:
        """``Settings.tokenizer = self.tokenizer`` when the application has not chosen one."""
        if (
            not self.use_package_tokenizer
            or self.tokenizer_ratio is not None  # the caller asked for scaling
            or not is_default_tokenizer(llama_index.core.global_tokenizer)
        ):
            return
        tokenizer = self.tokenizer
        with RATIOS_LOCK:  # two LLMs racing: the first one wins, the other measures against it
            if is_default_tokenizer(llama_index.core.global_tokenizer):
                Settings.tokenizer = tokenizer
                logger.info(
                    "Settings.tokenizer was not set: LlamaIndex now counts with the tokenizer of %s "
                    "(use_package_tokenizer=False keeps tiktoken)",
                    self.engine.package.name,
                )

    def _prompt_room(self, num_output: int) -> int:
        """Package tokens left for what PromptHelper counts: the limit minus the template's own tokens."""
        return int(packing_limit(self.budget, num_output)) - self._scaffold_tokens()

    def _scaffold_tokens(self) -> int:
        """Tokens the chat template adds around an empty system + user turn (headers, BOS, ...)."""
        key = json.dumps(
            [
                self.chat_template,
                self.enable_thinking,
                self.reasoning_effort,
                self.template_vars,
                id(self.messages_to_prompt),
            ],
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
        owner = tokenizer_owner(current)
        if isinstance(owner, PackageTokenizer) and owner.path == self.engine.package.path:
            return 1.0
        if self.tokenizer_ratio is not None:
            return self.tokenizer_ratio
        key = (str(self.engine.package.path), id(current))
        with RATIOS_LOCK:
            hit = RATIOS.get(key)
        if hit is not None and hit[0] is current:
            return hit[1]
        ratio = measure_ratio(self.tokenizer, current) * RATIO_MARGIN
        with RATIOS_LOCK:
            RATIOS[key] = (current, ratio)
        return ratio

    # ------------------------------------------------------------------ requests
    def _custom_messages_to_prompt(self) -> bool:
        return self.messages_to_prompt is not generic_messages_to_prompt

    def _completion_to_prompt(self) -> Callable[[str], str] | None:
        """The application's completion_to_prompt, if it set one (LlamaIndex's default is none)."""
        custom = self.completion_to_prompt is not default_completion_to_prompt
        return self.completion_to_prompt if custom else None

    def _request(self, messages: Sequence[ChatMessage], kwargs: dict[str, Any], raw: str | None = None) -> Request:
        """The core request of one call: LlamaIndex messages and call kwargs over the fields.

        Raises:
            InvalidRequestError: an unknown keyword or a bad option value.
        """
        call = self.call_options(kwargs)  # the core's names, aliases (max_tokens, ...) and refusals
        timeout = call.pop("timeout", self.timeout)
        if "tools" in call:
            call["tools"] = [tool_spec(t) for t in call["tools"]]
        if raw is None and self._custom_messages_to_prompt():
            assert self.messages_to_prompt is not None
            raw = self.messages_to_prompt(messages)
        core: list[CoreMessage] | RawPrompt = RawPrompt(text=raw) if raw is not None else to_core_messages(messages)
        own = {"max_new_tokens": self.max_new_tokens, "stop": self.stop, "template_vars": self.template_vars}
        if self.max_new_tokens is None and "max_new_tokens" not in call and self.context_window is not None:
            own["max_new_tokens"] = self._num_output()  # the smaller window holds the output too
        return self.core_request(core, self.generation_options(own, call), timeout)

    def count_tokens(self, messages: str | Sequence[ChatMessage], **kwargs: Any) -> int:
        """Prompt tokens that ``chat(messages, **kwargs)`` (or ``complete(text)``) would send.

        Exact: the package's template and tokenizer (or ``messages_to_prompt`` /
        ``completion_to_prompt`` when given).
        """
        if isinstance(messages, str):
            msgs, raw = completion_messages(messages, False, None, self._completion_to_prompt())
            request = self._request(msgs, kwargs, raw)
        else:
            request = self._request(messages, kwargs)
        if isinstance(request.messages, RawPrompt):
            return len(self.engine.encode(request.messages.text or ""))
        return int(self.engine.count_tokens(request.messages, request.options))

    # ------------------------------------------------------------------ the one stream
    def _stream(
        self, messages: Sequence[ChatMessage], kwargs: dict[str, Any], raw: str | None = None, out: Any = None
    ) -> Generator[Any, None, None]:
        """The call's responses (``out(response)`` each, when given); closing it cancels the generation."""
        chunks, fold = self.engine.run(self._request(messages, kwargs, raw)), ResponseFold(self.model)

        def gen() -> Generator[Any, None, None]:
            with contextlib.closing(chunks):
                for chunk in chunks:
                    if (response := fold.add(chunk)) is not None:
                        yield response if out is None else out(response)

        return gen()

    def _astream(
        self, messages: Sequence[ChatMessage], kwargs: dict[str, Any], raw: str | None = None, out: Any = None
    ) -> AsyncGenerator[Any, None]:
        """Async twin of :meth:`_stream`."""
        chunks, fold = self.engine.arun(self._request(messages, kwargs, raw)), ResponseFold(self.model)

        async def gen() -> AsyncGenerator[Any, None]:
            async with contextlib.aclosing(chunks):
                async for chunk in chunks:
                    if (response := fold.add(chunk)) is not None:
                        yield response if out is None else out(response)

        return gen()

    # ------------------------------------------------------------------ chat
    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """The whole answer (one response, built once the answer is complete)."""
        return ResponseFold(self.model).whole(self.engine.run(self._request(messages, kwargs)))

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        """Stream the answer; closing the generator cancels the generation."""
        return self._stream(messages, kwargs)

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """Async twin of :meth:`chat`; never blocks the event loop in ``process`` execution."""
        return await ResponseFold(self.model).awhole(self.engine.arun(self._request(messages, kwargs)))

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
        messages, raw = completion_messages(prompt, formatted, image_documents, self._completion_to_prompt())
        return to_completion(ResponseFold(self.model).whole(self.engine.run(self._request(messages, kwargs, raw))))

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, image_documents: Sequence[Any] | None = None, **kwargs: Any
    ) -> CompletionResponseGen:
        """Stream a completion (see :meth:`complete`)."""
        messages, raw = completion_messages(prompt, formatted, image_documents, self._completion_to_prompt())
        return self._stream(messages, kwargs, raw, to_completion)

    @llm_completion_callback()
    async def acomplete(
        self, prompt: str, formatted: bool = False, image_documents: Sequence[Any] | None = None, **kwargs: Any
    ) -> CompletionResponse:
        """Async twin of :meth:`complete`."""
        messages, raw = completion_messages(prompt, formatted, image_documents, self._completion_to_prompt())
        fold = ResponseFold(self.model)
        return to_completion(await fold.awhole(self.engine.arun(self._request(messages, kwargs, raw))))

    @llm_completion_callback()
    async def astream_complete(
        self, prompt: str, formatted: bool = False, image_documents: Sequence[Any] | None = None, **kwargs: Any
    ) -> CompletionResponseAsyncGen:
        """Async twin of :meth:`stream_complete`."""
        messages, raw = completion_messages(prompt, formatted, image_documents, self._completion_to_prompt())
        return self._astream(messages, kwargs, raw, to_completion)

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

        ``allow_parallel_tool_calls=False`` keeps the first call of an answer (streamed or not);
        True lets an answer hold as many calls as the template renders back in the history:
        one where it renders one call per assistant turn (Llama 3.2), so an agent's next turn
        always renders.
        """
        messages = list(chat_history or [])
        if user_msg is not None:
            messages.append(
                ChatMessage(role=MessageRole.USER, content=user_msg) if isinstance(user_msg, str) else user_msg
            )
        if tool_choice is None and tool_required:
            tool_choice = "required"
        kwargs.setdefault("parallel_tool_calls", None if allow_parallel_tool_calls else False)
        return {"messages": messages, "tools": [tool_spec(t) for t in tools], "tool_choice": tool_choice, **kwargs}

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
