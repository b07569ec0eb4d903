"""RyzenAILLM does not silently drop what it is given: unknown fields, aliases, context_window and
serialization round trips, on real OGA and the fixture models."""

from __future__ import annotations

import pickle

import llama_index.core
import pytest
from llama_index.core.base.llms.types import ChatMessage
from pydantic import ValidationError

from conftest import TINY_LLAMA
from llamaindex_ryzenai import RyzenAILLM
from ryzenai_core import InvalidRequestError

USER = [ChatMessage(role="user", content="Name a colour.")]

pytestmark = pytest.mark.usefixtures("llamaindex_event_loop")


@pytest.fixture(autouse=True)
def _fresh_settings(monkeypatch):
    """Every test starts with LlamaIndex's default tokenizer."""
    monkeypatch.setattr(llama_index.core, "global_tokenizer", None)


def make(**fields) -> RyzenAILLM:
    return RyzenAILLM(model=str(TINY_LLAMA), temperature=0, execution="process", **fields)


def usage(response) -> tuple[int, int | None]:
    """(completion tokens, the output budget the call asked for)."""
    kwargs = response.additional_kwargs
    return kwargs["completion_tokens"], kwargs["budget"]["requested_new_tokens"]


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
    assert "accepted fields: callback_manager, chat_template" in message and "use_package_tokenizer" in message


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
    assert make(context_window=300).chat(USER, max_tokens=4).additional_kwargs["budget"]["requested_new_tokens"] == 4


def test_context_window_larger_than_the_package_names_its_window():
    llm = make(context_window=8192)
    with pytest.raises(InvalidRequestError, match=r"context_window=8192 is larger than the window of tiny-llama \(4096"):
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
def test_to_dict_to_json_model_dump_and_pickle_round_trip():
    llm = make(max_tokens=7, context_window=1024, stop=["\n"], system_prompt="Be brief.")
    data = llm.to_dict()
    assert data["class_name"] == "RyzenAILLM" and data["max_new_tokens"] == 7
    for twin in (
        RyzenAILLM.from_dict(data),
        RyzenAILLM.from_json(llm.to_json()),
        RyzenAILLM.model_validate(llm.model_dump()),
    ):
        assert twin.to_dict() == data
    twin = pickle.loads(pickle.dumps(llm))
    assert twin.to_dict() == data
    assert usage(twin.chat(USER))[1] == 7
    with pytest.raises(ValidationError, match="class_name='OpenAI': these fields describe another LLM"):
        RyzenAILLM.model_validate({**data, "class_name": "OpenAI"})
