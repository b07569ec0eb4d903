"""Several tool calls in one answer: ``parallel_tool_calls`` (LangChain) and ``allow_parallel_tool_calls``
(LlamaIndex) on both tool-call formats, with real OGA.

A regular expression makes the random-weight fixtures write exactly two calls, so what the
options do with them is seen whatever the weights would have written.
"""

from __future__ import annotations

import asyncio
import logging
import re

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool

from conftest import TINY_LLAMA, TINY_QWEN3
from langchain_ryzenai import ChatRyzenAI
from ryzenai_core import InvalidRequestError
from ryzenai_core.generation.streaming import OutputParser
from ryzenai_core.prompt.formats import parse_tool_calls
from ryzenai_core.prompt.templates import ChatTemplate


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


TWO_CALLS = {
    str(TINY_QWEN3): '<tool_call>\n{"name": "multiply", "arguments": {"a": 6, "b": 7}}\n</tool_call>\n'
    '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>',
    str(
        TINY_LLAMA
    ): '{"name": "multiply", "parameters": {"a": 6, "b": 7}}; {"name": "add", "parameters": {"a": 1, "b": 2}}',
}
ONE_CALL_TEMPLATE = r"parallel_tool_calls=True asks for several tool calls in one answer, and the llama3 chat template"


def two_calls(model: str) -> dict[str, str]:
    return {"type": "regex", "data": re.escape(TWO_CALLS[model])}


def names(message) -> list[str]:
    return [c["name"] for c in message.tool_calls]


@pytest.fixture(params=[str(TINY_QWEN3), str(TINY_LLAMA)], ids=["qwen3", "llama3"])
def model(request) -> str:
    return request.param


def test_the_output_parser_keeps_the_first_calls_and_says_what_it_left_out(caplog) -> None:
    def parser(limit: int | None) -> OutputParser:
        return OutputParser(
            tool_markers=("<tool_call>", "</tool_call>"),
            parse_tool_calls=lambda text: parse_tool_calls(text, "qwen3"),
            max_tool_calls=limit,
        )

    for limit, expected in ((None, ["multiply", "add"]), (1, ["multiply"]), (2, ["multiply", "add"])):
        p = parser(limit)
        p.feed(TWO_CALLS[str(TINY_QWEN3)])
        with caplog.at_level(logging.WARNING, logger="ryzenai_core.generation.streaming"):
            caplog.clear()
            p.finish()
        assert [c.name for c in p.tool_calls] == expected
        assert ("leaving out add" in caplog.text) == (limit == 1)


def test_templates_that_render_one_call_per_assistant_message_are_known() -> None:
    assert ChatTemplate((TINY_LLAMA / "chat_template.jinja").read_text()).one_call_per_turn
    assert not ChatTemplate((TINY_QWEN3 / "chat_template.jinja").read_text()).one_call_per_turn


def test_langchain_parallel_tool_calls_false_keeps_the_first_call(model: str) -> None:
    llm = ChatRyzenAI(model=model, temperature=0, max_tokens=80)
    question = [HumanMessage(content="What is 6 times 7, and 1 plus 2?")]
    bound = llm.bind_tools([multiply, add], parallel_tool_calls=False)
    one = bound.invoke(question, guidance=two_calls(model))
    assert names(one) == ["multiply"] and one.tool_calls[0]["args"] == {"a": 6, "b": 7}
    streamed = None
    for chunk in bound.stream(question, guidance=two_calls(model)):
        streamed = chunk if streamed is None else streamed + chunk
    assert names(streamed) == ["multiply"]
    assert names(asyncio.run(bound.ainvoke(question, guidance=two_calls(model)))) == ["multiply"]


def test_langchain_parallel_tool_calls_by_template(model: str) -> None:
    llm = ChatRyzenAI(model=model, temperature=0, max_tokens=80)
    question = [HumanMessage(content="What is 6 times 7, and 1 plus 2?")]
    default = llm.bind_tools([multiply, add]).invoke(question, guidance=two_calls(model))
    if model == str(TINY_LLAMA):
        # Llama 3.2's template renders one call per assistant message: two could not go back into the history
        assert names(default) == ["multiply"]
        with pytest.raises(InvalidRequestError, match=ONE_CALL_TEMPLATE):
            llm.bind_tools([multiply, add], parallel_tool_calls=True).invoke(question)
    else:
        assert names(default) == ["multiply", "add"]
        both = llm.bind_tools([multiply, add], parallel_tool_calls=True).invoke(question, guidance=two_calls(model))
        assert names(both) == ["multiply", "add"]


def test_langchain_parallel_tool_calls_must_be_a_bool() -> None:
    llm = ChatRyzenAI(model=str(TINY_QWEN3))
    with pytest.raises(InvalidRequestError, match="parallel_tool_calls"):
        llm.bind_tools([multiply], parallel_tool_calls="sometimes")


def test_llamaindex_allow_parallel_tool_calls_streamed_or_not(model: str, llamaindex_event_loop) -> None:
    from llama_index.core.tools import FunctionTool

    from llamaindex_ryzenai import RyzenAILLM

    llm = RyzenAILLM(model=model, temperature=0, max_new_tokens=80)
    tools = [FunctionTool.from_defaults(multiply.func), FunctionTool.from_defaults(add.func)]
    ask = {"user_msg": "What is 6 times 7, and 1 plus 2?", "guidance": two_calls(model)}

    def called(response) -> list[str]:
        return [c.tool_name for c in llm.get_tool_calls_from_response(response)]

    assert called(llm.chat_with_tools(tools, **ask)) == ["multiply"]  # LlamaIndex's default: not parallel
    assert called(list(llm.stream_chat_with_tools(tools, **ask))[-1]) == ["multiply"]
    expected = ["multiply"] if model == str(TINY_LLAMA) else ["multiply", "add"]
    assert called(llm.chat_with_tools(tools, allow_parallel_tool_calls=True, **ask)) == expected
    streamed = list(llm.stream_chat_with_tools(tools, allow_parallel_tool_calls=True, **ask))[-1]
    assert called(streamed) == expected

    async def both() -> tuple[list[str], list[str]]:
        done = await llm.achat_with_tools(tools, allow_parallel_tool_calls=True, **ask)
        last = [r async for r in await llm.astream_chat_with_tools(tools, **ask)][-1]
        return called(done), called(last)

    assert llamaindex_event_loop.run_until_complete(both()) == (expected, ["multiply"])
