"""Reasoning settings in the forms users bring, read once by the core and decided per chat template.

``reasoning=True/False`` (ChatOllama's ``reasoning``, LlamaIndex's Ollama ``thinking``) is
``enable_thinking``; a string there, or ``reasoning_effort`` (OpenAI's), is an effort. What an
effort means is the template's: a template that reads ``reasoning_effort`` (gpt-oss's) gets the
level; Qwen3's, which turns reasoning on or off only, takes ``"none"`` (off) and refuses a
level with what it takes; a template without reasoning takes ``"none"`` and refuses a level.
No model is loaded: the requests stop where they reach the engine, prompts are rendered only.
"""

from __future__ import annotations

from typing import Any

import pytest

from conftest import TINY_LLAMA, TINY_QWEN3
from langchain_ryzenai import ChatRyzenAI
from llamaindex_ryzenai import RyzenAILLM
from ryzenai_core import ChatMessage, ChatTemplate, Engine, InvalidRequestError, ModelPackage, Request
from ryzenai_core.options import EFFORTS, validated_options
from ryzenai_core.request import TEMPLATE_LEVELS, resolve
from ryzenai_core.vocabulary import call_options

QWEN = str(TINY_QWEN3)
#: A template with reasoning levels, as gpt-oss's reads them (its default: medium).
LEVELS = "{% for m in messages %}{{ m.content }}{% endfor %}|Reasoning: {{ reasoning_effort | default('medium') }}"
#: A template that writes a reasoning block and has no switch (DeepSeek-R1's distills are such).
ALWAYS_THINKS = "{% for m in messages %}<|user|>{{ m.content }}{% endfor %}<|assistant|><think>\n"
HI = [ChatMessage("user", "Hi")]


class Stopped(Exception):
    """Raised where a request reaches the engine."""


@pytest.fixture
def sent(monkeypatch) -> list[Request]:
    seen: list[Request] = []

    def stop(self: Engine, request: Request) -> Any:
        seen.append(request)
        raise Stopped

    monkeypatch.setattr(Engine, "run", stop)
    return seen


def resolved(template: ChatTemplate, **options: Any):
    budget = ModelPackage.open(QWEN).budget
    return resolve(validated_options(**options), template, budget, len)


def qwen3() -> ChatTemplate:
    return ChatTemplate.for_package(ModelPackage.open(QWEN))


def test_a_bool_is_on_or_off_and_a_string_an_effort_under_every_word():
    for word in ("reasoning", "thinking", "think"):
        assert call_options("X", {word: True}) == {"enable_thinking": True}
        assert call_options("X", {word: False}) == {"enable_thinking": False}
        assert call_options("X", {word: "high"}) == {"reasoning_effort": "high"}
    assert call_options("X", {"reasoning_effort": "low", "enable_thinking": True}) == {
        "reasoning_effort": "low",
        "enable_thinking": True,
    }


def test_an_effort_no_provider_names_is_refused_with_the_list():
    with pytest.raises(InvalidRequestError, match=r"reasoning_effort='extreme'.*'none', 'minimal', 'low'"):
        validated_options(reasoning_effort="extreme")
    with pytest.raises(InvalidRequestError, match=r"reasoning_effort='High'"):  # the words as providers spell them
        validated_options(reasoning_effort="High")
    assert set(TEMPLATE_LEVELS) < set(EFFORTS)


def test_the_reasoning_effort_is_no_template_variable():
    with pytest.raises(InvalidRequestError, match="reasoning_effort.*cannot be a chat-template variable"):
        validated_options(template_vars={"reasoning_effort": "high"})


def test_each_face_takes_its_frameworks_word_when_made():
    assert ChatRyzenAI(model=QWEN, reasoning="high").reasoning_effort == "high"
    assert ChatRyzenAI(model=QWEN, reasoning=False).enable_thinking is False
    assert ChatRyzenAI(model=QWEN, model_kwargs={"reasoning": "low"}).reasoning_effort == "low"
    assert ChatRyzenAI(model=QWEN, reasoning_effort="none").reasoning_effort == "none"
    assert RyzenAILLM(model=QWEN, thinking="medium").reasoning_effort == "medium"
    assert RyzenAILLM(model=QWEN, thinking=True).enable_thinking is True
    assert RyzenAILLM(model=QWEN).model_copy(update={"thinking": "low"}).reasoning_effort == "low"
    with pytest.raises(InvalidRequestError, match="reasoning_effort is given twice"):
        ChatRyzenAI(model=QWEN, reasoning="high", reasoning_effort="low")
    with pytest.raises(ValueError, match="enable_thinking is given twice"):
        RyzenAILLM(model=QWEN, thinking=False, enable_thinking=True)
    with pytest.raises(ValueError, match="reasoning_effort"):
        RyzenAILLM(model=QWEN, thinking="extreme")


