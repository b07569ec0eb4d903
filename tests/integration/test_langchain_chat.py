"""ChatRyzenAI on real OGA and the fixture models (random weights: the text is noise, the plumbing is real).

KV reuse, workers, cancellation, the event loop, tools, structured output, sync/async parity in
both executions, and independent LCEL chains (prompt | model | parser, RAG over a retriever, a
tool loop) on the fixtures and on the CPU-runnable replicas of AMD's packages. The face's
identity, options, metadata, callbacks, tokens, budgets, reasoning and messages are tested on
the fake engine in tests/unit/test_chat_ryzenai.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.exceptions import OutputParserException
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.output_parsers import StrOutputParser
from langchain_core.outputs import Generation
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnablePassthrough
from langchain_core.tools import tool
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from conftest import LONG_PROMPT, REPLICAS, ROOT, TINY_LLAMA, TINY_QWEN3, longest_loop_gap
from langchain_ryzenai import ChatRyzenAI
from langchain_ryzenai._convert import to_core_messages as _to_core_messages
from langchain_ryzenai._parsers import StrictJsonOutputParser as _StrictJsonOutputParser
from ryzenai_core import ChatMessage as CoreMessage
from ryzenai_core import (
    ChatTemplateError,
    Engine,
    GenerationError,
    InvalidRequestError,
)
from ryzenai_core.options import (
    ResponseFormat,
    response_format_from,
    tool_choice_from,
    validated_options,
)
from ryzenai_core.prompt.structured import json_object_guidance

QWEN = str(TINY_QWEN3)
LLAMA = str(TINY_LLAMA)
THINK = {"type": "regex", "data": "<think>\nstep one\n</think>\n\nfour"}

MODELS = [
    pytest.param({"model": QWEN}, id="tiny-qwen3"),
    pytest.param({"model": LLAMA}, id="tiny-llama"),
    pytest.param({"model": str(REPLICAS / "Llama-3.2-1B_rai_1.8.0_npu_4K"), "provider": "cpu"}, id="llama-npu-4k"),
    pytest.param({"model": str(REPLICAS / "Qwen3-4B_rai_1.8.0_npu_4K"), "provider": "cpu"}, id="qwen3-npu-4k"),
    pytest.param({"model": str(REPLICAS / "Llama-3.2-1B_rai_1.8.0_hybrid"), "provider": "cpu"}, id="llama-hybrid"),
]


def chat(**kw: Any) -> ChatRyzenAI:
    return ChatRyzenAI(**{"model": QWEN, "temperature": 0, "max_tokens": 24, **kw})


@tool
def magic_function(input: int) -> int:
    """Apply a magic function to an input."""
    return input + 2


@tool
def get_weather(location: str) -> str:
    """Get the weather at a location."""
    return "It's sunny."


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class Joke(BaseModel):
    """Joke to tell user."""

    setup: str = Field(description="question to set up a joke")
    punchline: str = Field(description="answer to resolve the joke")


class JokeDict(TypedDict):
    """Joke to tell user."""

    setup: str
    punchline: str


def aggregate(chunks: list[AIMessageChunk]) -> AIMessageChunk:
    full = chunks[0]
    for c in chunks[1:]:
        full = full + c
    return full


# ---------------------------------------------------------------------- metadata


def test_kv_prefix_reuse_is_reported_as_cache_read():
    llm = chat(kv_reuse=True, max_tokens=4)
    system = "You answer questions about Ryzen AI packages. " * 10
    llm.invoke([SystemMessage(system), HumanMessage("first")])
    second = llm.invoke([SystemMessage(system), HumanMessage("second")])
    assert second.usage_metadata["input_token_details"]["cache_read"] > 50
    cold = chat(kv_reuse=False, max_tokens=4).invoke([SystemMessage(system), HumanMessage("second")])
    assert cold.usage_metadata["input_token_details"]["cache_read"] == 0


def test_a_call_queued_behind_a_worker_that_died_runs_on_a_new_worker(copy_package, caplog):
    folder = str(copy_package(TINY_QWEN3, "retry-me"))
    engine = Engine.get(folder, execution="process")
    engine.load()
    pid = engine.worker_pid()
    # About 3000 tokens under a grammar (the model cannot stop early): seconds of work, far longer
    # than the 0.3 s the test waits before the kill.
    slow = validated_options(max_new_tokens=3500, guidance={"type": "regex", "data": "(ab ){1500}"})
    busy = engine.stream([CoreMessage("user", "Hello")], slow)
    next(busy)  # the worker is generating; the next request waits behind this one
    result: dict[str, Any] = {}
    waiting = threading.Thread(target=lambda: result.update(msg=chat(model=folder, max_tokens=4).invoke("Hello")))
    waiting.start()
    time.sleep(0.3)  # the call is now queued in the worker behind the busy generation
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(GenerationError, match="exited"):
        for _ in busy:
            pass
    waiting.join(timeout=60)
    assert result["msg"].usage_metadata["output_tokens"] == 4
    assert engine.worker_pid() not in (None, pid)
    # The call never started on the dead worker: the core sent it to the new one without using
    # one of the call's retries.
    assert "sending the call again (1 of" not in caplog.text


def test_errors_of_a_live_worker_are_not_retried(caplog):
    engine = Engine.get(QWEN)
    engine.load()
    pid = engine.worker_pid()
    with pytest.raises(ChatTemplateError, match="boom"):
        chat(max_retries=3).invoke("Hello", chat_template="{{ raise_exception('boom') }}")
    assert "sending the call again" not in caplog.text and engine.worker_pid() == pid


async def test_leaving_a_stream_early_cancels_the_generation():
    llm = chat(max_tokens=2100, kv_reuse=False)
    very_slow = {"type": "regex", "data": "(ab ){1000}"}  # 2000 tokens: several seconds if not cancelled
    for _ in llm.stream("Hello", guidance=very_slow):
        break
    nxt = chat(max_tokens=4).invoke("Hello")  # served: the abandoned generation was cancelled
    assert nxt.usage_metadata["output_tokens"] == 4
    async for _ in llm.astream("Hello", guidance=very_slow):
        break
    nxt = await chat(max_tokens=4).ainvoke("Hello")
    assert nxt.usage_metadata["output_tokens"] == 4


@pytest.mark.parametrize("face", ["astream", "ainvoke"])
async def test_async_calls_keep_the_event_loop_responsive(face):
    """A long prefill stalls the loop inline (the documented cost) and not in process mode.

    The same test measures both modes: the inline run shows the prompt is long enough to see a
    stall on this machine, and process mode must keep the longest gap between ticks far below it.
    """
    gaps: dict[str, float] = {}
    for execution in ("inline", "process"):
        llm = chat(max_tokens=4, kv_reuse=False, execution=execution)
        prompt_tokens = llm.get_num_tokens_from_messages([HumanMessage(LONG_PROMPT)])
        assert 3500 < prompt_tokens <= Engine.get(QWEN).budget.window - 4
        await llm.ainvoke("Hello")  # the model is loaded (and the worker started): only the call is timed
        call = llm.astream(LONG_PROMPT) if face == "astream" else llm.ainvoke(LONG_PROMPT)
        gaps[execution], out = await longest_loop_gap(call)
        usage = sum(out[1:], out[0]).usage_metadata
        assert usage["input_tokens"] == prompt_tokens and usage["output_tokens"] == 4
    assert gaps["inline"] > 0.05, gaps  # the prefill held the loop for 25 ticks or more
    assert gaps["process"] < gaps["inline"] / 4, gaps


# ---------------------------------------------------------------------- tools
TOOL_Q = "What is magic_function(3)? Use the tool."


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("any", {"magic_function", "get_weather"}),
        ("required", {"magic_function", "get_weather"}),
        (True, {"magic_function", "get_weather"}),
        ("magic_function", {"magic_function"}),
        ("get_weather", {"get_weather"}),
        ({"type": "function", "function": {"name": "get_weather"}}, {"get_weather"}),
        ({"type": "tool", "name": "magic_function"}, {"magic_function"}),
    ],
)
@pytest.mark.parametrize("model", [QWEN, LLAMA], ids=["qwen3", "llama"])
def test_forced_tool_choice_makes_one_call(model, choice, expected):
    msg = chat(model=model, max_tokens=64).bind_tools([magic_function, get_weather], tool_choice=choice).invoke(TOOL_Q)
    assert len(msg.tool_calls) == 1 and msg.tool_calls[0]["name"] in expected
    # A string argument this fixture writes to the bound the budget sets is cut: the call still comes
    # back, and the finish reason says so, as OpenAI's does for output cut short.
    cut = msg.response_metadata.get("truncated_fields")
    assert msg.response_metadata["finish_reason"] == ("length" if cut else "tool_calls")
    assert cut in (None, [f"{msg.tool_calls[0]['name']}(location)"])
    args = msg.tool_calls[0]["args"]
    assert isinstance(args.get("input"), int) or isinstance(args.get("location"), str)


def test_auto_and_none_tool_choice_render_or_leave_out_the_tools():
    llm = chat(max_tokens=8)
    msgs = [HumanMessage(TOOL_Q)]
    tools = [magic_function, get_weather]
    auto = llm.bind_tools(tools).invoke(msgs)
    assert auto.usage_metadata["input_tokens"] == llm.get_num_tokens_from_messages(msgs, tools=tools)
    for choice in ("auto", None):
        again = llm.bind_tools(tools, tool_choice=choice).invoke(msgs)
        assert again.usage_metadata["input_tokens"] == auto.usage_metadata["input_tokens"]
    none = llm.bind_tools(tools, tool_choice="none").invoke(msgs)
    assert none.usage_metadata["input_tokens"] == llm.get_num_tokens_from_messages(msgs)
    assert none.tool_calls == []


def test_bad_tool_choice_fails_at_bind_time():
    with pytest.raises(InvalidRequestError, match="'divide', which is not a bound tool; bound tools: magic_function"):
        chat().bind_tools([magic_function], tool_choice="divide")
    with pytest.raises(InvalidRequestError, match="not understood"):
        chat().bind_tools([magic_function], tool_choice={"type": "bogus"})
    with pytest.raises(InvalidRequestError, match="one way only"):
        chat().bind_tools([magic_function], tool_choice="any").invoke("hi", guidance=THINK)


@pytest.mark.parametrize("output_version", ["v0", "v1"])
async def test_tool_call_message_contract_invoke_and_stream(output_version):
    """The standard suite's tool-call checks, except the argument value (which needs understanding)."""
    llm = chat(max_tokens=64, output_version=output_version).bind_tools([magic_function], tool_choice="any")

    def check(message: BaseMessage) -> None:
        assert isinstance(message, AIMessage) and len(message.tool_calls) == 1
        call = message.tool_calls[0]
        assert call["name"] == "magic_function" and isinstance(call["args"]["input"], int)
        assert call["id"] and call.get("type") == "tool_call"
        blocks = [b for b in message.content_blocks if b["type"] == "tool_call"]
        assert len(blocks) == 1 and blocks[0]["args"] == call["args"] and blocks[0]["id"] == call["id"]

    invoked = llm.invoke(TOOL_Q)
    check(invoked)
    streamed = aggregate(list(llm.stream(TOOL_Q)))
    check(streamed)
    assert streamed.tool_calls == invoked.tool_calls
    check(await llm.ainvoke(TOOL_Q))
    check(aggregate([c async for c in llm.astream(TOOL_Q)]))


