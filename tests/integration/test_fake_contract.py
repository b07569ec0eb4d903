"""The fake engine (tests/fake_engine.py) answers as a fixture model does: the contract it keeps.

Each conversation runs twice: on the real fixture model, made to write a given text by a regex
grammar (random weights write what the grammar allows), and on the fake engine scripted to write
the same text. The chunks must have the same shape (which fields the streamed chunks and the last
chunk set, and their types), and the answer the same parts (text, reasoning, tool calls, finish
reason, stop string, prompt tokens, budget plan, dropped messages); both faces must make the same
messages of them; a request the core refuses must be refused with the same typed error, word for
word. If the core changes what a chunk carries, this fails until the fake does too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from llama_index.core.base.llms.types import ChatMessage as LIMessage

from conftest import TINY_LLAMA, TINY_QWEN3
from fake_engine import FakeModel, chunk_shape
from langchain_ryzenai import ChatRyzenAI
from llamaindex_ryzenai import RyzenAILLM
from ryzenai_core import (
    ChatMessage,
    ChatTemplateError,
    ContextWindowExceededError,
    Engine,
    InvalidRequestError,
)
from ryzenai_core.generation.streaming import Chunk, aggregate
from ryzenai_core.options import validated_options

QWEN, LLAMA = str(TINY_QWEN3), str(TINY_LLAMA)
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
QWEN_CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
LLAMA_CALL = '{"name": "add", "parameters": {"a": 2, "b": 3}}'

#: (model, what the model writes, options): each a conversation the two must answer alike.
SCRIPTS = [
    pytest.param(QWEN, "The bucket is 128 tokens.", {"max_new_tokens": 40}, id="text"),
    pytest.param(QWEN, "<think>\nstep one\n</think>\n\nfour", {"max_new_tokens": 40}, id="reasoning"),
    pytest.param(QWEN, "Hello there END and more", {"max_new_tokens": 40, "stop": ["END"]}, id="stop-string"),
    pytest.param(
        QWEN,
        "<think>\nuse the tool\n</think>\n\n" + QWEN_CALL,
        {"max_new_tokens": 80, "tools": [ADD]},
        id="qwen3-tool-call",
    ),
    pytest.param(LLAMA, LLAMA_CALL, {"max_new_tokens": 60, "tools": [ADD]}, id="llama-tool-call"),
    pytest.param(
        LLAMA,
        "Plain words from Llama.",
        {"max_new_tokens": 40, "template_vars": {"date_string": "1 Jan 2026"}},
        id="llama-text",
    ),
]
MESSAGES = [ChatMessage("system", "Answer briefly."), ChatMessage("user", "What is 2 plus 3?")]


def literal(text: str) -> str:
    """A regex matching exactly ``text``."""
    return re.sub(r"([\\.^$|?*+()\[\]{}])", r"\\\1", text)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Callable[[], Any]:
    """``with fake(): ...``: the engines opened in the block are fake ones (the fake_model fixture, for a block)."""
    from contextlib import contextmanager

    model = FakeModel()

    @contextmanager
    def block() -> Iterator[FakeModel]:
        with monkeypatch.context() as m:
            m.setattr(Engine, "registry", model.registry)
            yield model

    return block


def parts(chunks: list[Chunk]) -> dict[str, Any]:
    """What the answer is made of, whatever the chunk boundaries (tokenizations may differ under a grammar)."""
    whole = aggregate(iter(chunks))
    assert whole.usage is not None and whole.timings is not None
    return {
        "text": whole.text,
        "reasoning": whole.reasoning,
        "tool_calls": [(c.name, c.arguments, c.id) for c in whole.tool_calls],
        "finish_reason": whole.finish_reason,
        "stop_sequence": whole.stop_sequence,
        "prompt_tokens": whole.usage.prompt_tokens,
        # tokens counted and never shown: the end-of-turn token a model stops at
        "unshown_tokens": whole.usage.completion_tokens - sum(len(c.token_ids) for c in chunks),
        "plan": whole.plan,
        "dropped_messages": whole.dropped_messages,
        "provider": whole.provider,
        "cut": whole.cut,
        "timings": sorted(whole.timings.to_dict()),
    }


def shapes(chunks: list[Chunk]) -> tuple[set[str], dict[str, str]]:
    """The fields streamed chunks set, and the last chunk's shape."""
    streamed = set().union(*(chunk_shape(c) for c in chunks[:-1])) if len(chunks) > 1 else set()
    return streamed, chunk_shape(chunks[-1])


@pytest.mark.parametrize(("model", "writes", "options"), SCRIPTS)
def test_the_fakes_chunks_have_the_shape_and_parts_of_the_models(model, writes, options, fake):
    # the same request to both: the grammar makes the model write ``writes``; the fake is scripted to
    options = validated_options(guidance={"type": "regex", "data": literal(writes)}, **options)
    real = list(Engine.get(model, execution="inline").stream(MESSAGES, options))
    with fake() as scripted:
        scripted.answer(writes)
        faked = list(Engine.get(model, execution="inline").stream(MESSAGES, options))
    assert shapes(faked) == shapes(real)
    assert parts(faked) == parts(real)
    assert real[-1].timings.time_to_first_token is not None and faked[-1].timings.time_to_first_token is not None