@pytest.mark.parametrize(
    ("word", "value", "expected"),
    [
        ("reasoning", "high", {"reasoning_effort": "high", "enable_thinking": None}),
        ("thinking", False, {"reasoning_effort": None, "enable_thinking": False}),
        ("reasoning_effort", "none", {"reasoning_effort": "none", "enable_thinking": None}),
    ],
)
def test_a_calls_reasoning_word_reaches_the_core_as_the_option_it_names(sent, word, value, expected):
    """(LlamaIndex sends every word as LangChain does: tests/contract/test_core_decides.py, per word.)"""
    with pytest.raises(Stopped):
        ChatRyzenAI(model=QWEN).invoke("Hi", **{word: value})
    with pytest.raises(Stopped):
        ChatRyzenAI(model=QWEN).bind(model_kwargs={word: value}).invoke("Hi")
    for request in sent:
        assert {k: getattr(request.options, k) for k in expected} == expected


def test_qwen3_turns_reasoning_on_or_off_and_refuses_a_level_with_what_it_takes():
    template = qwen3()
    off = resolved(template, reasoning_effort="none")
    assert off.enable_thinking is False and off.reasoning_effort is None
    assert resolve(off, template, ModelPackage.open(QWEN).budget, len) == off  # resolving again changes nothing
    for level in ("minimal", "low", "medium", "high", "xhigh", "max"):
        with pytest.raises(InvalidRequestError) as info:
            resolved(template, reasoning_effort=level)
        assert f"reasoning_effort={level!r}" in str(info.value)
        assert "turns reasoning on or off and has no levels" in str(info.value)
        assert "enable_thinking=True (on, also reasoning=True) or False" in str(info.value)
    with pytest.raises(InvalidRequestError, match="'none' turns reasoning off and enable_thinking=True turns it on"):
        resolved(template, reasoning_effort="none", enable_thinking=True)


def test_none_renders_qwen3s_prompt_with_reasoning_off():
    engine = Engine.get(QWEN, execution="inline")
    off = engine.render(HI, validated_options(reasoning_effort="none"))
    assert off == engine.render(HI, validated_options(enable_thinking=False))
    assert off != engine.render(HI, validated_options())
    assert off.endswith("<think>\n\n</think>\n\n")


def test_a_template_with_levels_gets_the_level_and_refuses_others():
    engine = Engine.get(QWEN, execution="inline")
    for level in TEMPLATE_LEVELS:
        prompt = engine.render(HI, validated_options(chat_template=LEVELS, reasoning_effort=level))
        assert prompt == f"Hi|Reasoning: {level}"
    assert engine.render(HI, validated_options(chat_template=LEVELS)) == "Hi|Reasoning: medium"
    for other in ("none", "minimal", "xhigh"):
        with pytest.raises(InvalidRequestError, match=r"takes the reasoning levels 'low', 'medium', 'high'"):
            engine.render(HI, validated_options(chat_template=LEVELS, reasoning_effort=other))


def test_a_template_without_reasoning_takes_none_and_refuses_a_level():
    template = ChatTemplate.for_package(ModelPackage.open(TINY_LLAMA))
    assert resolved(template, reasoning_effort="none").reasoning_effort is None
    with pytest.raises(InvalidRequestError, match="llama3 chat template of tiny-llama has no reasoning setting"):
        resolved(template, reasoning_effort="low")
    always = ChatTemplate(ALWAYS_THINKS, family="qwen3")
    assert always.reasoning_markers is not None and not always.supports_thinking
    with pytest.raises(InvalidRequestError, match="has no reasoning setting"):  # it cannot be turned off
        resolved(always, reasoning_effort="none")


def test_a_refusal_names_the_option_as_the_face_calls_it():
    options = validated_options(reasoning_effort="high", option_names={"reasoning_effort": "effort"})
    with pytest.raises(InvalidRequestError, match="effort='high'"):
        resolve(options, qwen3(), ModelPackage.open(QWEN).budget, len)