@pytest.mark.parametrize("model", [QWEN, LLAMA], ids=["qwen3", "llama"])
def test_tool_results_render_back_through_the_template(model):
    messages = [
        HumanMessage("What is magic_function(3)?"),
        AIMessage(
            "", tool_calls=[{"name": "magic_function", "args": {"input": 3}, "id": "call_1", "type": "tool_call"}]
        ),
        ToolMessage("5", tool_call_id="call_1"),
    ]
    core = _to_core_messages(messages)
    assert core[2].name == "magic_function"  # taken from the call it answers
    engine = Engine.get(model)
    prompt = engine.render(
        core, validated_options(tools=[{"type": "function", "function": {"name": "magic_function"}}])
    )
    if model == QWEN:
        assert '<tool_call>\n{"name": "magic_function", "arguments": {"input": 3}}\n</tool_call>' in prompt
        assert "<tool_response>\n5\n</tool_response>" in prompt
    else:
        assert '{"name": "magic_function", "parameters": {"input": 3}}<|eot_id|>' in prompt
        assert "<|start_header_id|>ipython<|end_header_id|>\n\n" in prompt
    msg = chat(model=model).bind_tools([magic_function]).invoke(messages)
    assert msg.usage_metadata["input_tokens"] == chat(model=model).get_num_tokens_from_messages(
        messages, tools=[magic_function]
    )


