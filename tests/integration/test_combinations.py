"""The faces inside what users build around them (real OGA, tiny fixtures).

LangChain's event streams (``astream_events``) of a chain, a LangGraph tool loop (a tool call,
the tool's result rendered back into the prompt, the final answer streamed through LangGraph's
"messages" mode), and LlamaIndex's chat engines (context and condense-plus-context, with their
memory over several turns). What is checked is what those frameworks rely on: every token
reaches their streams, the streamed text is the returned text, tool-call ids connect, and the
memory they trim with the adapter's metadata keeps prompts under the package's limit.
"""

from __future__ import annotations

import asyncio
from typing import Any

import llama_index.core
import pytest

from conftest import TINY_LLAMA, TINY_QWEN3

QWEN = str(TINY_QWEN3)
LLAMA = str(TINY_LLAMA)


# ---------------------------------------------------------------------- LangChain event streams
def test_a_chains_event_stream_carries_every_token_of_the_answer() -> None:
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate

    from langchain_ryzenai import ChatRyzenAI

    llm = ChatRyzenAI(model=LLAMA, temperature=0, max_tokens=16)
    chain = ChatPromptTemplate.from_messages([("system", "Be brief."), ("human", "{q}")]) | llm | StrOutputParser()

    async def events() -> list[dict[str, Any]]:
        return [e async for e in chain.astream_events({"q": "Name a colour."}, version="v2")]

    got = asyncio.run(events())
    kinds = [e["event"] for e in got]
    assert kinds.index("on_chat_model_start") < kinds.index("on_chat_model_stream") < kinds.index("on_chat_model_end")
    pieces = [e["data"]["chunk"].content for e in got if e["event"] == "on_chat_model_stream"]
    assert len(pieces) >= 2
    end = next(e for e in got if e["event"] == "on_chat_model_end")["data"]["output"]
    final = got[-1]
    assert final["event"] == "on_chain_end"
    assert "".join(pieces) == end.content == final["data"]["output"] == chain.invoke({"q": "Name a colour."})
    assert end.usage_metadata["output_tokens"] == 16


