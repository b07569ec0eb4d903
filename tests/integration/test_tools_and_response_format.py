"""Tools and a response format together: a turn may call a tool (in the family's format) or answer in the schema.

LangChain's ``create_agent(model, tools, response_format=Schema)`` picks its provider strategy
(the profile says ``structured_output``) and sends both with ``tool_choice`` unset. The grammar
must then allow either form, or the agent never calls its tools.
"""

from __future__ import annotations

import json

import pytest
from langchain_core.tools import tool
from pydantic import BaseModel, Field

from conftest import TINY_LLAMA, TINY_QWEN3
from langchain_ryzenai import ChatRyzenAI
from ryzenai_core import ChatMessage, Engine
from ryzenai_core.messages import ToolCall
from ryzenai_core.options import validated_options

CALLS: list[str] = []


@tool
def lookup(city: str) -> str:
    """Look up the weather of a city."""
    CALLS.append(city)
    return "sunny, 21 C"


class Weather(BaseModel):
    city: str = Field(max_length=20)
    summary: str = Field(max_length=40)


TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look up the weather of a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(params=[str(TINY_QWEN3), str(TINY_LLAMA)], ids=["qwen3", "llama3"])
def model(request) -> str:
    return request.param


def test_auto_with_a_response_format_allows_a_call_or_the_answer(model):
    """Greedy, the fixtures pick the call; sampled, some seeds pick the answer: both come back parsed."""
    e = Engine.get(model, execution="inline")
    fmt = {"type": "json_schema", "schema": Weather.model_json_schema()}
    msgs = [ChatMessage("user", "What is the weather in Paris?")]
    called = e.generate(msgs, validated_options(temperature=0, max_new_tokens=128, tools=[TOOL], response_format=fmt))
    assert [c.name for c in called.tool_calls] == ["lookup"] and called.finish_reason in ("tool_calls", "length")
    forms = set()
    for seed in range(12):
        c = e.generate(
            msgs, validated_options(temperature=1.0, seed=seed, max_new_tokens=128, tools=[TOOL], response_format=fmt)
        )
        if c.tool_calls:
            forms.add("call")
            assert c.tool_calls[0].name == "lookup" and isinstance(c.tool_calls[0].arguments["city"], str)
        else:
            forms.add("answer")
            Weather.model_validate(json.loads(c.text))
    # Qwen's call starts with <tool_call>, its answer with "{": sampling picks each. Llama's call and answer
    # both start with '{"', and this fixture then always prefers the call's key.
    assert forms == ({"call", "answer"} if model == str(TINY_QWEN3) else {"call"})


def test_an_agents_turns_say_the_schema_once_with_the_question(model):
    """Each turn renders the conversation the last one did: the schema stays with the question, a tool may come first."""
    e = Engine.get(model)
    opts = validated_options(
        tools=[TOOL], response_format={"type": "json_schema", "schema": Weather.model_json_schema()}
    )
    question = [ChatMessage("user", "What is the weather in Paris?")]
    call = ChatMessage("assistant", "", tool_calls=[ToolCall("lookup", {"city": "Paris"}, "c1")])
    first = e.render(question, opts)
    second = e.render([*question, call, ChatMessage("tool", "sunny, 21 C", tool_call_id="c1")], opts)
    said = "What is the weather in Paris?\n\nYou may call a tool first; your final answer must be JSON matching this schema: {"
    assert said in first and said in second and second.count("final answer") == 1
    assert second.index(said) < second.index("sunny, 21 C")  # no user turn between the result and the answer


def test_create_agent_with_a_response_format_calls_its_tools(model):
    from langchain.agents import create_agent
    from langchain.agents.middleware import ToolCallLimitMiddleware

    CALLS.clear()
    llm = ChatRyzenAI(model=model, temperature=0, max_tokens=128)
    agent = create_agent(
        llm,
        tools=[lookup],
        response_format=Weather,
        middleware=[ToolCallLimitMiddleware(run_limit=1, exit_behavior="end")],
    )
    out = agent.invoke({"messages": [("user", "What is the weather in Paris?")]})
    assert len(CALLS) == 1  # the tool ran: the schema's grammar alone never let it be called
    assert [m.type for m in out["messages"][:3]] == ["human", "ai", "tool"]


def test_create_agent_with_a_response_format_answers_in_the_schema():
    from langchain.agents import create_agent

    CALLS.clear()
    llm = ChatRyzenAI(model=str(TINY_QWEN3), temperature=1.0, seed=0, max_tokens=128)
    agent = create_agent(llm, tools=[lookup], response_format=Weather)
    out = agent.invoke({"messages": [("user", "What is the weather in Paris?")]})
    assert isinstance(out["structured_response"], Weather) and CALLS == []  # this seed answers at once


def test_llamaindex_structured_predict_with_tools_bound(model, llamaindex_event_loop):
    """LlamaIndex's structured call with tools in its kwargs answers in the schema (its tools are dropped)."""
    from llama_index.core.prompts import PromptTemplate

    from llamaindex_ryzenai import RyzenAILLM

    llm = RyzenAILLM(model=model, temperature=0, max_new_tokens=128)
    weather = llm.structured_predict(
        Weather, PromptTemplate("Weather in {city}?"), llm_kwargs={"tools": [TOOL], "tool_choice": "auto"}, city="Paris"
    )
    assert isinstance(weather, Weather)
    response = llm.chat_with_tools(
        [_tool()],
        user_msg="Weather in Paris?",
        response_format={"type": "json_schema", "schema": Weather.model_json_schema()},
    )
    assert [c.tool_name for c in llm.get_tool_calls_from_response(response, error_on_no_tool_call=False)] == ["lookup"]


def _tool():
    from llama_index.core.tools import FunctionTool

    return FunctionTool.from_defaults(lookup.func)