# ---------------------------------------------------------------------- structured output
@pytest.mark.parametrize("model", [QWEN, LLAMA], ids=["qwen3", "llama"])
@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_structured_output_pydantic_typeddict_and_dict(model, method):
    llm = chat(model=model, max_tokens=80)
    joke = llm.with_structured_output(Joke, method=method).invoke("Tell me a joke about cats.")
    assert isinstance(joke, Joke)
    as_dict = llm.with_structured_output(JokeDict, method=method).invoke("Tell me a joke about cats.")
    assert set(as_dict) == {"setup", "punchline"} and all(isinstance(v, str) for v in as_dict.values())
    schema = Joke.model_json_schema()
    from_schema = llm.with_structured_output(schema, method=method).invoke("Tell me a joke about cats.")
    assert set(from_schema) == {"setup", "punchline"}
    raw = llm.with_structured_output(Joke, method=method, include_raw=True).invoke("Tell me a joke about cats.")
    assert isinstance(raw["raw"], AIMessage) and isinstance(raw["parsed"], Joke) and raw["parsing_error"] is None
    if method == "json_schema":
        assert json.loads(raw["raw"].content) == raw["parsed"].model_dump()
    else:
        assert raw["raw"].tool_calls[0]["args"] == raw["parsed"].model_dump()