# ---------------------------------------------------------------------- LangGraph
@pytest.mark.parametrize("model", [QWEN, LLAMA], ids=["qwen3", "llama"])
def test_a_langgraph_tool_loop_calls_the_tool_and_streams_the_answer(model: str) -> None:
    """A graph of the shape of LangGraph's prebuilt agent: the model (forced to call the tool
    the first time), a ToolNode, the model again with the tool's result in its prompt."""
    from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from langchain_ryzenai import ChatRyzenAI

    @tool
    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b

    llm = ChatRyzenAI(model=model, temperature=0, max_tokens=64)
    first = llm.bind_tools([multiply], tool_choice="multiply")
    then = llm.bind_tools([multiply], tool_choice="none")

    def agent(state: MessagesState) -> dict[str, list[Any]]:
        called = any(isinstance(m, ToolMessage) for m in state["messages"])
        return {"messages": [(then if called else first).invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([multiply]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    app = graph.compile()

    question = {"messages": [HumanMessage("What is 6 times 7? Use the tool.")]}
    streamed: dict[str, str] = {}
    for chunk, meta in app.stream(question, stream_mode="messages"):
        if isinstance(chunk, AIMessageChunk) and meta["langgraph_node"] == "agent":
            streamed[meta["langgraph_step"]] = streamed.get(meta["langgraph_step"], "") + str(chunk.content)
    out = app.invoke(question)["messages"]

    assert [type(m) for m in out] == [HumanMessage, AIMessage, ToolMessage, AIMessage]
    call = out[1].tool_calls[0]
    assert call["name"] == "multiply" and out[2].tool_call_id == call["id"]
    assert out[2].content == str(call["args"]["a"] * call["args"]["b"])
    assert not out[3].tool_calls and out[3].content
    assert out[3].usage_metadata["output_tokens"] > 0
    assert list(streamed.values())[-1] == out[3].content  # the answer, token by token, then whole
    alone = then.invoke(out[:1]).usage_metadata["input_tokens"]
    assert out[3].usage_metadata["input_tokens"] > alone  # the tool call and its result reached the prompt


# ---------------------------------------------------------------------- LlamaIndex chat engines
DOCS = [
    "The Harwick Lighthouse was built in 1871 by Ilsa Brandecott.",
    "The Morrow Bridge is made of red granite and spans the river Tane.",
    "The Corvel Choir has 48 members and sings every Sunday.",
]


def _close_memory(engine: Any, loop: asyncio.AbstractEventLoop) -> None:
    """LlamaIndex's default chat memory keeps an aiosqlite database it never closes."""
    store = getattr(engine._memory, "sql_store", None)
    if store is not None and store._async_engine is not None:
        loop.run_until_complete(store._async_engine.dispose())


def _prompt_plans(events: list[Any]) -> list[dict[str, Any]]:
    """The budget plan of every LLM call LlamaIndex made (its instrumentation's chat-end events)."""
    from llama_index.core.instrumentation.events.llm import LLMChatEndEvent

    return [e.response.raw["budget_plan"] for e in events if isinstance(e, LLMChatEndEvent) and e.response is not None]


@pytest.mark.slow
@pytest.mark.parametrize("chat_mode", ["context", "condense_plus_context"])
def test_llamaindex_chat_engines_stream_and_remember(
    chat_mode: str, llamaindex_event_loop: Any, llamaindex_events: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding

    from llamaindex_ryzenai import RyzenAILLM

    llm = RyzenAILLM(model=LLAMA, temperature=0, max_new_tokens=12)
    monkeypatch.setattr(llama_index.core, "global_tokenizer", None)  # the adapter installs the package's
    index = VectorStoreIndex.from_documents([Document(text=t) for t in DOCS], embed_model=MockEmbedding(embed_dim=8))
    engine = index.as_chat_engine(chat_mode=chat_mode, llm=llm, similarity_top_k=2)
    try:
        first = engine.stream_chat("Who built the Harwick Lighthouse?")
        tokens = list(first.response_gen)
        assert len(tokens) >= 2 and "".join(tokens).strip() == first.response  # LlamaIndex strips it
        second = engine.chat("And when was it built?")
        plans = _prompt_plans(llamaindex_events)
        # the first turn reached the second turn's prompt (the last call of each turn answers it)
        assert plans[-1]["prompt_tokens"] > plans[0]["prompt_tokens"]
        assert second.response
        history = engine.chat_history
        assert [m.role.value for m in history] == ["user", "assistant", "user", "assistant"]
        assert history[1].content == first.response and history[3].content == second.response

        async def third() -> str:
            r = await engine.astream_chat("What is the bridge made of?")
            return "".join([t async for t in r.async_response_gen()])

        assert llamaindex_event_loop.run_until_complete(third())
        assert len(engine.chat_history) == 6
    finally:
        _close_memory(engine, llamaindex_event_loop)


def test_a_chat_engines_memory_keeps_a_long_conversation_under_the_prompt_limit(
    llamaindex_event_loop: Any, llamaindex_events: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twenty long turns through a small window: the memory LlamaIndex sizes from the adapter's
    metadata sends only the newest turns, and every prompt stays under the limit."""
    from llama_index.core.chat_engine import SimpleChatEngine

    from llamaindex_ryzenai import RyzenAILLM

    monkeypatch.setattr(llama_index.core, "global_tokenizer", None)
    llm = RyzenAILLM(model=LLAMA, temperature=0, max_new_tokens=16, context_window=512)
    engine = SimpleChatEngine.from_defaults(llm=llm)
    filler = "The committee met again to discuss the budget of the harbour district. " * 2
    try:
        for i in range(20):  # over the limit, a call raises ContextWindowExceededError (overflow="error")
            assert engine.chat(f"Turn {i}. {filler}").response
        plans = _prompt_plans(llamaindex_events)
        assert len(plans) == 20
        tokens = [p["prompt_tokens"] for p in plans]
        assert max(tokens) <= 512 - 16 and tokens[-1] > tokens[0]  # the memory filled, then was trimmed
        assert len(engine.chat_history) == 40  # all turns are kept, the newest sent
    finally:
        _close_memory(engine, llamaindex_event_loop)
