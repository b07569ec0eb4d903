"""RyzenAILLM does not silently drop what it is given (on the fake engine, tests/fake_engine.py): unknown fields,
aliases, context_window, serialization round trips and copies (deepcopy, model_copy)."""

from __future__ import annotations

import copy
import logging
import pickle

import llama_index.core
import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.tools import FunctionTool
from pydantic import ValidationError

from conftest import TINY_LLAMA, TINY_QWEN3
from llamaindex_ryzenai import RyzenAILLM
from ryzenai_core import InvalidRequestError

USER = [ChatMessage(role="user", content="Name a colour.")]

pytestmark = pytest.mark.usefixtures("llamaindex_event_loop", "fake_model")


@pytest.fixture(autouse=True)
def _fresh_settings(monkeypatch):
    """Every test starts with LlamaIndex's default tokenizer."""
    monkeypatch.setattr(llama_index.core, "global_tokenizer", None)


def make(**fields) -> RyzenAILLM:
    return RyzenAILLM(**{"model": str(TINY_LLAMA), "temperature": 0, "execution": "process", **fields})


def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def usage(response) -> tuple[int, int | None]:
    """(completion tokens, the output budget the call asked for)."""
    kwargs = response.additional_kwargs
    return kwargs["completion_tokens"], kwargs["budget_plan"]["requested_new_tokens"]


# ---------------------------------------------------------------------- unknown fields and aliases
@pytest.mark.parametrize(
    ("field", "suggestion"),
    [("max_new_tokenz", "'max_new_tokens'"), ("temprature", "'temperature'"), ("contex_window", "'context_window'")],
)
def test_an_unknown_field_is_an_error_naming_the_closest_field(field, suggestion):
    with pytest.raises(ValidationError) as info:
        make(**{field: 5})
    message = str(info.value)
    assert f"unknown field(s) '{field}' (did you mean {suggestion}" in message
    # the accepted fields are listed, LlamaIndex's own included
    assert "accepted fields: adapter, adapters, callback_manager, chat_template" in message
    assert "use_package_tokenizer" in message


def test_an_unknown_field_without_a_close_name_lists_the_accepted_ones():
    with pytest.raises(ValidationError, match=r"unknown field\(s\) 'colour'; accepted fields: .*max_new_tokens"):
        make(colour="blue")


def test_max_tokens_is_max_new_tokens():
    llm = make(max_tokens=5)
    assert llm.max_new_tokens == 5 and llm.metadata.num_output == 5
    tokens, asked = usage(llm.chat(USER))
    assert asked == 5 and tokens <= 5
    assert make(max_tokens=5, max_new_tokens=5).max_new_tokens == 5
    with pytest.raises(ValidationError, match="max_tokens=5 and max_new_tokens=6 disagree.*pass only max_new_tokens"):
        make(max_tokens=5, max_new_tokens=6)


def test_model_copy_updates_are_checked_like_fields():
    llm = make(max_new_tokens=12)
    assert llm.model_copy(update={"max_tokens": 3}).max_new_tokens == 3
    with pytest.raises(ValueError, match=r"unknown field\(s\) 'temprature' \(did you mean 'temperature'"):
        llm.model_copy(update={"temprature": 0.5})


# ---------------------------------------------------------------------- context_window
def test_context_window_lowers_the_reported_window_and_bounds_the_output():
    full = make().metadata
    llm = make(context_window=300)
    meta = llm.metadata
    assert meta.context_window == 300 < full.context_window
    assert meta.num_output == full.num_output == 256
    # without max_new_tokens a call stops at what metadata promised, not at the end of the package's window
    tokens, asked = usage(llm.chat(USER))
    assert asked == 256 and tokens <= 256
    tokens, asked = usage(make().chat(USER, max_new_tokens=4))
    assert asked == 4
    assert (
        make(context_window=300).chat(USER, max_tokens=4).additional_kwargs["budget_plan"]["requested_new_tokens"] == 4
    )


def test_context_window_larger_than_the_package_names_its_window():
    llm = make(context_window=8192)
    with pytest.raises(
        InvalidRequestError, match=r"context_window=8192 is larger than the window of tiny-llama \(4096"
    ):
        llm.metadata  # noqa: B018
    with pytest.raises(InvalidRequestError, match="leave context_window unset"):
        llm.chat(USER)