def test_structured_output_streams_and_nests():
    class Step(BaseModel):
        title: str
        minutes: int

    class Plan(BaseModel):
        name: str
        steps: list[Step]
        ready: bool

    llm = chat(max_tokens=200)
    plan = llm.with_structured_output(Plan).invoke("Plan a tiny project.")
    assert isinstance(plan, Plan) and len(plan.steps) <= 8
    streamed = list(llm.with_structured_output(Plan).stream("Plan a tiny project."))
    assert streamed and all(isinstance(p, Plan) for p in streamed) and streamed[-1] == plan


def test_json_schema_budget_too_small_is_a_clear_error():
    with pytest.raises(InvalidRequestError, match="max_tokens=8 is too small for this schema"):
        chat(max_tokens=8).with_structured_output(Joke).invoke("joke")


@pytest.mark.parametrize("model", [QWEN, LLAMA], ids=["qwen3", "llama"])
@pytest.mark.parametrize("budget", [16, 64, 300])
def test_json_mode_output_is_a_json_object_closed_within_the_budget(model, budget):
    raw = chat(model=model, max_tokens=budget).with_structured_output(None, method="json_mode", include_raw=True)
    out = raw.invoke("Return a JSON object.")
    assert isinstance(out["parsed"], dict) and out["parsing_error"] is None
    assert out["raw"].usage_metadata["output_tokens"] <= budget
    assert json.loads(out["raw"].content) == out["parsed"]


def test_json_mode_into_a_schema_reports_a_parsing_error_with_include_raw():
    out = chat(max_tokens=64).with_structured_output(Joke, method="json_mode", include_raw=True).invoke("joke")
    assert out["parsed"] is None and isinstance(out["parsing_error"], OutputParserException)
    assert isinstance(json.loads(out["raw"].content), dict)


def test_final_structured_result_is_never_repaired_json():
    parser = _StrictJsonOutputParser()
    with pytest.raises(OutputParserException, match="not one complete JSON value"):
        parser.parse_result([Generation(text='{"setup": "a cat walks')])
    assert parser.parse_result([Generation(text='{"setup": "a cat walks')], partial=True) == {"setup": "a cat walks"}


def test_with_structured_output_rejects_unknown_methods_and_kwargs():
    with pytest.raises(ValueError, match="method 'xml' is not supported"):
        chat().with_structured_output(Joke, method="xml")
    with pytest.raises(ValueError, match="unexpected keyword"):
        chat().with_structured_output(Joke, tools=[])


