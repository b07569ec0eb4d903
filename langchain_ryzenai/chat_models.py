"""LangChain chat model on Ryzen AI model packages: :class:`ChatRyzenAI`.

The face maps LangChain's vocabulary onto the core's :class:`~ryzenai_core.Request` and the
core's chunks back; every decision about the call (template, tools, forced calls and response
formats as grammars, budgets, thinking, retries, timeouts) is the core's::

    LangChain messages ──► to_core_messages() ─────────┐
    fields + call kwargs + model_kwargs ──► _options ──┴─► Request(messages, GenerationOptions)
        tools, tool_choice, response_format, chat_template, sampling, limits as typed options
    Engine.run / Engine.arun (worker process by default) ──► core Chunk
        ──► generation_chunk() ──► ChatGenerationChunk(AIMessageChunk)
              text      -> content
              reasoning -> additional_kwargs["reasoning_content"]
              last      -> tool_call_chunks, usage_metadata, response_metadata, chunk_position="last"

``_generate`` / ``_agenerate`` are aggregates of ``_stream`` / ``_astream``: there is one
code path.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any, ClassVar, Literal, cast

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.base import LangSmithParams
from langchain_core.language_models.chat_models import agenerate_from_stream, generate_from_stream
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.output_parsers import JsonOutputKeyToolsParser, PydanticToolsParser
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableMap, RunnablePassthrough
from langchain_core.runnables.config import run_in_executor
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_json_schema, convert_to_openai_tool
from langchain_core.utils.pydantic import is_basemodel_subclass
from pydantic import AliasChoices, ConfigDict, Field, SecretStr, field_validator, model_validator
from typing_extensions import Self

from ryzenai_core.errors import InvalidRequestError
from ryzenai_core.faces import LLMSettings, ModelName
from ryzenai_core.options import validated_options
from ryzenai_core.request import Request

from ._convert import PROVIDER, generation_chunk, to_core_messages
from ._options import FACE_KEYWORDS, OPTION_NAMES, call_arguments, init_kwargs, named_model
from ._parsers import StrictJsonOutputParser
from ._profile import PackageProfile
from ._shared import PublicSerialization

if TYPE_CHECKING:
    from langchain_core.language_models import ModelProfile
    from langchain_core.load.serializable import SerializedConstructor, SerializedNotImplemented

    from ryzenai_core.engine.engine import Engine
    from ryzenai_core.options import GenerationOptions

__all__ = ["ChatRyzenAI"]

logger = logging.getLogger(__name__)

ToolChoice = str | bool | dict[str, Any] | None

#: langchain-core 1.1 and 1.2 have ``profile`` but do not call ``_resolve_model_profile`` (1.3 does).
_PROFILE_WITHOUT_HOOK = "profile" in BaseChatModel.model_fields and not hasattr(BaseChatModel, "_resolve_model_profile")


# ---------------------------------------------------------------------- the chat model
class ChatRyzenAI(PublicSerialization, BaseChatModel, LLMSettings):
    """Chat model on an AMD Ryzen AI model package (ONNX Runtime GenAI), for LangChain.

    Runs the package's own chat template and tokenizer, knows its context budget (prompt
    limit, prefill buckets, window), and streams from a worker process so the caller's
    event loop stays responsive. Building the model object reads and starts nothing: the
    worker process starts and the model loads on the first call.

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
        enable_thinking: Qwen3-style reasoning on/off (also ``reasoning=True``/``False``, as ChatOllama
            takes it; None: template default).
        reasoning_effort: ``"none"`` turns reasoning off; ``"low"``, ``"medium"``, ``"high"`` go to a
            template with levels (gpt-oss's) and are refused by one with on/off only (Qwen3's).
            ``reasoning="high"`` names it too.
        adapters, adapter: LoRA adapters a call may choose by name (``{"sql": "sql.onnx_adapter"}``),
            and the one a call runs with unless it chooses another (None: the base model). Per call:
            ``llm.bind(adapter="sql")`` or ``invoke(msgs, adapter="sql")``; ``response_metadata["adapter"]``
            names the one that ran. See docs/adapters.md.
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
    option_names: ClassVar[Mapping[str, str]] = OPTION_NAMES
    framework_keywords: ClassVar[tuple[str, ...]] = FACE_KEYWORDS

    # The settings both faces share (runtime, sampling, limits, retries) are LLMSettings'; the
    # ones below are LangChain's names (model_name, max_tokens, reasoning) and this face's own.
    model: ModelName = Field(
        alias="model_name",
        min_length=1,
        description="model package folder, Hugging Face repository id or embedded model name",
    )
    max_tokens: int | None = Field(None, ge=1, description="new tokens at most; None = the package's default")
    stop: list[str] | None = Field(None, description="strings that end the answer (one string or a list)")
    enable_thinking: bool | None = Field(
        None,
        validation_alias=AliasChoices("enable_thinking", "reasoning"),
        description="Qwen3-style reasoning on/off; None = the template's default",
    )
    model_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="generation options by name (max_tokens, temperature, stop, ...; also max_new_tokens, "
        "random_seed, stop_sequences), which are honoured as if given directly, and extra chat-template variables; "
        "options ChatRyzenAI does not have (max_length, num_beams, presence_penalty, ...) are refused",
    )
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
        super().__init__(**init_kwargs(type(self), kwargs))

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [value]
        if isinstance(value, list) and any(s == "" for s in value):
            raise ValueError(f"stop strings must be non-empty, got {value!r}")
        return value

    # ------------------------------------------------------------------ LangChain identity
    def _resolve_model_profile(self) -> ModelProfile | None:
        """The package's limits and features as LangChain's ``profile``, read from its files when first used.

        ``max_input_tokens`` is the prompt limit of the Ryzen AI release the package is planned
        for (``release``, else the folder name, else the installed runtime). A package that cannot
        be read yet has an empty profile (see :class:`~langchain_ryzenai._profile.PackageProfile`).
        """
        return cast("ModelProfile", PackageProfile(self.model, self.release, self.chat_template))

    @model_validator(mode="after")
    def _profile_on_older_cores(self) -> Self:
        if _PROFILE_WITHOUT_HOOK and self.profile is None:
            self.profile = self._resolve_model_profile()
        return self

    @model_validator(mode="after")
    def _check_profile_keys(self) -> Self:
        """LangChain's check of a given profile's keys (its validator of this name would read the package's now)."""
        check = getattr(BaseChatModel, "_check_profile_keys", None)
        if check is not None and not isinstance(self.profile, PackageProfile):
            check(self)
        return self

    @property
    def lc_secrets(self) -> dict[str, str]:
        """``api_key`` is serialized as a reference to ``RYZENAI_API_KEY``, never as its value."""
        return {"api_key": "RYZENAI_API_KEY"}

    def to_json(self) -> SerializedConstructor | SerializedNotImplemented:
        """LangChain's serialization (``dumps``, and every call's run, which serializes the model once).

        ``profile`` is left out of it (LangChain's field), so one not read yet is not read for it:
        LangChain asks each field's truth value before it leaves the excluded ones out.
        """
        if isinstance(self.profile, PackageProfile) and not self.profile.filled:
            return self.model_copy(update={"profile": None}).to_json()
        return super().to_json()

    @property
    def _llm_type(self) -> str:
        return "ryzenai-chat"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "provider": self.provider,
            "execution": self.execution,
            "session_options": self.session_options,
            "release": self.release,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "repetition_penalty": self.repetition_penalty,
            "seed": self.seed,
            "stop": self.stop,
            "enable_thinking": self.enable_thinking,
            "reasoning_effort": self.reasoning_effort,
            "kv_reuse": self.kv_reuse,
            "overflow": self.overflow,
            "model_kwargs": self.model_kwargs,
            "chat_template": self.chat_template,
            "adapters": self.adapters,
            "adapter": self.adapter,
        }

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        try:
            options, own = self._call(stop, kwargs)
        except InvalidRequestError:  # the call itself raises it
            options, own = {}, {}
        params = LangSmithParams(ls_provider=PROVIDER, ls_model_name=self._requested(own), ls_model_type="chat")
        temperature = options.get("temperature", self.temperature)
        if temperature is not None:
            params["ls_temperature"] = temperature
        max_tokens = options.get("max_new_tokens", self.max_tokens)
        if max_tokens is not None:
            params["ls_max_tokens"] = max_tokens
        stops = options.get("stop", self.stop)
        if stops:
            params["ls_stop"] = [stops] if isinstance(stops, str) else list(stops)
        return params

    # ------------------------------------------------------------------ engine and options
    @property
    def engine(self) -> Engine:
        """The shared :class:`~ryzenai_core.engine.engine.Engine` of this model (the model loads on first use)."""
        return self.open_engine()

    def _requested(self, kwargs: Mapping[str, Any]) -> str:
        """The model of a call as the caller named it (per-call ``model``/``model_name``, else the field)."""
        return named_model(kwargs.get("model") or kwargs.get("model_name") or self.model)

    def _call(self, stop: list[str] | None, kwargs: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(options, own)`` of one call: its options by the core's names, and its ``model`` / ``timeout``.

        A generation option in ``model_kwargs`` counts as if given by keyword; the field's
        ``model_kwargs`` (what construction left in it: template variables and call options
        such as ``tools``) give defaults below the call's (see :func:`._options.call_arguments`).

        Raises:
            InvalidRequestError: an unknown keyword; an option given twice in one call; an option
                ChatRyzenAI does not have, or one that is set when ChatRyzenAI is created.
        """
        fixed = set(type(self).model_fields) - set(BaseChatModel.model_fields) - {"model_kwargs"}
        call = self.call_options(kwargs if stop is None else {**kwargs, "stop": stop})
        options, own = call_arguments(call, self.model_kwargs, fixed)
        if "tools" in options:
            options["tools"] = [convert_to_openai_tool(t) for t in options["tools"]]
        return options, own

    def _options(self, options: Mapping[str, Any]) -> GenerationOptions:
        """The core options of one call: the call's (by the core's names) over the fields."""
        return self.generation_options({"max_new_tokens": self.max_tokens, "stop": self.stop}, options)

    def _request(
        self, messages: Sequence[BaseMessage], stop: list[str] | None, kwargs: Mapping[str, Any]
    ) -> tuple[Engine, Request, str]:
        """The engine, the core request and the model's name of one call (no generation yet).

        Raises:
            InvalidRequestError: an unknown keyword, bad options, messages or tools.
        """
        options, own = self._call(stop, kwargs)
        model_name = self._requested(own)
        timeout = own.get("timeout", self.timeout)
        request = self.core_request(to_core_messages(messages), self._options(options), timeout)
        return self.open_engine(model_name), request, model_name

    # ------------------------------------------------------------------ the one stream
    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        engine, request, name = self._request(messages, stop, kwargs)
        for chunk in engine.run(request):
            out = generation_chunk(chunk, name)
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
        engine, request, name = await run_in_executor(None, self._request, messages, stop, kwargs)
        async for chunk in engine.arun(request):
            out = generation_chunk(chunk, name)
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
        return [int(i) for i in self.engine.encode(text)]

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
        options, _ = self._call(None, {} if tools is None else {"tools": tools})
        return int(self.engine.count_tokens(to_core_messages(converted), self._options(options)))

    # ------------------------------------------------------------------ tools and structured output
    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: ToolChoice = None,
        strict: bool | None = None,
        parallel_tool_calls: bool | None = None,
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
            parallel_tool_calls: False: an answer holds one tool call at most (the first);
                True: several, refused (when called) where the template renders one call per
                assistant message (Llama 3.2); None: as many as the template renders back.
            **kwargs: more call options (any keyword a call takes).

        Raises:
            InvalidRequestError: ``tool_choice`` names a tool that is not bound.
        """
        formatted = [convert_to_openai_tool(t, strict=strict) for t in tools]
        # a tool name that is not bound, or a parallel_tool_calls that is not a bool, fails here
        validated_options(tools=formatted, tool_choice=tool_choice, parallel_tool_calls=parallel_tool_calls)
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        if parallel_tool_calls is not None:
            kwargs["parallel_tool_calls"] = parallel_tool_calls
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
            if method == "json_schema":  # a pydantic class by its own schema, as in every face
                own = getattr(schema, "model_json_schema", None) if is_pydantic else None
                json_schema = own() if callable(own) else convert_to_json_schema(schema)
                response_format: dict[str, Any] = {"type": "json_schema", "schema": json_schema}
            else:
                response_format = {"type": "json_object"}
                ls_format["kwargs"] = {"method": method}
            llm = self.bind(response_format=response_format, ls_structured_output_format=ls_format)
            parser = StrictJsonOutputParser(pydantic_object=schema if is_pydantic else None)
        else:
            raise ValueError(
                f"method {method!r} is not supported; use 'json_schema', 'function_calling' or 'json_mode'"
            )
        if not include_raw:
            return llm | parser
        parsed = RunnablePassthrough.assign(parsed=itemgetter("raw") | parser, parsing_error=lambda _: None)
        fallback = RunnablePassthrough.assign(parsed=lambda _: None)
        return RunnableMap(raw=llm) | parsed.with_fallbacks([fallback], exception_key="parsing_error")
