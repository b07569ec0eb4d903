"""Structured output writes what was asked, and a cut is never silent, in both faces.

Under a JSON grammar, greedy decoding on the random-weight fixtures seldom closes a string by
itself (tiny-llama writes " augmented" over and over, tiny-qwen3 a run of assorted tokens): on
the questions used here every string runs to whatever bound the library set, so these tests
measure the bounds themselves. (Another prompt, and the schema said in it is part of the prompt,
may close one early: each question here was picked where none closes.) A bound that is too
small shows as a short string; a budget too small for what the model writes shows as a cut,
which must come back complete, with the fields named.
"""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from langchain_core.tools import tool
from pydantic import BaseModel, Field

from conftest import TINY_LLAMA, TINY_QWEN3
from langchain_ryzenai import ChatRyzenAI

CUT_LOG = "cut structured output"


class Joke(BaseModel):
    setup: str
    punchline: str


class Summary(BaseModel):
    summary: str = Field(max_length=200)


class Essay(BaseModel):
    text: str = Field(max_length=500)


@tool
def search(query: str) -> str:
    """Search the web."""
    return query


@pytest.fixture(params=[str(TINY_LLAMA), str(TINY_QWEN3)], ids=["llama", "qwen3"])
def model(request) -> str:
    return request.param


def cut_fields(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if CUT_LOG in r.getMessage()]


def test_the_fixtures_write_long_strings_under_the_grammar(model):
    """The premise: at the default budget (256 tokens) a Joke's strings run to the library's bound."""
    llm = ChatRyzenAI(model=model, temperature=0)
    assert llm.engine.budget.bounded_output_tokens == 256
    raw = llm.with_structured_output(Joke, include_raw=True).invoke("Tell me a joke about cats")
    joke, meta = raw["parsed"], raw["raw"].response_metadata
    assert len(joke.setup) >= 150 and len(joke.punchline) >= 100  # was 19 and 19 (6 bytes a character)
    assert meta["finish_reason"] == "length" and "setup" in meta["truncated_fields"]


def test_langchain_a_summary_and_the_callers_max_length_fit_whole(model, caplog):
    llm = ChatRyzenAI(model=model, temperature=0)
    with caplog.at_level(logging.WARNING):
        raw = llm.with_structured_output(Summary, include_raw=True).invoke("Summarize the report")
        # "Write it": with the schema said in the prompt, tiny-qwen3 closes the string of a bare "Write" itself
        # (at 162 characters); this question keeps it writing to the bound, as LlamaIndex's test below does.
        essay = (
            ChatRyzenAI(model=model, temperature=0, max_tokens=1024).with_structured_output(Essay).invoke("Write it")
        )
    assert len(raw["parsed"].summary) == 200  # the caller's bound, whole: was 41
    assert raw["raw"].response_metadata["finish_reason"] == "stop"
    assert "truncated_fields" not in raw["raw"].response_metadata
    assert len(essay.text) == 500  # max_length=500 at max_tokens=1024 kept as given: was 16
    assert cut_fields(caplog) == []


def test_langchain_a_small_budget_cuts_the_string_and_says_so(model, caplog):
    llm = ChatRyzenAI(model=model, temperature=0, max_tokens=40)
    with caplog.at_level(logging.WARNING):
        raw = llm.with_structured_output(Summary, include_raw=True).invoke("Summarize the report")
        streamed = list(llm.with_structured_output(Summary).stream("Summarize the report"))
    msg = raw["raw"]
    assert 0 < len(raw["parsed"].summary) < 200 and msg.usage_metadata["output_tokens"] <= 40
    assert msg.response_metadata["finish_reason"] == "length"
    assert msg.response_metadata["truncated_fields"] == ["summary"]
    assert streamed[-1] == raw["parsed"]
    assert len(cut_fields(caplog)) == 2 and "summary" in cut_fields(caplog)[0]