def test_an_answer_cut_by_the_limit_is_length_with_the_limits_tokens_in_both(fake):
    options = validated_options(max_new_tokens=6, temperature=0, kv_reuse=False)
    real = list(Engine.get(QWEN, execution="inline").stream(MESSAGES, options))
    with fake():
        faked = list(Engine.get(QWEN, execution="inline").stream(MESSAGES, options))
    for chunks in (real, faked):
        assert chunks[-1].finish_reason == "length" and chunks[-1].usage.completion_tokens == 6
    assert shapes(faked)[1] == shapes(real)[1]
    assert {k: v for k, v in parts(faked).items() if k != "text"} == {
        k: v for k, v in parts(real).items() if k != "text"
    }


def test_dropped_turns_are_dropped_alike(fake):
    turn = "The NPU pads every prompt to a bucket and the window holds prompt plus output. " * 40
    history = [ChatMessage("system", "Be brief.")]
    for _ in range(6):
        history += [ChatMessage("user", turn), ChatMessage("assistant", "Noted.")]
    history.append(ChatMessage("user", "Summarize."))
    options = validated_options(max_new_tokens=4, overflow="drop_oldest", guidance={"type": "regex", "data": "ok"})
    real = list(Engine.get(QWEN, execution="inline").stream(history, options))
    with fake() as scripted:
        scripted.answer("ok")
        faked = list(Engine.get(QWEN, execution="inline").stream(history, options))
    assert parts(faked) == parts(real) and parts(real)["dropped_messages"] >= 2


@pytest.mark.parametrize(
    ("messages", "options", "error"),
    [
        pytest.param(
            [ChatMessage("user", "word " * 5000)],
            {"max_new_tokens": 4},
            ContextWindowExceededError,
            id="over-the-limit",
        ),
        pytest.param(
            MESSAGES, {"chat_template": "{{ raise_exception('boom') }}"}, ChatTemplateError, id="template-raises"
        ),
        pytest.param(
            MESSAGES,
            {
                "max_new_tokens": 4,
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "schema": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
                    },
                },
            },
            InvalidRequestError,
            id="schema-over-the-budget",
        ),
        pytest.param([], {}, InvalidRequestError, id="no-messages"),
    ],
)
def test_a_refused_request_is_the_same_typed_error_in_both(messages, options, error, fake):
    def refusal() -> str:
        with pytest.raises(error) as info:
            list(Engine.get(QWEN, execution="inline").stream(messages, validated_options(**options)))
        return str(info.value)

    real = refusal()
    with fake():
        assert refusal() == real


def test_the_fakes_token_counts_and_prompts_are_the_models(fake):
    real = Engine.get(QWEN, execution="inline")
    options = validated_options(tools=[ADD])
    expected = (real.count_tokens(MESSAGES, options), real.render(MESSAGES, options), real.encode("héllo \x00 wörld"))
    with fake():
        engine = Engine.get(QWEN, execution="inline")
        assert (
            engine.count_tokens(MESSAGES, options),
            engine.render(MESSAGES, options),
            engine.encode("héllo \x00 wörld"),
        ) == expected
        assert engine.decode(expected[2]) == real.decode(expected[2])


# ---------------------------------------------------------------------- what the faces make of them
@pytest.mark.parametrize(("model", "writes", "options"), SCRIPTS)
def test_both_faces_make_the_same_messages_of_the_fakes_chunks(model, writes, options, fake):
    lc_kwargs = {"model_kwargs": {"template_vars": options["template_vars"]}} if "template_vars" in options else {}
    call = {k: v for k, v in options.items() if k not in ("max_new_tokens", "template_vars")}
    lc = ChatRyzenAI(model=model, max_tokens=options["max_new_tokens"], execution="inline", **lc_kwargs)
    li = RyzenAILLM(
        model=model,
        max_new_tokens=options["max_new_tokens"],
        execution="inline",
        template_vars=options.get("template_vars", {}),
    )
    lc_messages = [SystemMessage("Answer briefly."), HumanMessage("What is 2 plus 3?")]
    li_messages = [
        LIMessage(role="system", content="Answer briefly."),
        LIMessage(role="user", content="What is 2 plus 3?"),
    ]
    guided = {**call, "guidance": {"type": "regex", "data": literal(writes)}}

    def answers() -> tuple[AIMessage, Any]:
        return lc.invoke(lc_messages, **guided), li.chat(li_messages, **guided)

    real_lc, real_li = answers()
    with fake() as scripted:
        scripted.answer(writes).answer(writes)
        fake_lc, fake_li = answers()

    def langchain(msg: AIMessage) -> dict[str, Any]:
        meta = {k: v for k, v in msg.response_metadata.items() if k != "timings"}
        meta["timings"] = sorted(msg.response_metadata["timings"])
        usage = {**msg.usage_metadata, "output_tokens": None, "total_tokens": None}
        return {
            "content": msg.content,
            "extra": msg.additional_kwargs,
            "calls": msg.tool_calls,
            "meta": meta,
            "usage": usage,
        }

    def llamaindex(response: Any) -> dict[str, Any]:
        raw = {k: v for k, v in response.raw.items() if k not in ("timings", "usage")}
        extra = {
            k: v
            for k, v in response.additional_kwargs.items()
            if k not in ("timings", "completion_tokens", "total_tokens")
        }
        blocks = [type(b).__name__ for b in response.message.blocks]
        return {"content": response.message.content, "blocks": blocks, "raw": raw, "extra": extra}

    assert langchain(fake_lc) == langchain(real_lc)
    assert llamaindex(fake_li) == llamaindex(real_li)
