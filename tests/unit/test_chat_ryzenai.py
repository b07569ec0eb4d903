"""ChatRyzenAI on the fake engine (tests/fake_engine.py): identity, options, metadata, callbacks, tokens, budgets,
reasoning, messages, templates and models per call, batches.

The fake engine prepares each request with the core's own code (template, tokenizer, budget) and
writes what its script says; what the face sent is in ``fake_model.requests``. What needs the
real runtime (KV reuse, workers, cancellation, the event loop, chains) is in
tests/integration/test_langchain_chat.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
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
from langchain_core.tools import tool
from pydantic import ValidationError

import langchain_ryzenai
from conftest import REPLICAS, TINY_LLAMA, TINY_QWEN3, chat_model_start
from langchain_ryzenai import ChatRyzenAI
from langchain_ryzenai._convert import to_core_messages as _to_core_messages
from ryzenai_core import (
    ContextWindowExceededError,
    Engine,
    GenerationTimeoutError,
    InvalidRequestError,
    ModelNotFoundError,
)
from ryzenai_core.options import GenerationOptions

QWEN = str(TINY_QWEN3)
LLAMA = str(TINY_LLAMA)
THINK = "<think>\nstep one\n</think>\n\nfour"

pytestmark = pytest.mark.usefixtures("fake_model")


def chat(**kw: Any) -> ChatRyzenAI:
    return ChatRyzenAI(**{"model": QWEN, "temperature": 0, "max_tokens": 24, **kw})


@tool
def magic_function(input: int) -> int:
    """Apply a magic function to an input."""
    return input + 2


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


def test_only_set_options_are_sent_down(fake_model):
    def sent(llm: ChatRyzenAI, stop: list[str] | None, kwargs: dict) -> dict:
        llm.invoke([HumanMessage("hi")], stop=stop, **kwargs)
        default = GenerationOptions()
        options = fake_model.options
        return {k: v for k, v in vars(options).items() if k != "option_names" and v != getattr(default, k)}

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
    ls, params = chat_model_start(llm, "Hello")
    assert params["_type"] == "ryzenai-chat"
    assert params["model"] == QWEN and params["max_tokens"] == 7
    assert ls == {
        "ls_provider": "ryzenai",
        "ls_model_name": QWEN,
        "ls_model_type": "chat",
        "ls_temperature": 0,
        "ls_max_tokens": 7,
        "ls_stop": ["END"],
    }
    assert (
        chat_model_start(llm, "Hello", stop=["x"], model="tiny-random-llama")[0]["ls_model_name"] == "tiny-random-llama"
    )
    assert chat_model_start(llm, "Hello", stop=["x"])[0]["ls_stop"] == ["x"]


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


# ---------------------------------------------------------------------- reasoning
async def test_qwen3_reasoning_in_additional_kwargs_and_content_blocks(fake_model):
    llm = chat(max_tokens=40)
    fake_model.answer(THINK).answer(THINK).answer(THINK)
    msg = llm.invoke("What is 2 + 2?")
    assert msg.content == "four" and msg.additional_kwargs["reasoning_content"] == "step one"
    assert msg.content_blocks == [{"type": "reasoning", "reasoning": "step one"}, {"type": "text", "text": "four"}]
    chunks = [c async for c in llm.astream("What is 2 + 2?")]
    assert any(c.additional_kwargs.get("reasoning_content") for c in chunks[:-1])
    full = aggregate(chunks)
    assert full.additional_kwargs["reasoning_content"] == "step one" and full.content == "four"
    v1 = chat(max_tokens=40, output_version="v1").invoke("What is 2 + 2?")
    assert [b["type"] for b in v1.content] == ["reasoning", "text"]
    assert v1.content[0]["reasoning"] == "step one" and v1.text == "four"


def test_enable_thinking_reaches_the_template(fake_model):
    msgs = [HumanMessage("Hi")]
    default = chat().get_num_tokens_from_messages(msgs)
    assert chat(enable_thinking=False).get_num_tokens_from_messages(msgs) > default  # the empty <think></think>
    off = chat(max_tokens=4).invoke(msgs, reasoning=False)
    assert fake_model.options.enable_thinking is False
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


def test_model_override_per_call(fake_model):
    msg = chat(max_tokens=4).invoke("Hello", model="tiny-random-llama")
    assert msg.response_metadata["model_name"] == "tiny-random-llama"
    assert [e.package.name for e in fake_model.engines()] == ["tiny-random-llama"]  # that model answered
    assert chat(max_tokens=4).invoke("Hello", model_name=LLAMA).response_metadata["model_name"] == LLAMA


# ---------------------------------------------------------------------- batch
async def test_batch_and_abatch(fake_model):
    fake_model.respond(lambda request: f"About {request.messages[-1].content}")  # a greedy model: one answer a prompt
    llm = chat(max_tokens=12, kv_reuse=False)
    prompts = ["Hello", "Hey there", "What is a bucket?"]
    single = [llm.invoke(p).content for p in prompts]
    assert single == ["About Hello", "About Hey there", "About What is a bucket?"]
    assert [m.content for m in llm.batch(prompts)] == single
    assert [m.content for m in await llm.abatch(prompts)] == single


def test_session_options_reach_the_engine_as_in_llamaindex(fake_model):
    from llamaindex_ryzenai import RyzenAILLM

    so = {"log_severity_level": 3}
    llm = ChatRyzenAI(model=str(TINY_LLAMA), execution="inline", session_options=so, max_tokens=2)
    li = RyzenAILLM(model=str(TINY_LLAMA), execution="inline", session_options=so)
    assert llm.engine is li.engine
    assert json.loads(llm.engine.key.session_options) == so
    assert llm.invoke("hi").usage_metadata["output_tokens"] == 2
    _, params = chat_model_start(ChatRyzenAI(model=str(TINY_LLAMA), session_options={"enable_profiling": False}), "hi")
    assert params["session_options"] == {"enable_profiling": False}
