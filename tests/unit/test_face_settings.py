"""What the LLM faces share (ryzenai_core.faces): settings declared once, one "did you mean", one vocabulary.

On the fake engine (tests/fake_engine.py); the encoder faces and the workers' pids are tested on real
engines in tests/integration/test_faces.py.
"""

from __future__ import annotations

import pytest
from llama_index.core.base.llms.types import ChatMessage
from pydantic import ValidationError

from conftest import TINY_QWEN3
from langchain_ryzenai import ChatRyzenAI
from llamaindex_ryzenai import RyzenAILLM
from ryzenai_core import InvalidRequestError
from ryzenai_core.faces import LLMSettings
from ryzenai_core.vocabulary import did_you_mean

QWEN = str(TINY_QWEN3)

pytestmark = pytest.mark.usefixtures("fake_model")


# ---------------------------------------------------------------------- settings declared once
#: Shared settings a face declares again, for its framework's own names (aliases).
_RENAMED_BY = {ChatRyzenAI: {"model", "enable_thinking"}, RyzenAILLM: set()}


@pytest.mark.parametrize("face", [ChatRyzenAI, RyzenAILLM])
def test_both_llm_faces_take_every_shared_setting_from_one_declaration(face):
    assert issubclass(face, LLMSettings)
    for name, shared in LLMSettings.model_fields.items():
        own = face.model_fields[name]
        if name in _RENAMED_BY[face]:
            assert own.default == shared.default
        else:
            assert repr(own) == repr(shared), name


def test_max_retries_and_repetition_penalty_are_llamaindex_settings_too():
    llm = RyzenAILLM(model=QWEN, max_retries=3, repetition_penalty=1.2)
    assert (llm.max_retries, llm.repetition_penalty) == (3, 1.2)
    assert (RyzenAILLM(model=QWEN).max_retries, RyzenAILLM(model=QWEN).repetition_penalty) == (1, None)
    for face, limit in ((ChatRyzenAI, "max_tokens"), (RyzenAILLM, "max_new_tokens")):
        with pytest.raises(ValidationError, match="max_retries"):
            face(model=QWEN, max_retries=-1)
        with pytest.raises(ValidationError, match="repetition_penalty"):
            face(model=QWEN, repetition_penalty=0)
        assert limit in face.model_fields


def test_a_llamaindex_repetition_penalty_and_retries_reach_the_core_request(fake_model, llamaindex_event_loop):
    llm = RyzenAILLM(model=QWEN, repetition_penalty=1.3, max_retries=0, max_new_tokens=2)
    llm.chat([ChatMessage(role="user", content="hi")])
    assert fake_model.options.repetition_penalty == 1.3 and fake_model.request.max_retries == 0
    llm.chat([ChatMessage(role="user", content="hi")], repetition_penalty=1.1)
    assert fake_model.options.repetition_penalty == 1.1  # per call over the field


# ---------------------------------------------------------------------- one "did you mean"
def test_did_you_mean_has_one_cut_off():
    assert did_you_mean("temprature", ["temperature", "top_p"]) == "temperature"
    assert did_you_mean("batchsize", ["batch_size", "embed_batch_size"]) == "batch_size"
    assert did_you_mean("topn", ["top_n", "top_k"]) == "top_n"
    assert did_you_mean("frobnicate", ["temperature", "max_tokens", "top_p"]) is None


@pytest.mark.parametrize(
    ("owner", "call"),
    [
        ("RyzenAILLM", lambda **kw: RyzenAILLM(model=QWEN).complete("hi", **kw)),
        ("ChatRyzenAI", lambda **kw: ChatRyzenAI(model=QWEN).invoke("hi", **kw)),
    ],
)
def test_a_misspelt_call_keyword_names_the_closest_one_in_one_wording_on_both_faces(owner, call, fake_model):
    with pytest.raises(
        InvalidRequestError,
        match=rf"^{owner} does not take the keyword argument\(s\) temprature \(did you mean 'temperature'\?\); "
        r"accepted per call: .*\btemperature\b",
    ):
        call(temprature=0)
    assert fake_model.requests == []  # refused before the engine
