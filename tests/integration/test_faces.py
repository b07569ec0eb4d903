"""What the faces share (ryzenai_core.faces): settings declared once, one "did you mean", one vocabulary.

Real engines on the fixture models: the LLM faces on tiny Qwen3, the encoder faces on the tiny
sentence-transformers and cross-encoder folders.
"""

from __future__ import annotations

import os
import warnings

import pytest
from pydantic import ValidationError

from conftest import FIXTURES, TINY_QWEN3, process_alive
from langchain_ryzenai import ChatRyzenAI, RyzenAIEmbeddings
from langchain_ryzenai import RyzenAIRerank as LangChainRerank
from llamaindex_ryzenai import RyzenAIEmbedding, RyzenAILLM
from llamaindex_ryzenai import RyzenAIRerank as LlamaIndexRerank
from ryzenai_core import InvalidRequestError
from ryzenai_core.embeddings.embedding import EmbeddingEngine
from ryzenai_core.faces import LLMSettings
from ryzenai_core.rerank.engine import RerankEngine
from ryzenai_core.vocabulary import did_you_mean

QWEN = str(TINY_QWEN3)
TINY_ST = str(FIXTURES / "embeddings" / "tiny-bert-st")
CROSS = str(FIXTURES / "rerank" / "tiny-bert-cross-encoder")
ENCODER_FACES = [
    pytest.param(RyzenAIEmbeddings, TINY_ST, id="langchain-embeddings"),
    pytest.param(RyzenAIEmbedding, TINY_ST, id="llamaindex-embedding"),
    pytest.param(LangChainRerank, CROSS, id="langchain-rerank"),
    pytest.param(LlamaIndexRerank, CROSS, id="llamaindex-rerank"),
]


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


def test_a_llamaindex_repetition_penalty_and_retries_reach_the_core_request():
    llm = RyzenAILLM(model=QWEN, repetition_penalty=1.3, max_retries=0)
    request = llm._request([], {})
    assert request.options.repetition_penalty == 1.3 and request.max_retries == 0
    assert llm._request([], {"repetition_penalty": 1.1}).options.repetition_penalty == 1.1  # per call over the field


# ---------------------------------------------------------------------- one "did you mean"
def test_did_you_mean_has_one_cut_off():
    assert did_you_mean("temprature", ["temperature", "top_p"]) == "temperature"
    assert did_you_mean("batchsize", ["batch_size", "embed_batch_size"]) == "batch_size"
    assert did_you_mean("topn", ["top_n", "top_k"]) == "top_n"
    assert did_you_mean("frobnicate", ["temperature", "max_tokens", "top_p"]) is None


@pytest.mark.parametrize(
    ("face", "folder", "typo", "suggestion"),
    [
        pytest.param(ChatRyzenAI, QWEN, "max_retires", "max_retries", id="langchain-chat"),
        pytest.param(RyzenAILLM, QWEN, "max_retires", "max_retries", id="llamaindex-llm"),
        pytest.param(RyzenAIEmbeddings, TINY_ST, "max_shape", "max_shapes", id="langchain-embeddings"),
        pytest.param(RyzenAIEmbedding, TINY_ST, "max_shape", "max_shapes", id="llamaindex-embedding"),
        pytest.param(LangChainRerank, CROSS, "max_shape", "max_shapes", id="langchain-rerank"),
        pytest.param(LlamaIndexRerank, CROSS, "max_shape", "max_shapes", id="llamaindex-rerank"),
    ],
)
def test_a_misspelt_setting_on_each_face_names_the_closest_one(face, folder, typo, suggestion):
    with pytest.raises((InvalidRequestError, ValidationError), match=rf"'{typo}'.*did you mean '{suggestion}'\?"):
        face(model=folder, **{typo: 1})


@pytest.mark.parametrize(
    ("owner", "call"),
    [
        ("RyzenAILLM", lambda **kw: RyzenAILLM(model=QWEN).complete("hi", **kw)),
        ("ChatRyzenAI", lambda **kw: ChatRyzenAI(model=QWEN).invoke("hi", **kw)),
    ],
)
def test_a_misspelt_call_keyword_names_the_closest_one_in_one_wording_on_both_faces(owner, call):
    with pytest.raises(
        InvalidRequestError,
        match=rf"^{owner} does not take the keyword argument\(s\) temprature \(did you mean 'temperature'\?\); "
        r"accepted per call: .*\btemperature\b",
    ):
        call(temprature=0)


# ---------------------------------------------------------------------- execution, formerly isolation
@pytest.mark.parametrize(("face", "folder"), ENCODER_FACES)
def test_an_encoder_face_takes_execution_and_runs_inline_without_a_worker(face, folder):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = face(model=folder, execution="inline")
    assert model.execution == "inline" and model.engine.execution == "inline"
    assert model.engine.describe()["execution"] == "inline"
    assert model.engine.worker_pids() == []


@pytest.mark.parametrize(("face", "folder"), ENCODER_FACES)
@pytest.mark.parametrize(("old", "new"), [("thread", "inline"), ("process", "process")])
def test_the_former_isolation_setting_warns_and_works(face, folder, old, new):
    with pytest.warns(DeprecationWarning, match=rf"isolation='{old}' is deprecated; use execution='{new}'"):
        model = face(model=folder, isolation=old)
    assert model.execution == new
    assert model.engine is face(model=folder, execution=new).engine  # the same shared engine


@pytest.mark.parametrize(("engine_class", "folder"), [(EmbeddingEngine, TINY_ST), (RerankEngine, CROSS)])
def test_the_core_encoder_engines_take_both_spellings(engine_class, folder):
    with pytest.warns(DeprecationWarning, match="isolation='thread' is deprecated; use execution='inline'"):
        old = engine_class(folder, isolation="thread")
    assert old.execution == "inline"
    with pytest.warns(DeprecationWarning, match="use execution='inline'"):
        shared = engine_class.get(folder, isolation="thread")
    assert shared is engine_class.get(folder, execution="inline")
    with pytest.raises(InvalidRequestError, match="pass only execution"), pytest.warns(DeprecationWarning):
        engine_class(folder, isolation="thread", execution="process")
    with pytest.raises(InvalidRequestError, match="execution 'thread' is not one of 'process', 'inline'"):
        engine_class(folder, execution="thread")


def test_an_encoder_face_in_a_worker_process_reports_its_pid():
    embeddings = RyzenAIEmbeddings(model=TINY_ST, execution="process")
    assert len(embeddings.embed_query("hello")) > 0
    (pid,) = embeddings.engine.worker_pids()
    assert pid != os.getpid() and process_alive(pid)


# ---------------------------------------------------------------------- a face's worker pid
def test_both_llm_faces_give_the_pid_of_the_worker_they_share():
    lc = ChatRyzenAI(model=QWEN, max_tokens=2, execution="process")
    assert lc.invoke("hi").usage_metadata["output_tokens"] <= 2
    pid = lc.worker_pid()
    assert pid is not None and pid != os.getpid() and process_alive(pid)
    assert lc.engine.worker_pid() == pid
    assert RyzenAILLM(model=QWEN, execution="process").worker_pid() == pid


def test_an_inline_llm_has_no_worker_pid():
    lc = ChatRyzenAI(model=QWEN, max_tokens=2, execution="inline")
    lc.invoke("hi")
    assert lc.worker_pid() is None and RyzenAILLM(model=QWEN, execution="inline").worker_pid() is None
