"""RyzenAIEmbeddings: LangChain's standard embedding suites, vector stores, options, async."""

from __future__ import annotations

import asyncio
import shutil
import threading

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_tests.integration_tests import EmbeddingsIntegrationTests
from langchain_tests.unit_tests import EmbeddingsUnitTests

from conftest import FIXTURES
from langchain_ryzenai import RyzenAIEmbeddings
from ryzenai_core import InvalidRequestError
from ryzenai_core.embeddings.embedding import EmbeddingEngine
from ryzenai_core.embeddings.package import BGE_QUERY_INSTRUCTION
from ryzenai_core.package.hub import resolve_model

TINY_ST = FIXTURES / "embeddings" / "tiny-bert-st"
TINY_STATIC = FIXTURES / "embeddings" / "tiny-bert-static"


class _OnTinyBert:
    folder = TINY_ST

    @property
    def embeddings_class(self) -> type[RyzenAIEmbeddings]:
        return RyzenAIEmbeddings

    @property
    def embedding_model_params(self) -> dict:
        return {"model": str(self.folder)}


class TestRyzenAIEmbeddingsUnit(_OnTinyBert, EmbeddingsUnitTests):
    pass


class TestRyzenAIEmbeddingsIntegration(_OnTinyBert, EmbeddingsIntegrationTests):
    pass


class TestRyzenAIEmbeddingsStaticExport(_OnTinyBert, EmbeddingsIntegrationTests):
    """The same suite on AMD's static (1, 128) export."""

    folder = TINY_STATIC


DOCS = [
    "The Vantor Lab was founded in 2011. The director of the Vantor Lab is Ilsa Brandecott.",
    "The Orsk Foundry is located in Tamberlow.",
    "Kessarine Systems builds the Pellix accelerator.",
]


def test_a_vector_store_finds_a_document_by_its_own_text():
    embeddings = RyzenAIEmbeddings(model=str(TINY_ST), document_instruction="", query_instruction="")
    store = InMemoryVectorStore.from_documents([Document(page_content=t) for t in DOCS], embeddings)
    for text in DOCS:
        assert store.similarity_search(text, k=1)[0].page_content == text


def test_queries_and_documents_get_their_instructions():
    plain = RyzenAIEmbeddings(model=str(TINY_ST))
    instructed = RyzenAIEmbeddings(model=str(TINY_ST), query_instruction="query: ", document_instruction="passage: ")
    assert instructed.engine is plain.engine  # one engine per folder and settings
    np.testing.assert_allclose(instructed.embed_query("vantor"), plain.embed_query("query: vantor"), atol=1e-6)
    np.testing.assert_allclose(
        instructed.embed_documents(["vantor"]), plain.embed_documents(["passage: vantor"]), atol=1e-6
    )
    assert instructed.embed(["vantor"], kind="query").tokens[0] > plain.embed(["vantor"]).tokens[0]


def test_batch_size_normalize_and_pooling_options():
    texts = [f"document number {i} about the Vantor Lab" for i in range(7)]
    small = RyzenAIEmbeddings(model=str(TINY_ST), batch_size=3)
    result = small.embed(texts)
    assert len(result.shapes) == 3
    np.testing.assert_allclose(result.vectors, RyzenAIEmbeddings(model=str(TINY_ST)).embed_documents(texts), atol=1e-5)
    raw = RyzenAIEmbeddings(model=str(TINY_ST), normalize=False).embed_query("vantor")
    assert abs(np.linalg.norm(raw) - 1) > 1e-3
    cls = RyzenAIEmbeddings(model=str(TINY_ST), pooling="cls").embed_documents(texts[:2])
    np.testing.assert_allclose(cls, RyzenAIEmbeddings(model=str(TINY_STATIC)).embed_documents(texts[:2]), atol=1e-5)
    with pytest.raises(ValueError, match="batch_size"):
        RyzenAIEmbeddings(model=str(TINY_ST), batch_size=0)
    with pytest.raises(InvalidRequestError, match="RyzenAIEmbeddings got an unknown parameter 'chunk_size'"):
        RyzenAIEmbeddings(model=str(TINY_ST), chunk_size=10)  # type: ignore[call-arg]


def test_show_progress_draws_a_bar(capsys):
    RyzenAIEmbeddings(model=str(TINY_ST), show_progress=True).embed_documents(DOCS)
    err = capsys.readouterr().err
    assert "embedding" in err and "3/3" in err


def test_bad_input_is_a_typed_error():
    embeddings = RyzenAIEmbeddings(model=str(TINY_ST), on_overflow="error")
    assert embeddings.embed_documents([]) == []
    assert len(embeddings.embed_query("")) == 32  # a blank query is the empty text, with a warning
    with pytest.raises(InvalidRequestError, match="over tiny-bert-st's maximum of 128"):
        embeddings.embed_documents(["vantor lab " * 100])
    assert len(embeddings.embed_query("still works")) == 32


async def test_async_twins_run_off_the_event_loop_thread():
    embeddings = RyzenAIEmbeddings(model=str(TINY_ST))
    engine = embeddings.engine
    threads: list[int] = []
    original = engine.embed

    def spy(*args, **kwargs):
        threads.append(threading.get_ident())
        return original(*args, **kwargs)

    engine.embed = spy  # type: ignore[method-assign]
    try:
        docs, query = await asyncio.gather(embeddings.aembed_documents(DOCS), embeddings.aembed_query("vantor"))
    finally:
        del engine.embed
    assert threading.get_ident() not in threads and len(threads) == 2
    np.testing.assert_allclose(docs, embeddings.embed_documents(DOCS), atol=1e-6)
    np.testing.assert_allclose(query, embeddings.embed_query("vantor"), atol=1e-6)


def test_a_hugging_face_repo_id_resolves_from_the_cache(tmp_path, monkeypatch):
    import huggingface_hub.constants

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--BAAI--bge-tiny-en-v1.5"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    shutil.copytree(TINY_ST, repo / "snapshots" / commit)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    embeddings = RyzenAIEmbeddings(model="BAAI/bge-tiny-en-v1.5")
    assert embeddings.engine.package.path == resolve_model("BAAI/bge-tiny-en-v1.5").resolve()
    assert isinstance(embeddings.engine, EmbeddingEngine) and len(embeddings.embed_query("vantor")) == 32
    pkg = embeddings.engine.package
    assert pkg.name == "bge-tiny-en-v1.5" and pkg.query_instruction == BGE_QUERY_INSTRUCTION  # named by its repository
    np.testing.assert_allclose(
        embeddings.embed_query("vantor"), embeddings.embed_documents([BGE_QUERY_INSTRUCTION + "vantor"])[0], atol=1e-6
    )


def test_copies_share_the_engine_and_pickles_embed_the_same():
    import copy
    import pickle

    embeddings = RyzenAIEmbeddings(model=str(TINY_ST), query_instruction="q: ")
    twin = copy.deepcopy(embeddings)
    assert twin.engine is embeddings.engine and twin.query_instruction == "q: "
    assert embeddings.model_copy(update={"batch_size": 2}, deep=True).engine is embeddings.engine
    restored = pickle.loads(pickle.dumps(embeddings))
    assert restored.query_instruction == "q: " and restored.engine.package == embeddings.engine.package
    np.testing.assert_allclose(restored.embed_query("vantor"), embeddings.embed_query("vantor"), atol=1e-6)