# ---------------------------------------------------------------------- messages


def test_pure_helpers():
    """LangChain's and OpenAI's forms of tool_choice and response_format, read by the core."""
    assert tool_choice_from(None) == "auto" and tool_choice_from(False) == "none"
    assert tool_choice_from("none") == "none"
    assert tool_choice_from("any") == tool_choice_from(True) == tool_choice_from({"type": "any"}) == "required"
    assert tool_choice_from({"type": "function", "function": {"name": "b"}}) == "b"
    assert tool_choice_from({"type": "tool", "name": "b"}) == "b"
    with pytest.raises(InvalidRequestError, match="tool_choice 3 is not understood"):
        tool_choice_from(3)
    assert response_format_from({"type": "json_object"}) == ResponseFormat(type="json_object")
    schema = {"type": "object", "properties": {}}
    assert response_format_from({"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}) == (
        ResponseFormat(type="json_schema", json_schema=schema)
    )
    assert response_format_from({"type": "text"}) is None
    with pytest.raises(InvalidRequestError, match="response_format"):
        response_format_from({"type": "xml"})
    with pytest.raises(InvalidRequestError, match="too small for JSON mode"):
        json_object_guidance(8)
    mode = json_object_guidance(16)  # JSON mode: a flat object's schema, closed within the budget while decoding
    assert (
        mode.type == "json_schema" and mode.shape is not None and json.loads(mode.data)["additionalProperties"] is False
    )


# ---------------------------------------------------------------------- sync/async parity
@pytest.mark.parametrize("execution", ["process", "inline"])
async def test_sync_and_async_give_the_same_answer(execution):
    llm = chat(max_tokens=30, execution=execution, kv_reuse=False)
    prompt = [SystemMessage("You are terse."), HumanMessage("Describe the NPU.")]
    sync = llm.invoke(prompt)
    asyn = await llm.ainvoke(prompt)
    assert sync.content == asyn.content and sync.usage_metadata == asyn.usage_metadata
    streamed = "".join(c.content for c in llm.stream(prompt))
    astreamed = "".join([c.content async for c in llm.astream(prompt)])
    assert streamed == astreamed == sync.content


# ---------------------------------------------------------------------- LCEL chains
DOCS = [
    Document(
        page_content="Prefill buckets: the NPU pads each prompt to 128, 256, 512 or more tokens.",
        metadata={"id": "buckets"},
    ),
    Document(page_content="Lemonade is made of lemons, sugar and water.", metadata={"id": "lemonade"}),
    Document(page_content="The hybrid mode decodes on the integrated GPU.", metadata={"id": "hybrid"}),
]


class KeywordRetriever(BaseRetriever):
    """Scores documents by how many query words they contain."""

    docs: list[Document]
    k: int = 1

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        words = {w.strip("?.,").lower() for w in query.split() if len(w) > 3}

        def score(doc: Document) -> int:
            text = doc.page_content.lower()
            return sum(w in text for w in words)

        return sorted(self.docs, key=score, reverse=True)[: self.k]


def format_docs(docs: list[Document]) -> str:
    return "\n\n".join(d.page_content for d in docs)


RAG_PROMPT = ChatPromptTemplate.from_messages(
    [("system", "Answer from the context only.\n\nContext:\n{context}"), ("human", "{question}")]
)
QA_PROMPT = ChatPromptTemplate.from_messages([("system", "You are terse."), ("human", "{question}")])
RAG_Q = "Which prefill buckets does the NPU pad prompts to?"

# A question of the bundled demo set, answered by the embedded extractive model (a span of the
# documents, as written there): chains with its answer can be checked word for word.
DEMO_DOCS = ROOT / "cli" / "demo_docs"
DEMO = json.loads((DEMO_DOCS / "questions.json").read_text(encoding="utf-8"))
DEMO_Q = DEMO["questions"][0]  # Who is the director of the Vantor Lab? Ilsa Brandecott
DEMO_PROMPT = ChatPromptTemplate.from_messages(
    [("system", DEMO["system"]), ("human", "Context: {context}\n\nQuestion: {question}")]
)
DEMO_INPUT = {
    "context": "\n\n".join((DEMO_DOCS / name).read_text(encoding="utf-8") for name in DEMO_Q["documents"]),
    "question": DEMO_Q["question"],
}


def test_a_chain_carries_the_answer_of_the_qa_model():
    qa = DEMO_PROMPT | ChatRyzenAI(model="tiny-qa-llama", temperature=0, max_tokens=16) | StrOutputParser()
    assert DEMO_Q["answer"] == "Ilsa Brandecott"
    assert qa.invoke(DEMO_INPUT) == DEMO_Q["answer"]
    assert "".join(qa.stream(DEMO_INPUT)) == DEMO_Q["answer"]

    async def run() -> tuple[str, str]:
        return await qa.ainvoke(DEMO_INPUT), "".join([p async for p in qa.astream(DEMO_INPUT)])

    assert asyncio.run(run()) == (DEMO_Q["answer"],) * 2


def test_keyword_retriever_finds_the_right_document():
    assert KeywordRetriever(docs=DOCS).invoke(RAG_Q)[0].metadata["id"] == "buckets"


def _tool_loop_messages(first: AIMessage) -> list[BaseMessage]:
    assert len(first.tool_calls) == 1 and first.tool_calls[0]["name"] == "add"
    return [HumanMessage("What is 2 + 3? Use the tool."), first, add.invoke(first.tool_calls[0])]


@pytest.mark.parametrize("params", MODELS)
def test_chains_sync(params):
    llm = chat(**params, max_tokens=16)
    answer = (QA_PROMPT | llm | StrOutputParser()).invoke({"question": "What is an NPU?"})
    # random weights: the text is noise, but it is the whole of the 16-token answer the model gave
    assert answer == llm.invoke(QA_PROMPT.invoke({"question": "What is an NPU?"})).content

    retriever = KeywordRetriever(docs=DOCS)
    rag = {"context": retriever | format_docs, "question": RunnablePassthrough()} | RAG_PROMPT | llm
    msg = rag.invoke(RAG_Q)
    expected = RAG_PROMPT.invoke({"context": DOCS[0].page_content, "question": RAG_Q}).to_messages()
    assert msg.usage_metadata["input_tokens"] == llm.get_num_tokens_from_messages(expected)
    assert (rag | StrOutputParser()).invoke(RAG_Q) == msg.content  # temperature 0: the same answer, as text

    first = llm.bind_tools([add], tool_choice="any", max_tokens=64).invoke("What is 2 + 3? Use the tool.")
    messages = _tool_loop_messages(first)
    assert isinstance(messages[-1], ToolMessage) and messages[-1].content == str(
        sum(first.tool_calls[0]["args"].values())
    )
    final = llm.bind_tools([add]).invoke(messages)
    assert isinstance(final, AIMessage)
    assert final.usage_metadata["input_tokens"] == llm.get_num_tokens_from_messages(messages, tools=[add])


@pytest.mark.parametrize("params", MODELS)
async def test_chains_async(params):
    llm = chat(**params, max_tokens=16)
    answer = await (QA_PROMPT | llm | StrOutputParser()).ainvoke({"question": "What is an NPU?"})
    assert answer == (await llm.ainvoke(QA_PROMPT.invoke({"question": "What is an NPU?"}))).content

    retriever = KeywordRetriever(docs=DOCS)
    rag = {"context": retriever | format_docs, "question": RunnablePassthrough()} | RAG_PROMPT | llm
    msg = await rag.ainvoke(RAG_Q)
    expected = RAG_PROMPT.invoke({"context": DOCS[0].page_content, "question": RAG_Q}).to_messages()
    assert msg.usage_metadata["input_tokens"] == llm.get_num_tokens_from_messages(expected)
    parts = [p async for p in (rag | StrOutputParser()).astream(RAG_Q)]
    assert all(isinstance(p, str) for p in parts) and "".join(parts) == msg.content

    first = await llm.bind_tools([add], tool_choice="any", max_tokens=64).ainvoke("What is 2 + 3? Use the tool.")
    messages = _tool_loop_messages(first)
    final = await llm.bind_tools([add]).ainvoke(messages)
    assert isinstance(final, AIMessage)
    assert final.usage_metadata["input_tokens"] == llm.get_num_tokens_from_messages(messages, tools=[add])
