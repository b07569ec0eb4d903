"""The faces at their edges on the fake engine: several tool calls streamed to LangChain are as many
indexed calls, and LlamaIndex's ``context_window`` may be the package's whole window.
"""

from __future__ import annotations

import functools
import operator

import llama_index.core
import pytest
from langchain_core.tools import tool

from conftest import TINY_LLAMA, TINY_QWEN3
from langchain_ryzenai import ChatRyzenAI
from llamaindex_ryzenai import RyzenAILLM


@tool
def magic_function(input: int) -> int:
    """Apply a magic function to an input."""
    return input + 2


TWO_CALLS = "".join(
    f'<tool_call>\n{{"name": "magic_function", "arguments": {{"input": {n}}}}}\n</tool_call>\n' for n in (1, 2)
)


def test_two_streamed_tool_calls_add_up_to_two_calls(fake_model):
    model = ChatRyzenAI(model=str(TINY_QWEN3), temperature=0, max_tokens=200).bind_tools(
        [magic_function], parallel_tool_calls=True
    )
    fake_model.answer(TWO_CALLS)
    chunks = list(model.stream("Apply it to 1 and 2."))
    # each call is its own index, as a consumer that gathers streamed calls by index (OpenAI-style) needs
    assert [t["index"] for c in chunks for t in c.tool_call_chunks] == [0, 1]
    streamed = functools.reduce(operator.add, chunks)
    fake_model.answer(TWO_CALLS)
    invoked = model.invoke("Apply it to 1 and 2.")
    for msg in (streamed, invoked):
        assert [(c["name"], c["args"]) for c in msg.tool_calls] == [
            ("magic_function", {"input": 1}),
            ("magic_function", {"input": 2}),
        ]
        assert len({c["id"] for c in msg.tool_calls}) == 2
    assert [c["id"] for c in streamed.tool_calls] == [c["id"] for c in invoked.tool_calls]


@pytest.mark.usefixtures("llamaindex_event_loop", "fake_model")
def test_llamaindex_context_window_may_be_the_packages_whole_window(monkeypatch):
    monkeypatch.setattr(llama_index.core, "global_tokenizer", None)
    full = RyzenAILLM(model=str(TINY_LLAMA), temperature=0).metadata.context_window
    window = RyzenAILLM(model=str(TINY_LLAMA)).budget.window
    meta = RyzenAILLM(model=str(TINY_LLAMA), temperature=0, context_window=window).metadata
    assert meta.context_window == full
