"""Reasoning settings through both faces on the tiny Qwen3 fixture (its template turns reasoning on or off).

``reasoning_effort="none"`` (or ``reasoning="none"``) is reasoning off, the prompt that
``enable_thinking=False`` makes; a level is refused by the worker's resolution with what
Qwen3's template takes, in either face; LlamaIndex's ``metadata`` counts the template's own
tokens with the effort the object runs with. (Words and templates: tests/unit/test_reasoning_settings.py.)
"""

from __future__ import annotations

import pytest
from llama_index.core.base.llms.types import ChatMessage, MessageRole

from conftest import TINY_QWEN3
from langchain_ryzenai import ChatRyzenAI
from llamaindex_ryzenai import RyzenAILLM
from ryzenai_core import InvalidRequestError

QWEN = str(TINY_QWEN3)
LI = [ChatMessage(role=MessageRole.USER, content="What runs on the NPU?")]


def test_none_is_reasoning_off_and_a_level_is_refused_with_what_qwen3_takes():
    lc = ChatRyzenAI(model=QWEN, temperature=0, max_tokens=4)
    off = lc.invoke("What runs on the NPU?", enable_thinking=False)
    for words in ({"reasoning_effort": "none"}, {"reasoning": "none"}):
        msg = lc.invoke("What runs on the NPU?", **words)
        assert msg.usage_metadata["input_tokens"] == off.usage_metadata["input_tokens"]
        assert msg.content == off.content
    assert lc.invoke("What runs on the NPU?").usage_metadata["input_tokens"] != off.usage_metadata["input_tokens"]
    with pytest.raises(InvalidRequestError, match=r"reasoning_effort='high': the qwen3 chat template.*has no levels"):
        lc.invoke("What runs on the NPU?", reasoning="high")
    li = RyzenAILLM(model=QWEN, temperature=0, max_new_tokens=4)
    assert li.chat(LI, thinking="none").raw["usage"]["prompt_tokens"] == off.usage_metadata["input_tokens"]
    with pytest.raises(InvalidRequestError, match=r"reasoning_effort='low'.*enable_thinking=True \(on"):
        li.chat(LI, thinking="low")
    with pytest.raises(InvalidRequestError, match=r"reasoning_effort='medium'"):
        RyzenAILLM(model=QWEN, thinking="medium").chat(LI)


def test_llamaindex_metadata_counts_the_template_with_the_objects_reasoning():
    """Qwen3's template writes an empty reasoning block when reasoning is off: fewer tokens left to pack."""
    llm = RyzenAILLM(model=QWEN)
    default = llm.metadata.context_window
    off = llm.model_copy(update={"reasoning_effort": "none"})  # a copy shares the counts already made
    assert off.metadata.context_window == RyzenAILLM(model=QWEN, enable_thinking=False).metadata.context_window
    assert off.metadata.context_window < default
