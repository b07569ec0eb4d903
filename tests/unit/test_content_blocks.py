"""Reasoning, text and tool calls in the frameworks' newest shapes, on the fake engine (tests/fake_engine.py).

LangChain: ``output_version="v1"`` puts standard content blocks in ``content`` (reasoning,
text, tool_call), invoked and streamed, sync and async; ``stream_events(version="v3")``
gives content-block events in the order the model wrote them. LlamaIndex: a ``ThinkingBlock``
in the message, ``thinking_delta`` on each streamed response, which ``FunctionAgent`` turns
into ``AgentStream.thinking_delta`` and keeps in its memory for the next turn.

The fake engine writes what the script says (``<think>`` first, then an answer or a Qwen3
``<tool_call>``) on tiny Qwen3's template and tokenizer, and the core splits it as it would a real
model's output (tests/integration/test_fake_contract.py shows the chunks are a model's).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core._api import LangChainBetaWarning
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage
from langchain_core.tools import tool
from llama_index.core.agent.workflow import AgentStream, FunctionAgent, ToolCallResult
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ThinkingBlock, ToolCallBlock
from llama_index.core.tools import FunctionTool

from conftest import TINY_QWEN3
from langchain_ryzenai import ChatRyzenAI
from langchain_ryzenai._convert import to_core_messages
from llamaindex_ryzenai import RyzenAILLM
from ryzenai_core import Engine

QWEN = str(TINY_QWEN3)
THINK = "<think>\nstep one\n</think>\n\nfour"
CALL = '<tool_call>\n{"name": "magic_function", "arguments": {"x": 3}}\n</tool_call>'
THINK_THEN_CALL = "<think>\nuse the tool\n</think>\n\n" + CALL

pytestmark = pytest.mark.usefixtures("fake_model")
v3 = pytest.mark.filterwarnings(f"ignore::{LangChainBetaWarning.__module__}.{LangChainBetaWarning.__name__}")


@tool
def magic_function(x: int) -> int:
    """Apply a magic function to x."""
    return x + 2


def v1(**kw: Any) -> ChatRyzenAI:
    return ChatRyzenAI(**{"model": QWEN, "temperature": 0, "max_tokens": 64, "output_version": "v1", **kw})


def aggregate(chunks: list[AIMessageChunk]) -> AIMessageChunk:
    full = chunks[0]
    for c in chunks[1:]:
        full = full + c
    return full


def block_types(chunks: list[AIMessageChunk]) -> list[str]:
    """The block types of a stream in order, each run of one type once."""
    seen: list[str] = []
    for chunk in chunks:
        assert isinstance(chunk.content, list), f"a v1 chunk's content is a list of blocks, got {chunk.content!r}"
        for block in chunk.content:
            if not seen or seen[-1] != block["type"]:
                seen.append(block["type"])
    return seen


# ---------------------------------------------------------------------- LangChain output_version="v1"
def test_v1_reasoning_and_text_blocks_streamed_and_not(fake_model):
    fake_model.answer(THINK).answer(THINK)
    llm = v1()
    msg = llm.invoke("What is 2 + 2?")
    assert msg.content == [{"type": "reasoning", "reasoning": "step one"}, {"type": "text", "text": "four"}]
    assert msg.text == "four" and msg.content_blocks == msg.content
    chunks = list(llm.stream("What is 2 + 2?"))
    assert len(chunks) > 3 and block_types(chunks) == ["reasoning", "text"]
    full = aggregate(chunks)
    assert [{k: b[k] for k in b if k != "index"} for b in full.content] == msg.content
    assert [b["index"] for b in full.content] == [0, 1]


async def test_v1_async_stream_keeps_the_order(fake_model):
    fake_model.answer(THINK)
    chunks = [c async for c in v1().astream("What is 2 + 2?")]
    assert block_types(chunks) == ["reasoning", "text"]
    full = aggregate(chunks)
    assert (full.content[0]["reasoning"], full.text) == ("step one", "four")


def test_v1_tool_call_blocks_after_reasoning_streamed_and_not(fake_model):
    fake_model.answer(THINK_THEN_CALL).answer(THINK_THEN_CALL)
    llm = v1().bind_tools([magic_function])
    msg = llm.invoke("What is magic_function(3)?")
    assert [b["type"] for b in msg.content] == ["reasoning", "tool_call"]
    call = msg.content[1]
    assert (call["name"], call["args"], call["id"]) == ("magic_function", {"x": 3}, msg.tool_calls[0]["id"])
    chunks = list(llm.stream("What is magic_function(3)?"))
    assert block_types(chunks) == ["reasoning", "tool_call"]
    full = aggregate(chunks)
    assert [(c["name"], c["args"]) for c in full.tool_calls] == [("magic_function", {"x": 3})]
    assert full.content[1]["type"] == "tool_call" and full.content[1]["args"] == {"x": 3}


def test_a_forced_call_is_one_tool_call_block(fake_model):
    fake_model.answer(CALL)
    msg = v1().bind_tools([magic_function], tool_choice="any").invoke("What is magic_function(3)?")
    assert [b["type"] for b in msg.content] == ["tool_call"] and msg.content[0]["name"] == "magic_function"
    assert msg.content[0]["args"] == msg.tool_calls[0]["args"]
    assert fake_model.options.tool_choice == "required"


def test_a_v1_turn_goes_back_into_the_template_as_a_v0_turn_does(fake_model):
    fake_model.answer(THINK_THEN_CALL)
    v1_turn = v1().bind_tools([magic_function]).invoke("What is magic_function(3)?")
    v0_turn = AIMessage("", additional_kwargs={"reasoning_content": "use the tool"}, tool_calls=v1_turn.tool_calls)
    engine = Engine.get(QWEN)

    def prompt(turn: AIMessage) -> str:
        history = [
            HumanMessage("What is magic_function(3)?"),
            turn,
            ToolMessage("5", tool_call_id=turn.tool_calls[0]["id"]),
        ]
        return engine.render(to_core_messages(history))

    rendered = prompt(v1_turn)
    assert rendered == prompt(v0_turn)
    assert "<think>\nuse the tool\n</think>" in rendered and '"x": 3' in rendered


# ---------------------------------------------------------------------- LangChain stream_events v3
@v3
def test_v3_events_carry_reasoning_then_text_in_order(fake_model):
    fake_model.answer(THINK)
    stream = v1().stream_events("What is 2 + 2?", version="v3")
    events = list(stream)
    starts = [(e["index"], e["content"]["type"]) for e in events if e["event"] == "content-block-start"]
    assert starts == [(0, "reasoning"), (1, "text")]
    deltas = [e["delta"] for e in events if e["event"] == "content-block-delta"]
    kinds = [d["type"] for d in deltas]
    assert kinds == sorted(kinds, key=["reasoning-delta", "text-delta"].index) and len(set(kinds)) == 2
    assert "".join(d.get("reasoning", "") for d in deltas) == "step one"
    assert "".join(d.get("text", "") for d in deltas) == "four"
    assert (str(stream.reasoning), str(stream.text)) == ("step one", "four")
    assert events[0]["event"] == "message-start" and events[-1]["event"] == "message-finish"
    assert events[-1]["usage"]["output_tokens"] > 0


@v3
def test_v3_events_of_a_model_without_output_version_are_blocks_too(fake_model):
    fake_model.answer(THINK)
    stream = ChatRyzenAI(model=QWEN, temperature=0, max_tokens=64).stream_events("What is 2 + 2?", version="v3")
    list(stream)
    assert [b["type"] for b in stream.output.content] == ["reasoning", "text"]


@v3
async def test_v3_async_events_carry_the_tool_call_after_the_reasoning(fake_model):
    fake_model.answer(THINK_THEN_CALL)
    llm = v1().bind_tools([magic_function])
    stream = await llm.astream_events("What is magic_function(3)?", version="v3")
    events = [e async for e in stream]
    finished = [e["content"] for e in events if e["event"] == "content-block-finish"]
    assert [b["type"] for b in finished] == ["reasoning", "tool_call"]
    assert finished[0]["reasoning"] == "use the tool" and finished[1]["args"] == {"x": 3}


# ---------------------------------------------------------------------- LlamaIndex ThinkingBlock
def test_llamaindex_streamed_thinking_is_a_thinking_block_and_thinking_deltas(fake_model):
    fake_model.answer(THINK)
    llm = RyzenAILLM(model=QWEN, max_new_tokens=40, temperature=0)
    streamed = list(llm.stream_chat([ChatMessage(role="user", content="2 + 2?")]))
    deltas = [s.additional_kwargs.get("thinking_delta") for s in streamed]
    assert "".join(d or "" for d in deltas) == "step one"
    first_text = next(i for i, s in enumerate(streamed) if s.delta)
    assert all(d is None for d in deltas[first_text:])  # all the thinking before the first text
    last = streamed[-1].message
    assert [type(b).__name__ for b in last.blocks] == ["ThinkingBlock", "TextBlock"]
    assert last.blocks[0].content == "step one" and last.content == "four"


# llama-index-workflows runs inspect.getmembers() on the agent, which touches pydantic's deprecated
# instance properties: the framework's warnings, not this package's.
@pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecationWarning")
def test_function_agent_streams_thinking_and_keeps_it_in_memory(fake_model):
    fake_model.answer(THINK_THEN_CALL)  # the first chat of the run thinks, then calls the tool; later ones answer
    llm = RyzenAILLM(model=QWEN, max_new_tokens=64, temperature=0)
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(fn=lambda x: x + 2, name="magic_function")], llm=llm)

    async def run() -> tuple[list[str], list[ToolCallResult], list[ChatMessage]]:
        handler = agent.run("What is magic_function(3)?", max_iterations=4)
        thinking, results = [], []
        async for ev in handler.stream_events():
            if isinstance(ev, AgentStream) and ev.thinking_delta:
                thinking.append(ev.thinking_delta)
            elif isinstance(ev, ToolCallResult):
                results.append(ev)
        await handler
        memory = await handler.ctx.store.get("memory")
        return thinking, results, await memory.aget_all()

    thinking, results, history = asyncio.run(run())
    assert "".join(thinking) == "use the tool"
    assert [(r.tool_name, r.tool_kwargs, r.tool_output.content) for r in results] == [("magic_function", {"x": 3}, "5")]
    calling = next(
        m for m in history if m.role == MessageRole.ASSISTANT and any(isinstance(b, ToolCallBlock) for b in m.blocks)
    )
    assert [b.content for b in calling.blocks if isinstance(b, ThinkingBlock)] == ["use the tool"]
