"""Tool calls are read by their JSON, not cut at the first closing marker, in every family.

Qwen's ``</tool_call>`` is an ordinary added token: a model may write it inside an argument
(a search for the marker itself, code that mentions it). A regular expression makes the
random-weight fixtures write exactly such a call, so the parsing is seen on real tokens.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool

from conftest import TINY_LLAMA, TINY_QWEN3
from langchain_ryzenai import ChatRyzenAI
from ryzenai_core.generation.streaming import OutputParser
from ryzenai_core.prompt.formats import parse_tool_calls

QUERY = 'a </tool_call> b <tool_call> "c"'
ARGS = {"query": QUERY}
QWEN_CALL = '<tool_call>\n{"name": "search", "arguments": ' + json.dumps(ARGS) + "}\n</tool_call>"
LLAMA_CALL = '{"name": "search", "parameters": ' + json.dumps(ARGS) + "}"


@tool
def search(query: str) -> str:
    """Search the web."""
    return query


def split_at(text: str, cuts: list[int]) -> list[str]:
    points = sorted({0, len(text), *(c for c in cuts if c < len(text))})
    return [text[a:b] for a, b in zip(points, points[1:], strict=False)]


def qwen_parser() -> OutputParser:
    return OutputParser(
        tool_markers=("<tool_call>", "</tool_call>"), parse_tool_calls=lambda text: parse_tool_calls(text, "qwen3")
    )


@pytest.mark.parametrize(
    ("text", "family"),
    [(QWEN_CALL, "qwen3"), ("Sure. " + QWEN_CALL + " Done.", "qwen3"), (LLAMA_CALL, "llama3")],
)
def test_a_marker_inside_an_argument_is_part_of_the_argument(text, family):
    content, calls = parse_tool_calls(text, family)
    assert [(c.name, c.arguments) for c in calls] == [("search", ARGS)]
    assert content.split() == text.replace(QWEN_CALL, "").replace(LLAMA_CALL, "").split()


def test_a_block_that_is_not_json_stays_content_where_it_was():
    text = "one <tool_call>not json</tool_call> two"
    assert parse_tool_calls(text, "qwen3") == (text, [])


TEXTS = ["Before. " + QWEN_CALL + " After.", "Before. <tool_call>not a call</tool_call> After. " + QWEN_CALL]


@settings(max_examples=150, deadline=None)
@given(which=st.sampled_from(TEXTS), cuts=st.lists(st.integers(0, max(map(len, TEXTS))), max_size=10))
def test_the_stream_parser_reads_calls_by_their_json_and_keeps_the_order(which, cuts):
    p = qwen_parser()
    content = [p.feed(piece)[0] for piece in split_at(which, cuts)]
    content.append(p.finish()[0])
    assert [(c.name, c.arguments) for c in p.tool_calls] == [("search", ARGS)]
    rest = "".join(content)
    expected = which.replace(QWEN_CALL, "")
    assert rest.split() == expected.split()  # every other word, in the order written


FORCED = {str(TINY_QWEN3): QWEN_CALL, str(TINY_LLAMA): LLAMA_CALL}


@pytest.fixture(params=[str(TINY_QWEN3), str(TINY_LLAMA)], ids=["qwen3", "llama3"])
def model(request) -> str:
    return request.param


def written(model: str) -> dict[str, str]:
    return {"type": "regex", "data": re.escape(FORCED[model])}


def test_langchain_returns_the_call_whose_argument_holds_the_marker(model):
    llm = ChatRyzenAI(model=model, temperature=0, max_tokens=96).bind_tools([search])
    msg = llm.invoke([HumanMessage(content="Find the marker.")], guidance=written(model))
    assert [(c["name"], c["args"]) for c in msg.tool_calls] == [("search", ARGS)]
    assert msg.content == "" and msg.invalid_tool_calls == []
    streamed = None
    for chunk in llm.stream([HumanMessage(content="Find the marker.")], guidance=written(model)):
        streamed = chunk if streamed is None else streamed + chunk
    assert [(c["name"], c["args"]) for c in streamed.tool_calls] == [("search", ARGS)]
    assert streamed.content == ""


def test_llamaindex_returns_the_call_whose_argument_holds_the_marker(model):
    from llama_index.core.tools import FunctionTool

    from llamaindex_ryzenai import RyzenAILLM

    llm = RyzenAILLM(model=model, temperature=0, max_new_tokens=96)
    tools = [FunctionTool.from_defaults(search.func)]
    response = llm.chat_with_tools(tools, user_msg="Find the marker.", guidance=written(model))
    calls = llm.get_tool_calls_from_response(response)
    assert [(c.tool_name, c.tool_kwargs) for c in calls] == [("search", ARGS)]
    assert (response.message.content or "") == ""
