"""What the faces share (ryzenai_core.faces): one "did you mean" for every face, execution for the encoders,
the workers' pids.

Real engines on the fixture models: the LLM faces on tiny Qwen3, the encoder faces on the tiny
sentence-transformers and cross-encoder folders. The LLM faces' shared settings and per-call words
are tested on the fake engine in tests/unit/test_face_settings.py.
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
from ryzenai_core.rerank.engine import RerankEngine

QWEN = str(TINY_QWEN3)
TINY_ST = str(FIXTURES / "embeddings" / "tiny-bert-st")
CROSS = str(FIXTURES / "rerank" / "tiny-bert-cross-encoder")
ENCODER_FACES = [
    pytest.param(RyzenAIEmbeddings, TINY_ST, id="langchain-embeddings"),
    pytest.param(RyzenAIEmbedding, TINY_ST, id="llamaindex-embedding"),
    pytest.param(LangChainRerank, CROSS, id="langchain-rerank"),
    pytest.param(LlamaIndexRerank, CROSS, id="llamaindex-rerank"),
]


# ---------------------------------------------------------------------- one "did you mean"
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
