"""Behaviours a plausible one-line bug would break and no other test pinned down.

Packing at the exact edges (one token over the limit, a bucket filled to the token), the stop
string that matched when several are set (not only the first listed), a call that may not be
sent again whose worker dies, a worker that dies on the resent call too, and a timeout that
fires in its time, not merely at some point.
"""

from __future__ import annotations

import time

import pytest
from langchain_core.messages import HumanMessage

from conftest import TINY_LLAMA, TINY_QWEN3, tear_first_deltas
from langchain_ryzenai import ChatRyzenAI
from llamaindex_ryzenai import RyzenAILLM
from ryzenai_core import ChatMessage, ContextBudget, Engine, GenerationTimeoutError, Request, WorkerDiedError
from ryzenai_core.options import validated_options
from ryzenai_core.package.packing import pack_context, packing_limit

QWEN_BUCKETS = (128, 256, 512, 768, 1024, 1536, 2048, 2304, 3072, 4096)
NPU = ContextBudget(window=4096, prompt_limit=4096, prefill_buckets=QWEN_BUCKETS, decode_buckets=(256, 512, 1024))
MESSAGES = [ChatMessage("system", "Answer briefly."), ChatMessage("user", "What is 2 plus 3?")]


# -- packing at the edges ------------------------------------------------------------------------


def test_a_default_that_fills_a_bucket_to_the_token_is_kept_as_it_is():
    plan = pack_context(NPU, 100, [308, 308, 308, 300], default_count=3)  # 100 + 924 = 1024
    assert plan.default.prompt_tokens == 1024 and plan.default.prefill_bucket == 1024 and plan.default.padding == 0
    assert plan.packed == plan.default and plan.padding_saved == 0 and plan.prefill_saved == 0


def test_one_token_into_the_next_bucket_is_trimmed_back_to_the_edge():
    plan = pack_context(NPU, 100, [308, 308, 309], max_context_loss=0.1)  # 1025: one token into 1536
    assert plan.default.prompt_tokens == 1025 and plan.default.prefill_bucket == 1536
    assert plan.strategy == "trim" and plan.packed.prompt_tokens == 1024 and plan.packed.prefill_bucket == 1024
    assert plan.packed.partial == 2 and plan.packed.partial_tokens == 308 and plan.context_added == -1


def test_context_exactly_at_the_limit_fits_and_one_token_more_does_not():
    budget = ContextBudget(window=4096, prompt_limit=2048, prefill_buckets=QWEN_BUCKETS)
    limit = packing_limit(budget)
    assert limit == 2048
    exact = pack_context(budget, 48, [1000, 1000], allow_partial=False)  # 48 + 2000 = 2048
    assert exact.packed.selected == (0, 1) and exact.packed.prompt_tokens == 2048
    over = pack_context(budget, 48, [1000, 1001], allow_partial=False)  # 2049: the second cannot go in whole
    assert over.packed.selected == (0,) and over.packed.prompt_tokens <= 2048
    assert over.default.prompt_tokens <= 2048  # not even the default packing goes over the limit
    cut = pack_context(budget, 48, [1000, 1001], default_count=2, max_context_loss=0.0)  # the default is 1 over
    assert cut.default.prompt_tokens <= 2048 and cut.packed.prompt_tokens <= 2048


# -- the stop string that matched ------------------------------------------------------------------


def _two_stops(text: str) -> tuple[str, str]:
    """A stop that ends early in ``text`` and one that ends later (and does not occur before it)."""
    early = text[4:7]
    for start in range(8, len(text) - 3):
        late = text[start : start + 3]
        if late.strip() and early.strip() and late not in text[: text.index(early) + len(early) + 2]:
            return early, late
    pytest.skip(f"no two distinct stops in {text!r}")


def test_the_stop_that_matched_first_in_the_text_is_reported_whatever_its_place_in_the_list():
    from llama_index.core.base.llms.types import ChatMessage as LIMessage

    engine = Engine.get(str(TINY_QWEN3))
    free = engine.generate(MESSAGES, validated_options(max_new_tokens=24, temperature=0, kv_reuse=False)).text
    early, late = _two_stops(free)
    stops = ["never-here", late, early]  # the one that matches is last in the list
    core = engine.generate(MESSAGES, validated_options(max_new_tokens=24, temperature=0, kv_reuse=False, stop=stops))
    assert core.stop_sequence == early and core.text == free[: free.index(early)]

    lc = ChatRyzenAI(model=str(TINY_QWEN3), max_tokens=24, temperature=0, kv_reuse=False)
    li = RyzenAILLM(model=str(TINY_QWEN3), max_new_tokens=24, temperature=0, kv_reuse=False)
    question = "What is 2 plus 3?"
    face_free = lc.invoke([HumanMessage(question)]).content
    assert isinstance(face_free, str)
    early, late = _two_stops(face_free)
    stops = ["never-here", late, early]
    msg = lc.invoke([HumanMessage(question)], stop=stops)
    assert msg.response_metadata["stop_sequence"] == early and msg.content == face_free[: face_free.index(early)]
    response = li.chat([LIMessage(role="user", content=question)], stop=stops)
    assert response.raw["stop_sequence"] == early and response.message.content == msg.content


# -- workers that die --------------------------------------------------------------------------------


def test_max_retries_0_fails_the_call_when_its_worker_dies(copy_package, monkeypatch, caplog):
    engine = Engine.get(copy_package(TINY_LLAMA, "no-retry"), execution="process")
    engine.load()
    torn = tear_first_deltas(monkeypatch, 1)
    with pytest.raises(WorkerDiedError):
        list(engine.run(Request(MESSAGES, validated_options(max_new_tokens=4, temperature=0), None, 0)))
    assert len(torn) == 1 and "sending the call again" not in caplog.text
    out = engine.generate(MESSAGES, validated_options(max_new_tokens=4, temperature=0))  # a new worker answers
    assert out.usage.completion_tokens == 4


@pytest.mark.slow
def test_a_worker_that_dies_twice_fails_a_call_allowed_one_retry(copy_package, monkeypatch, caplog):
    engine = Engine.get(copy_package(TINY_LLAMA, "dies-twice"), execution="process")
    engine.load()
    torn = tear_first_deltas(monkeypatch, 2)
    with pytest.raises(WorkerDiedError):
        list(engine.run(Request(MESSAGES, validated_options(max_new_tokens=4, temperature=0), None, 1)))
    assert len(torn) == 2 and caplog.text.count("sending the call again (1 of 1)") == 1
    torn.clear()
    lc = ChatRyzenAI(model=str(engine.package.path), max_tokens=4, temperature=0, max_retries=0)
    with pytest.raises(WorkerDiedError):
        lc.invoke("What is 2 plus 3?")
    assert ChatRyzenAI(model=str(engine.package.path), max_tokens=4, temperature=0).invoke("hi").content is not None


# -- a timeout fires in its time ---------------------------------------------------------------------


def test_a_one_second_timeout_returns_well_before_ten_seconds(copy_package):
    engine = Engine.get(copy_package(TINY_LLAMA, "on-time"), execution="process")
    engine.load()
    slow = validated_options(
        max_new_tokens=3,
        chat_template="{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}x",
    )
    started = time.monotonic()
    with pytest.raises(GenerationTimeoutError):
        engine.generate(MESSAGES, slow, timeout=1.0)
    elapsed = time.monotonic() - started
    assert 1.0 <= elapsed < 10.0, elapsed