def test_langchain_forced_tool_call_strings(model, caplog):
    llm = ChatRyzenAI(model=model, temperature=0)
    msg = llm.bind_tools([search], tool_choice="search").invoke("Search for cats")
    assert len(msg.tool_calls[0]["args"]["query"]) >= 200  # was 37
    small = ChatRyzenAI(model=model, temperature=0, max_tokens=96).bind_tools([search], tool_choice="search")
    with caplog.at_level(logging.WARNING):
        cut = small.invoke("Search for cats")
    assert cut.tool_calls[0]["name"] == "search" and cut.invalid_tool_calls == []
    assert cut.response_metadata["finish_reason"] == "length"
    assert cut.response_metadata["truncated_fields"] == ["search(query)"]
    assert cut.usage_metadata["output_tokens"] <= 96 and cut_fields(caplog)


@pytest.mark.parametrize("budget", [12, 16, 20, 64])
def test_json_mode_closes_within_the_budget_on_a_model_that_never_closes(model, budget):
    """JSON mode's object never holds more than its budget, on a model that writes its key to the edge."""
    # Llama 3.2's template writes today's date into the prompt, and on some days the random-weight model's
    # greedy answer is "{}" at once: the prompt's date is pinned to one on which it writes a key.
    llm = ChatRyzenAI(model=model, temperature=0, max_tokens=budget, model_kwargs={"date_string": "03 Dec 2026"})
    msg = llm.bind(response_format={"type": "json_object"}).invoke("Describe a cat as JSON")
    data = json.loads(msg.content)
    assert isinstance(data, dict) and len(data) == 1 and msg.usage_metadata["output_tokens"] <= budget
    assert msg.response_metadata["finish_reason"] == "length"
    assert msg.response_metadata["truncated_fields"] == list(data)  # its key was cut (or reached its bound)


# ---------------------------------------------------------------------- LlamaIndex
def _llm(model: str, **kwargs):
    from llamaindex_ryzenai import RyzenAILLM

    return RyzenAILLM(model=model, temperature=0, **kwargs)


def test_llamaindex_structured_predict_writes_what_was_asked(model, caplog):
    from llama_index.core.prompts import PromptTemplate

    prompt = PromptTemplate("Tell me a joke about {topic}")
    with caplog.at_level(logging.WARNING):
        joke = _llm(model).structured_predict(Joke, prompt, topic="cats")
        summary = _llm(model).structured_predict(Summary, PromptTemplate("Summarize {x}"), x="it")
        essay = _llm(model, max_new_tokens=1024).structured_predict(Essay, PromptTemplate("Write {x}"), x="it")
    assert len(joke.setup) >= 150 and len(joke.punchline) >= 100  # was 19 and 19
    assert len(summary.summary) == 200 and len(essay.text) == 500  # was 41 and 16
    assert len(cut_fields(caplog)) == 1 and "setup" in cut_fields(caplog)[0]  # the joke reached the bound


def test_llamaindex_a_small_budget_cuts_with_a_warning_on_every_path(model, caplog, llamaindex_event_loop):
    from llama_index.core.program import FunctionCallingProgram
    from llama_index.core.prompts import PromptTemplate

    llm = _llm(model, max_new_tokens=40)
    prompt = PromptTemplate("Summarize {x}")
    with caplog.at_level(logging.WARNING):
        caplog.clear()
        done = llm.structured_predict(Summary, prompt, x="it")
        assert 0 < len(done.summary) < 200 and len(cut_fields(caplog)) == 1
        later = llamaindex_event_loop.run_until_complete(llm.astructured_predict(Summary, prompt, x="it"))
        assert later == done and len(cut_fields(caplog)) == 2
        streamed = list(llm.stream_structured_predict(Summary, prompt, x="it"))
        assert streamed[-1] == done and len(cut_fields(caplog)) == 3
        program = FunctionCallingProgram.from_defaults(
            output_cls=Joke, prompt=prompt, llm=_llm(model, max_new_tokens=96)
        )
        called = program(x="it")
        assert called.setup and "Joke(setup)" in cut_fields(caplog)[-1]  # a forced call, reported the same way
    response = llm.chat(
        [_user("Summarize it")], response_format={"type": "json_schema", "schema": Summary.model_json_schema()}
    )
    assert response.additional_kwargs["truncated_fields"] == ["summary"]
    assert response.raw["finish_reason"] == "length" and response.raw["truncated_fields"] == ["summary"]
    assert asyncio.iscoroutinefunction(llm.astructured_predict)


def _user(text: str):
    from llama_index.core.base.llms.types import ChatMessage, MessageRole

    return ChatMessage(role=MessageRole.USER, content=text)
