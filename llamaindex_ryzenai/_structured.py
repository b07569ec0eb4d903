"""Structured output of RyzenAILLM: JSON-schema grammars through the core, LlamaIndex's events around them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, ChatResponse
from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined]
from llama_index.core.instrumentation.events.llm import LLMStructuredPredictEndEvent, LLMStructuredPredictStartEvent
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.program.streaming_utils import process_streaming_content_incremental
from llama_index.core.prompts import BasePromptTemplate, PromptTemplate
from llama_index.core.types import Model, PydanticProgramMode

__all__ = ["StructuredOutput"]

dispatcher = get_dispatcher("llamaindex_ryzenai.llms")

#: What LlamaIndex's structured calls pass down to the LLM's chat call (``llm_kwargs``).
_LLMKwargs = dict[str, Any] | None


class StructuredOutput(FunctionCallingLLM):
    """``structured_predict`` and its stream/async forms, generated under a JSON-schema grammar.

    The schema goes to the core as the call's ``response_format``; the core says it in the
    prompt and bounds it so the JSON closes within the output budget. With
    ``pydantic_program_mode`` other than DEFAULT, LlamaIndex's own programs are used.
    """

    def _structured_messages(
        self, output_cls: type[Model], prompt: BasePromptTemplate, prompt_args: dict[str, Any]
    ) -> list[ChatMessage]:
        """The prompt's messages; the core adds the schema to the prompt (see ``ryzenai_core.request.instructed``)."""
        return list(self._get_messages(prompt, **prompt_args))

    def _structured_kwargs(self, output_cls: type[Model], llm_kwargs: _LLMKwargs) -> dict[str, Any]:
        kwargs = dict(llm_kwargs or {})
        for key in ("tool_choice", "tools", "tool_required"):
            kwargs.pop(key, None)
        kwargs["response_format"] = {"type": "json_schema", "schema": output_cls.model_json_schema()}
        return kwargs

    def _structured_call(
        self, output_cls: type[Model], prompt: BasePromptTemplate, llm_kwargs: Any, prompt_args: dict[str, Any]
    ) -> tuple[list[ChatMessage], dict[str, Any]]:
        """The chat messages and kwargs of a structured call (its start event sent)."""
        dispatcher.event(
            LLMStructuredPredictStartEvent(output_cls=output_cls, template=prompt, template_args=prompt_args)
        )
        return self._structured_messages(output_cls, prompt, prompt_args), self._structured_kwargs(
            output_cls, llm_kwargs
        )

    @staticmethod
    def _structured_result(output_cls: type[Model], response: ChatResponse) -> Model:
        result = _parse(output_cls, response)
        dispatcher.event(LLMStructuredPredictEndEvent(output=result))
        return result

    @dispatcher.span
    def structured_predict(
        self, output_cls: type[Model], prompt: PromptTemplate, llm_kwargs: _LLMKwargs = None, **prompt_args: Any
    ) -> Model:
        """A pydantic object, generated under a JSON-schema grammar bounded by the token budget.

        With ``pydantic_program_mode`` other than DEFAULT, LlamaIndex's own programs are used.
        """
        if self.pydantic_program_mode != PydanticProgramMode.DEFAULT:
            own: Model = super().structured_predict(output_cls, prompt, llm_kwargs, **prompt_args)
            return own
        messages, kwargs = self._structured_call(output_cls, prompt, llm_kwargs, prompt_args)
        return self._structured_result(output_cls, self.chat(messages, **kwargs))

    @dispatcher.span
    async def astructured_predict(
        self, output_cls: type[Model], prompt: PromptTemplate, llm_kwargs: _LLMKwargs = None, **prompt_args: Any
    ) -> Model:
        """Async twin of :meth:`structured_predict`."""
        if self.pydantic_program_mode != PydanticProgramMode.DEFAULT:
            own: Model = await super().astructured_predict(output_cls, prompt, llm_kwargs, **prompt_args)
            return own
        messages, kwargs = self._structured_call(output_cls, prompt, llm_kwargs, prompt_args)
        return self._structured_result(output_cls, await self.achat(messages, **kwargs))

    def _structured_stream_call(
        self, output_cls: type[Model], prompt: PromptTemplate, llm_kwargs: _LLMKwargs = None, **prompt_args: Any
    ) -> Any:
        """Partial objects while the JSON streams in, then the validated object."""
        if self.pydantic_program_mode != PydanticProgramMode.DEFAULT:
            return super()._structured_stream_call(output_cls, prompt, llm_kwargs, **prompt_args)
        messages = self._structured_messages(output_cls, prompt, prompt_args)
        responses = self.stream_chat(messages, **self._structured_kwargs(output_cls, llm_kwargs))

        def gen() -> Iterator[Any]:
            partials = _Partials(output_cls)
            for response in responses:
                yield from partials.add(response)
            yield from partials.finish()

        return gen()

    async def _structured_astream_call(
        self, output_cls: type[Model], prompt: PromptTemplate, llm_kwargs: _LLMKwargs = None, **prompt_args: Any
    ) -> Any:
        """Async twin of :meth:`_structured_stream_call`."""
        if self.pydantic_program_mode != PydanticProgramMode.DEFAULT:
            return await super()._structured_astream_call(output_cls, prompt, llm_kwargs, **prompt_args)
        messages = self._structured_messages(output_cls, prompt, prompt_args)
        responses = await self.astream_chat(messages, **self._structured_kwargs(output_cls, llm_kwargs))

        async def gen() -> AsyncIterator[Any]:
            partials = _Partials(output_cls)
            async for response in responses:
                for update in partials.add(response):
                    yield update
            for final in partials.finish():
                yield final

        return gen()


class _Partials:
    """The objects a structured stream yields: each new partial object, then the validated one."""

    def __init__(self, output_cls: type[Model]) -> None:
        self._cls = output_cls
        self._current: Any = None
        self._last: ChatResponse | None = None

    def add(self, response: ChatResponse) -> list[Any]:
        """The new partial object this response makes, if any."""
        self._last = response
        update = process_streaming_content_incremental(response, self._cls, self._current)
        if update == self._current:
            return []
        self._current = update
        return [update]

    def finish(self) -> list[Any]:
        """The validated object, unless the last partial one was it already."""
        assert self._last is not None
        final = _parse(self._cls, self._last)
        return [] if final == self._current else [final]


def _parse(output_cls: type[Model], response: ChatResponse) -> Model:
    text = response.message.content or ""
    try:
        return output_cls.model_validate_json(text)
    except ValueError as exc:
        raise ValueError(
            f"the model's answer is not a valid {output_cls.__name__} ({exc}); the answer was {text[:200]!r}. "
            "Raise max_new_tokens if it was cut off."
        ) from exc
