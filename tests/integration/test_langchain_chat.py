"""ChatRyzenAI on real OGA and the fixture models (random weights: the text is noise, the plumbing is real).

Metadata, tokens, budgets, overflow, tools, structured output, reasoning, sync/async parity,
and independent LCEL chains (prompt | model | parser, RAG over a retriever, a tool loop) on
the fixtures and on the CPU-runnable replicas of AMD's packages.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.exceptions import OutputParserException
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    trim_messages,
)
from langchain_core.output_parsers import StrOutputParser
from langchain_core.outputs import Generation
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnablePassthrough
from langchain_core.tools import tool
from pydantic import BaseModel, Field, ValidationError
from typing_extensions import TypedDict

import langchain_ryzenai
from conftest import LONG_PROMPT, REPLICAS, ROOT, TINY_LLAMA, TINY_QWEN3, longest_loop_gap
from langchain_ryzenai import ChatRyzenAI
from langchain_ryzenai._convert import to_core_messages as _to_core_messages
from langchain_ryzenai._parsers import StrictJsonOutputParser as _StrictJsonOutputParser
from ryzenai_core import ChatMessage as CoreMessage
from ryzenai_core import (
    ChatTemplateError,
    ContextWindowExceededError,
    Engine,
    GenerationError,
    GenerationTimeoutError,
    InvalidRequestError,
    ModelNotFoundError,
)
from ryzenai_core.options import (
    GenerationOptions,
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


# ---------------------------------------------------------------------- construction and identity
def test_construction_is_cheap_and_loads_nothing():
    before = Engine.registry.engines()
    for _ in range(200):
        ChatRyzenAI(model="/no/such/package", temperature=0)
    assert Engine.registry.engines() == before  # nothing opened, nothing loaded
    llm = ChatRyzenAI(model="/no/such/package")  # never opened until the first call
    with pytest.raises(ModelNotFoundError, match="model folder '/no/such/package' does not exist"):
        llm.invoke("hi")


def test_aliases_paths_and_strict_fields():
    assert ChatRyzenAI(model_name=QWEN).model == QWEN
    assert ChatRyzenAI(model=Path(QWEN)).model == QWEN
    assert ChatRyzenAI(model=QWEN, reasoning=False).enable_thinking is False
    assert ChatRyzenAI(model=QWEN, enable_thinking=True).enable_thinking is True
    with pytest.raises(InvalidRequestError, match="unknown parameter 'max_token'; did you mean 'max_tokens'"):
        ChatRyzenAI(model=QWEN, max_token=5)
    with pytest.raises(ValidationError, match="temperature"):
        ChatRyzenAI(model=QWEN, temperature=-1)
    with pytest.raises(InvalidRequestError, match="does not take the keyword argument.s. top_q"):
        chat().invoke("hi", top_q=0.5)
    with pytest.raises(InvalidRequestError, match=r"top_p=2\.0"):
        chat().invoke("hi", top_p=2.0)


def test_only_set_options_are_sent_down():
    def sent(llm: ChatRyzenAI, stop: list[str] | None, kwargs: dict) -> dict:
        _, request, _ = llm._request([HumanMessage("hi")], stop, kwargs)
        default = GenerationOptions()
        return {k: v for k, v in vars(request.options).items() if k != "option_names" and v != getattr(default, k)}

    assert sent(ChatRyzenAI(model=QWEN), None, {}) == {}
    assert sent(chat(top_k=5, model_kwargs={"x": 1}), ["END"], {"temperature": 0.5, "seed": None}) == {
        "max_new_tokens": 24,
        "temperature": 0.5,
        "top_k": 5,
        "stop": ("END",),
        "template_vars": {"x": 1},
    }


def test_identity_and_langsmith_params():
    llm = chat(stop=["END"], max_tokens=7)
    assert llm._llm_type == "ryzenai-chat"
    assert llm._identifying_params["model"] == QWEN and llm._identifying_params["max_tokens"] == 7
    assert llm._get_ls_params() == {
        "ls_provider": "ryzenai",
        "ls_model_name": QWEN,
        "ls_model_type": "chat",
        "ls_temperature": 0,
        "ls_max_tokens": 7,
        "ls_stop": ["END"],
    }
    assert llm._get_ls_params(stop=["x"], model="tiny-random-llama")["ls_model_name"] == "tiny-random-llama"
    assert llm._get_ls_params(stop=["x"])["ls_stop"] == ["x"]


def test_exports():
    assert langchain_ryzenai.__all__ == sorted(langchain_ryzenai.__all__)
    assert set(langchain_ryzenai.__all__) == {"ChatRyzenAI", "RyzenAIEmbeddings", "RyzenAIRerank", "__version__"}
    from importlib.metadata import version

    assert langchain_ryzenai.__version__ == version("ryzenai-llm")


# ---------------------------------------------------------------------- metadata
def test_usage_and_response_metadata_on_invoke_and_on_the_last_chunk():
    llm = chat(kv_reuse=False)
    msg = llm.invoke("Hello")
    prompt_tokens = llm.get_num_tokens_from_messages([HumanMessage("Hello")])
    assert msg.usage_metadata["input_tokens"] == prompt_tokens
    assert msg.usage_metadata["output_tokens"] == 24
    assert msg.usage_metadata["total_tokens"] == prompt_tokens + 24
    meta = msg.response_metadata
    assert (meta["finish_reason"], meta["stop_reason"]) == ("length", "max_tokens")
    assert (meta["model_name"], meta["model_provider"]) == (QWEN, "ryzenai")
    assert meta["timings"]["time_to_first_token"] > 0 and meta["timings"]["total"] >= meta["timings"]["prefill"]
    plan = meta["budget_plan"]
    assert (plan["prompt_tokens"], plan["max_new_tokens"], plan["window"]) == (prompt_tokens, 24, 4096)
    assert meta["dropped_messages"] == 0

    chunks = list(llm.stream("Hello"))
    assert all(c.usage_metadata is None for c in chunks[:-1])
    assert chunks[-1].chunk_position == "last" and chunks[-1].usage_metadata == msg.usage_metadata
    assert all("model_name" not in c.response_metadata for c in chunks[:-1])
    full = aggregate(chunks)
    assert full.content == msg.content and full.response_metadata["model_name"] == QWEN
    assert full.usage_metadata == msg.usage_metadata


def test_budget_plan_of_an_npu_package():
    package = str(REPLICAS / "Qwen3-4B_rai_1.8.0_npu_4K")
    llm = chat(model=package, provider="cpu", max_tokens=8)
    msg = llm.invoke("Hello")
    plan = msg.response_metadata["budget_plan"]
    n = msg.usage_metadata["input_tokens"]
    assert plan["prefill_bucket"] == 128 and plan["padding"] == 128 - n
    assert plan["decode_buckets"] == [256] and plan["window"] == 4096 and plan["prompt_limit"] == 4095
    assert msg.response_metadata["model_name"] == package


def test_kv_prefix_reuse_is_reported_as_cache_read():
    llm = chat(kv_reuse=True, max_tokens=4)
    system = "You answer questions about Ryzen AI packages. " * 10
    llm.invoke([SystemMessage(system), HumanMessage("first")])
    second = llm.invoke([SystemMessage(system), HumanMessage("second")])
    assert second.usage_metadata["input_token_details"]["cache_read"] > 50
    cold = chat(kv_reuse=False, max_tokens=4).invoke([SystemMessage(system), HumanMessage("second")])
    assert cold.usage_metadata["input_token_details"]["cache_read"] == 0


class _Tokens(BaseCallbackHandler):
    def __init__(self) -> None:
        self.tokens: list[str] = []
        self.chunks: list[Any] = []

    def on_llm_new_token(self, token: str, *, chunk: Any = None, **kwargs: Any) -> None:
        self.tokens.append(token)
        self.chunks.append(chunk)


async def test_callbacks_receive_every_token_sync_and_async():
    llm = chat(max_tokens=30, kv_reuse=False)
    streamed = list(llm.stream("Tell me about NPUs"))
    for run in ("invoke", "ainvoke"):
        handler = _Tokens()
        if run == "invoke":
            msg = llm.invoke("Tell me about NPUs", config={"callbacks": [handler]})
        else:
            msg = await llm.ainvoke("Tell me about NPUs", config={"callbacks": [handler]})
        assert "".join(handler.tokens) == msg.content
        assert len(handler.tokens) == len(streamed)
        assert handler.chunks[-1].message.chunk_position == "last"


def test_stop_strings_cut_and_never_leak():
    llm = chat(max_tokens=40, kv_reuse=False)
    full = llm.invoke("Hello").content
    stop = full[10:13]
    assert stop.strip()
    expected = full[: full.index(stop)]
    msg = llm.invoke("Hello", stop=[stop])
    assert msg.content == expected and msg.response_metadata["finish_reason"] == "stop"
    assert chat(max_tokens=40, kv_reuse=False, stop=[stop]).invoke("Hello").content == expected
    assert "".join(c.content for c in llm.stream("Hello", stop=[stop])) == expected


def test_timeout_is_a_typed_error():
    with pytest.raises(GenerationTimeoutError, match="timeout"):
        chat(timeout=1e-6, max_tokens=200).invoke("Hello")


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


# ---------------------------------------------------------------------- tokens and budgets
def test_token_counts_are_the_packages_own():
    llm = chat()
    msgs = [SystemMessage("You are terse."), HumanMessage("What is a prefill bucket?")]
    engine = Engine.get(QWEN)
    assert llm.get_num_tokens_from_messages(msgs) == engine.count_tokens(_to_core_messages(msgs))
    with_tools = llm.get_num_tokens_from_messages(msgs, tools=[magic_function])
    assert with_tools > llm.get_num_tokens_from_messages(msgs)
    assert llm.bind_tools([magic_function]).invoke(msgs).usage_metadata["input_tokens"] == with_tools
    assert llm.get_num_tokens_from_messages([]) == 0
    text = "Prompts are padded to the next bucket."
    assert llm.get_token_ids(text) == engine.encode(text)
    assert llm.get_num_tokens(text) == len(engine.encode(text))


def test_trim_messages_uses_real_counts():
    llm = chat(max_tokens=8)
    history: list[BaseMessage] = [SystemMessage("You are a Ryzen AI expert.")]
    for i in range(8):
        history += [HumanMessage(f"Question {i} about buckets and windows?"), AIMessage(f"Answer {i}: it depends.")]
    history.append(HumanMessage("And the prompt limit?"))
    budget = llm.get_num_tokens_from_messages(history) // 2
    trimmed = trim_messages(
        history, max_tokens=budget, token_counter=llm, strategy="last", include_system=True, start_on="human"
    )
    assert 1 < len(trimmed) < len(history)
    assert trimmed[0] == history[0] and trimmed[-1] == history[-1]
    assert llm.get_num_tokens_from_messages(trimmed) <= budget
    assert llm.invoke(trimmed).usage_metadata["input_tokens"] <= budget


def _long_history(llm: ChatRyzenAI) -> list[BaseMessage]:
    turn = "The NPU pads every prompt to a bucket and the window holds prompt plus output. " * 40
    history: list[BaseMessage] = [SystemMessage("Be brief.")]
    for _ in range(6):
        history += [HumanMessage(turn), AIMessage("Noted.")]
    history.append(HumanMessage("Summarize."))
    assert llm.get_num_tokens_from_messages(history) > 4096
    return history


def test_prompt_over_the_limit_is_a_typed_error_by_default():
    llm = chat(max_tokens=4)
    with pytest.raises(ContextWindowExceededError, match="over this package's prompt limit") as err:
        llm.invoke(_long_history(llm))
    assert err.value.prompt_tokens > err.value.limit == 4095


async def test_drop_oldest_keeps_the_system_prompt_and_the_newest_message():
    llm = chat(max_tokens=4, overflow="drop_oldest")
    history = _long_history(llm)
    msg = llm.invoke(history)
    dropped = msg.response_metadata["dropped_messages"]
    assert dropped >= 2 and msg.usage_metadata["input_tokens"] <= 4096
    kept = [history[0], *history[1 + dropped :]]
    assert llm.get_num_tokens_from_messages(kept) == msg.usage_metadata["input_tokens"]
    amsg = await chat(max_tokens=4).ainvoke(history, overflow="drop_oldest")
    assert amsg.usage_metadata["input_tokens"] == msg.usage_metadata["input_tokens"]
    assert amsg.response_metadata["dropped_messages"] == dropped


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


# ---------------------------------------------------------------------- reasoning
async def test_qwen3_reasoning_in_additional_kwargs_and_content_blocks():
    llm = chat(max_tokens=40)
    msg = llm.invoke("What is 2 + 2?", guidance=THINK)
    assert msg.content == "four" and msg.additional_kwargs["reasoning_content"] == "step one"
    assert msg.content_blocks == [{"type": "reasoning", "reasoning": "step one"}, {"type": "text", "text": "four"}]
    chunks = [c async for c in llm.astream("What is 2 + 2?", guidance=THINK)]
    assert any(c.additional_kwargs.get("reasoning_content") for c in chunks[:-1])
    full = aggregate(chunks)
    assert full.additional_kwargs["reasoning_content"] == "step one" and full.content == "four"
    v1 = chat(max_tokens=40, output_version="v1").invoke("What is 2 + 2?", guidance=THINK)
    assert [b["type"] for b in v1.content] == ["reasoning", "text"]
    assert v1.content[0]["reasoning"] == "step one" and v1.text == "four"


def test_enable_thinking_reaches_the_template():
    msgs = [HumanMessage("Hi")]
    default = chat().get_num_tokens_from_messages(msgs)
    assert chat(enable_thinking=False).get_num_tokens_from_messages(msgs) > default  # the empty <think></think>
    off = chat(max_tokens=4).invoke(msgs, reasoning=False)
    assert off.usage_metadata["input_tokens"] == chat(reasoning=False).get_num_tokens_from_messages(msgs)


def test_reasoning_of_earlier_turns_goes_back_into_the_template():
    engine = Engine.get(QWEN)
    for ai in (
        AIMessage("four", additional_kwargs={"reasoning_content": "step one"}),
        AIMessage([{"type": "reasoning", "reasoning": "step one"}, {"type": "text", "text": "four"}]),
        AIMessage([{"type": "thinking", "thinking": "step one", "signature": "x"}, {"type": "text", "text": "four"}]),
    ):
        prompt = engine.render(_to_core_messages([HumanMessage("2 + 2?"), ai]))
        assert prompt.endswith(
            "<|im_start|>assistant\n<think>\nstep one\n</think>\n\nfour<|im_end|>\n<|im_start|>assistant\n"
        )


# ---------------------------------------------------------------------- messages
def test_message_conversion():
    core = _to_core_messages(
        [
            SystemMessage([{"type": "text", "text": "Be "}, "brief."]),
            HumanMessage([{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]),
            AIMessage(
                [
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "t1", "name": "color_picker", "input": {"fav_color": "green"}},
                ]
            ),
            ToolMessage("purple", tool_call_id="t1"),
            ChatMessage(role="user", content="thanks"),
        ]
    )
    assert [(m.role, m.content) for m in core] == [
        ("system", "Be brief."),
        ("user", "hi"),
        ("assistant", "Let me look."),
        ("tool", "purple"),
        ("user", "thanks"),
    ]
    assert core[2].tool_calls[0].name == "color_picker" and core[2].tool_calls[0].arguments == {"fav_color": "green"}
    assert core[3].name == "color_picker" and core[3].tool_call_id == "t1"


def test_unsupported_inputs_are_clear_errors():
    with pytest.raises(InvalidRequestError, match="FunctionMessage.*use SystemMessage, HumanMessage"):
        _to_core_messages([FunctionMessage(name="f", content="x")])
    with pytest.raises(InvalidRequestError, match="role 'critic'"):
        _to_core_messages([ChatMessage(role="critic", content="x")])
    with pytest.raises(InvalidRequestError, match="type 'audio'.*not audio, video, files and documents"):
        _to_core_messages([HumanMessage([{"type": "audio", "base64": "AAAA", "mime_type": "audio/wav"}])])
    image = HumanMessage(
        [{"type": "text", "text": "what is this?"}, {"type": "image", "base64": "AAAA", "mime_type": "image/png"}]
    )
    with pytest.raises(InvalidRequestError, match="no vision model"):
        chat().invoke([image])


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
    assert mode.type == "json_schema" and mode.shape is not None and json.loads(mode.data)["additionalProperties"] is False


# ---------------------------------------------------------------------- templates and models per call
def test_model_kwargs_and_chat_template_override():
    msgs = [HumanMessage("Hello world")]
    short = chat(model=LLAMA, model_kwargs={"date_string": "1 Jan 2026"}).get_num_tokens_from_messages(msgs)
    long = chat(
        model=LLAMA, model_kwargs={"date_string": "the first day of January 2026"}
    ).get_num_tokens_from_messages(msgs)
    assert long > short
    bare = "{% for m in messages %}{{ m.content }}{% endfor %}"
    llm = chat(model=LLAMA, chat_template=bare)
    assert llm.get_num_tokens_from_messages(msgs) == llm.get_num_tokens("Hello world")
    msg = chat(model=LLAMA, max_tokens=4).invoke(msgs, chat_template=bare)
    assert msg.usage_metadata["input_tokens"] == llm.get_num_tokens("Hello world")


def test_model_override_per_call():
    msg = chat(max_tokens=4).invoke("Hello", model="tiny-random-llama")
    assert msg.response_metadata["model_name"] == "tiny-random-llama"
    assert chat(max_tokens=4).invoke("Hello", model_name=LLAMA).response_metadata["model_name"] == LLAMA


# ---------------------------------------------------------------------- sync/async parity, batch
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


async def test_batch_and_abatch():
    llm = chat(max_tokens=12, kv_reuse=False)
    prompts = ["Hello", "Hey there", "What is a bucket?"]
    single = [llm.invoke(p).content for p in prompts]
    assert [m.content for m in llm.batch(prompts)] == single
    assert [m.content for m in await llm.abatch(prompts)] == single


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


def test_session_options_reach_the_engine_as_in_llamaindex():
    from llamaindex_ryzenai import RyzenAILLM

    so = {"log_severity_level": 3}
    llm = ChatRyzenAI(model=str(TINY_LLAMA), execution="inline", session_options=so, max_tokens=2)
    li = RyzenAILLM(model=str(TINY_LLAMA), execution="inline", session_options=so)
    assert llm.engine is li.engine
    assert json.loads(llm.engine.key.session_options) == so
    assert llm.invoke("hi").usage_metadata["output_tokens"] == 2
    assert ChatRyzenAI(model=str(TINY_LLAMA), session_options={"enable_profiling": False})._identifying_params[
        "session_options"
    ] == {"enable_profiling": False}
