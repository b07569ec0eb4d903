"""RyzenAILLM on real OGA and the fixture models: cancellation, the event loop, agents, structured output.

Construction, metadata, chat/complete in every form, events, prompt overrides, reasoning, message
conversion and tools are tested on the fake engine in tests/unit/test_ryzenai_llm.py."""

from __future__ import annotations

import asyncio

import llama_index.core
import pytest
from llama_index.core.agent.workflow import AgentStream, FunctionAgent, ToolCallResult
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events.llm import LLMChatEndEvent, LLMStructuredPredictEndEvent
from llama_index.core.prompts import PromptTemplate
from llama_index.core.tools import FunctionTool
from pydantic import BaseModel, Field

from conftest import LONG_PROMPT, TINY_LLAMA, TINY_QWEN3, longest_loop_gap
from llamaindex_ryzenai import RyzenAILLM

USER = [ChatMessage(role="system", content="You are terse."), ChatMessage(role="user", content="Name a colour.")]


class Recorder(BaseEventHandler):
    """Collects LlamaIndex instrumentation events."""

    events: list = []

    @classmethod
    def class_name(cls) -> str:
        return "Recorder"

    def handle(self, event, **kwargs) -> None:
        self.events.append(event)

    def names(self) -> list[str]:
        return [type(e).__name__ for e in self.events]


pytestmark = pytest.mark.usefixtures("llamaindex_event_loop")


@pytest.fixture(autouse=True)
def _fresh_settings(monkeypatch):
    """Every test starts with LlamaIndex's default tokenizer."""
    monkeypatch.setattr(llama_index.core, "global_tokenizer", None)


@pytest.fixture
def recorder():
    dispatcher = get_dispatcher()
    handler = Recorder(events=[])
    dispatcher.add_event_handler(handler)
    yield handler
    dispatcher.event_handlers.remove(handler)


@pytest.fixture(scope="module")
def qwen():
    # these fixtures keep LlamaIndex's default tokenizer (the scaled context_window is under test)
    return RyzenAILLM(
        model=str(TINY_QWEN3), max_new_tokens=12, temperature=0, execution="process", use_package_tokenizer=False
    )


@pytest.fixture(scope="module")
def llama():
    return RyzenAILLM(
        model=str(TINY_LLAMA), max_new_tokens=12, temperature=0, execution="process", use_package_tokenizer=False
    )


def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


TOOLS = [FunctionTool.from_defaults(multiply), FunctionTool.from_defaults(add)]


class Album(BaseModel):
    """A music album."""

    name: str = Field(description="the album's title")
    year: int = Field(description="release year")


# ---------------------------------------------------------------------- cancellation and the event loop
def test_closing_a_stream_early_frees_the_model(qwen):
    long = RyzenAILLM(model=str(TINY_QWEN3), max_new_tokens=400, temperature=0)
    gen = long.stream_chat(USER)
    next(gen)
    gen.close()
    assert qwen.chat(USER).additional_kwargs["completion_tokens"] == 12


@pytest.mark.parametrize("face", ["astream_chat", "achat"])
def test_async_calls_keep_the_event_loop_free(face):
    """A long prefill stalls the loop inline (the documented cost) and not in process mode.

    Both modes run in the same test: the inline stall is the yardstick that shows the prompt is
    long enough to see one, and process mode must keep the longest gap between ticks far below it.
    """
    messages = [ChatMessage(role="user", content=LONG_PROMPT)]

    async def run(llm: RyzenAILLM) -> tuple[float, list]:
        await llm.achat(USER)  # the model is loaded (and the worker started): only the call is timed
        if face == "astream_chat":
            return await longest_loop_gap(await llm.astream_chat(messages))
        return await longest_loop_gap(llm.achat(messages))

    gaps = {}
    for execution in ("inline", "process"):
        llm = RyzenAILLM(model=str(TINY_QWEN3), max_new_tokens=4, temperature=0, kv_reuse=False, execution=execution)
        prompt_tokens = llm.count_tokens(messages)
        assert 3500 < prompt_tokens <= llm.budget.window - 4
        gaps[execution], out = asyncio.run(run(llm))
        usage = out[-1].raw["usage"]
        assert usage["prompt_tokens"] == prompt_tokens and usage["completion_tokens"] == 4
    assert gaps["inline"] > 0.05, gaps  # the prefill held the loop for 25 ticks or more
    assert gaps["process"] < gaps["inline"] / 4, gaps


# ---------------------------------------------------------------------- tools and agents


# llama-index-workflows runs inspect.getmembers() on the agent, which touches pydantic's
# deprecated `__fields__` / `model_computed_fields` instance properties: warnings from the
# framework, not from this package.
@pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecationWarning")
@pytest.mark.parametrize("which", ["qwen", "llama"])
@pytest.mark.parametrize("streaming", [False, True], ids=["plain", "streaming"])
def test_function_agent_with_two_tools(which, streaming, request):
    llm = request.getfixturevalue(which)
    llm = RyzenAILLM(model=llm.model, max_new_tokens=96, temperature=0, execution="process")
    agent = FunctionAgent(
        tools=TOOLS, llm=llm, initial_tool_choice="multiply", system_prompt="You are a calculator.", streaming=streaming
    )

    async def run():
        handler = agent.run("What is 6 times 7?")
        results, streams = [], 0
        async for ev in handler.stream_events():
            if isinstance(ev, ToolCallResult):
                results.append(ev)
            elif isinstance(ev, AgentStream):
                streams += 1
        return await handler, results, streams

    response, results, streams = asyncio.run(run())
    assert results and results[0].tool_name == "multiply"
    kwargs = results[0].tool_kwargs
    assert results[0].tool_output.content == str(kwargs["a"] * kwargs["b"])
    assert response.response.role == MessageRole.ASSISTANT
    assert (streams > 1) == streaming


# ---------------------------------------------------------------------- structured output
PROMPT = PromptTemplate("Invent an album about {topic}.")


@pytest.mark.parametrize("which", ["qwen", "llama"])
def test_structured_predict_sync_async_and_streaming(which, request, recorder):
    llm = RyzenAILLM(model=request.getfixturevalue(which).model, max_new_tokens=64, temperature=0)
    album = llm.structured_predict(Album, PROMPT, topic="cats")
    assert isinstance(album, Album)
    assert any(isinstance(e, LLMStructuredPredictEndEvent) for e in recorder.events)
    assert any(isinstance(e, LLMChatEndEvent) for e in recorder.events)  # the grammar-constrained chat
    assert asyncio.run(llm.astructured_predict(Album, PROMPT, topic="cats")) == album
    partials = list(llm.stream_structured_predict(Album, PROMPT, topic="cats"))
    assert partials[-1] == album and len(partials) > 1

    async def run():
        return [p async for p in await llm.astream_structured_predict(Album, PROMPT, topic="cats")]

    assert asyncio.run(run())[-1] == album


# StructuredLLM.stream_chat calls pydantic's deprecated `.json()` on the partial objects.
@pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecationWarning")
def test_as_structured_llm(qwen):
    llm = RyzenAILLM(model=qwen.model, max_new_tokens=64, temperature=0)
    sllm = llm.as_structured_llm(Album)
    response = sllm.chat([ChatMessage(role="user", content="Invent an album about dogs.")])
    assert isinstance(response.raw, Album)
    assert Album.model_validate_json(response.message.content) == response.raw
    last = list(sllm.stream_chat([ChatMessage(role="user", content="Invent an album about dogs.")]))[-1]
    assert last.raw == response.raw