def test_context_window_must_leave_room_for_a_prompt():
    with pytest.raises(ValidationError, match="context_window=64 leaves no room for a prompt after max_new_tokens=64"):
        make(context_window=64, max_new_tokens=64)
    llm = make(context_window=200)  # the package's default output is 256 tokens
    with pytest.raises(InvalidRequestError, match="context_window=200 leaves no room .* after 256 output tokens"):
        llm.metadata  # noqa: B018
    assert make(context_window=200, max_new_tokens=50).metadata.context_window == 200


# ---------------------------------------------------------------------- serialization
def test_to_dict_to_json_model_dump_and_pickle_round_trip(caplog):
    llm = make(max_tokens=7, context_window=1024, stop=["\n"], system_prompt="Be brief.")
    data = llm.to_dict()
    assert data["class_name"] == "RyzenAILLM" and data["max_new_tokens"] == 7
    for twin in (
        RyzenAILLM.from_dict(data),
        RyzenAILLM.from_json(llm.to_json()),
        RyzenAILLM.model_validate(llm.model_dump()),
    ):
        assert twin.to_dict() == data
    llm.chat(USER)  # a loaded engine is not pickled: the copy reopens the shared one on first use
    with caplog.at_level(logging.WARNING):
        twin = pickle.loads(pickle.dumps(llm))
    assert twin.to_dict() == data and not caplog.records
    assert usage(twin.chat(USER))[1] == 7
    with pytest.raises(ValidationError, match="class_name='OpenAI': these fields describe another LLM"):
        RyzenAILLM.model_validate({**data, "class_name": "OpenAI"})


def test_pickling_never_changes_the_original():
    llm = make(messages_to_prompt=lambda messages: "unpicklable")
    pickle.dumps(llm)  # LlamaIndex leaves out what cannot be pickled, from the pickle only
    assert llm.messages_to_prompt([]) == "unpicklable"


# ---------------------------------------------------------------------- copies
@pytest.mark.parametrize("used", [False, True], ids=["fresh", "after-a-call"])
@pytest.mark.parametrize("how", ["deepcopy", "model_copy"])
def test_deep_copies_share_the_engine_and_both_generate(how, used):
    llm = make(max_new_tokens=6)
    if used:
        llm.chat(USER)
    twin = copy.deepcopy(llm) if how == "deepcopy" else llm.model_copy(deep=True)
    assert twin is not llm and twin.to_dict() == llm.to_dict()
    assert usage(twin.chat(USER))[1] == 6
    assert usage(llm.chat(USER))[1] == 6
    assert twin.engine is llm.engine  # one Engine: one loaded model, one worker


def test_a_deep_copy_honours_changed_fields():
    llm = make(max_new_tokens=12)
    llm.chat(USER)
    short = llm.model_copy(update={"max_new_tokens": 3}, deep=True)
    tokens, asked = usage(short.chat(USER))
    assert asked == 3 and tokens <= 3
    assert short.engine is llm.engine and short.tokenizer is llm.tokenizer
    assert usage(llm.chat(USER))[1] == 12  # the original keeps its fields
    # a copy pointed at another package uses that package, never the original's loaded model
    other = llm.model_copy(update={"model": str(TINY_QWEN3)}, deep=True)
    assert other.engine.package.name == "tiny-qwen3" and other.chat(USER).message.content is not None
    assert llm.engine.package.name == "tiny-llama"
    assert copy.copy(llm).model_copy(update={"model": str(TINY_QWEN3)}).engine.package.name == "tiny-qwen3"


# llama-index-workflows runs inspect.getmembers() on the agent (pydantic's deprecated instance
# properties): warnings from the framework, not from this package.
@pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecationWarning")
def test_a_deep_copied_agent_shares_the_model():
    llm = make(max_new_tokens=64)
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(multiply)], llm=llm, initial_tool_choice="multiply")
    twin = copy.deepcopy(agent)
    assert twin.llm is not llm and twin.llm.engine is llm.engine
    assert twin.llm.chat_with_tools(twin.tools, "6 times 7?", tool_required=True).message.blocks
