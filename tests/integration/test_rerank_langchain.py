"""RyzenAIRerank in LangChain: a document compressor in ContextualCompressionRetriever, sync and async."""

from __future__ import annotations

import asyncio
import threading

import pytest
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore

from conftest import FIXTURES
from hf_cache import cache_repository
from langchain_ryzenai import RyzenAIEmbeddings, RyzenAIRerank
from ryzenai_core import InvalidRequestError
from ryzenai_core.package.hub import resolve_model
from ryzenai_core.rerank.engine import RerankEngine

BERT = FIXTURES / "rerank" / "tiny-bert-cross-encoder"
XLMR = FIXTURES / "rerank" / "tiny-xlmr-reranker"
TINY_ST = FIXTURES / "embeddings" / "tiny-bert-st"
QUERY = "Who is the director of the Vantor Lab?"
TEXTS = [
    "The Vantor Lab was founded in 2011. The director of the Vantor Lab is Ilsa Brandecott.",
    "The Orsk Foundry is located in Tamberlow.",
    "Kessarine Systems builds the Pellix accelerator.",
    "The Halvek Observatory was founded in 1964.",
    "The Nimbrel Institute employs 340 people.",
]
DOCS = [
    Document(page_content=t, metadata={"source": f"doc-{i}.txt", "page": i}, id=f"d{i}") for i, t in enumerate(TEXTS)
]


def _expected(folder, texts, top_n):
    result = RerankEngine(folder).rerank(QUERY, texts)
    return [(texts[i], result.scores[i]) for i in result.top(top_n)]


@pytest.mark.parametrize("folder", [BERT, XLMR], ids=lambda f: f.name)
def test_compress_documents_returns_the_best_top_n_best_first_with_their_scores(folder):
    reranker = RyzenAIRerank(model=str(folder), top_n=3)
    out = reranker.compress_documents(DOCS, QUERY)
    want = _expected(folder, TEXTS, 3)
    assert [d.page_content for d in out] == [t for t, _ in want]
    assert [d.metadata["relevance_score"] for d in out] == pytest.approx([s for _, s in want], abs=1e-6)
    scores = [d.metadata["relevance_score"] for d in out]
    assert scores == sorted(scores, reverse=True)
    for doc in out:  # other metadata and the id kept; the inputs untouched
        original = DOCS[TEXTS.index(doc.page_content)]
        assert doc.id == original.id and {k: doc.metadata[k] for k in ("source", "page")} == original.metadata
    assert all("relevance_score" not in d.metadata for d in DOCS)


def test_in_a_contextual_compression_retriever_sync_and_async():
    store = InMemoryVectorStore.from_documents(DOCS, RyzenAIEmbeddings(model=str(TINY_ST)))
    reranker = RyzenAIRerank(model=str(XLMR), top_n=2)
    retriever = ContextualCompressionRetriever(
        base_compressor=reranker, base_retriever=store.as_retriever(search_kwargs={"k": len(DOCS)})
    )
    got = retriever.invoke(QUERY)
    want = _expected(XLMR, TEXTS, 2)  # every document retrieved: the reranker alone decides
    assert [d.page_content for d in got] == [t for t, _ in want]
    assert [d.metadata["relevance_score"] for d in got] == pytest.approx([s for _, s in want], abs=1e-6)
    assert all(d.metadata["source"].startswith("doc-") for d in got)
    again = asyncio.run(retriever.ainvoke(QUERY))
    assert [d.page_content for d in again] == [d.page_content for d in got]


def test_top_n_none_reorders_all_and_rerank_gives_indices():
    reranker = RyzenAIRerank(model=str(BERT), top_n=None)
    out = reranker.compress_documents(DOCS, QUERY)
    assert sorted(d.page_content for d in out) == sorted(TEXTS)
    hits = RyzenAIRerank(model=str(BERT), top_n=2).rerank(TEXTS, QUERY)
    assert [h["index"] for h in hits] == RerankEngine(BERT).rerank(QUERY, TEXTS).top(2)
    assert len(RyzenAIRerank(model=str(BERT)).rerank(DOCS, QUERY, top_n=None)) == len(DOCS)
    assert RyzenAIRerank(model=str(BERT), top_n=10).compress_documents(DOCS[:2], QUERY)[1].page_content in TEXTS[:2]


def test_no_documents_give_no_documents_and_bad_input_is_a_typed_error():
    reranker = RyzenAIRerank(model=str(BERT), on_overflow="error")
    assert reranker.compress_documents([], QUERY) == []
    with pytest.raises(InvalidRequestError, match="lone surrogate"):
        reranker.compress_documents([Document(page_content="bad \ud800")], QUERY)
    with pytest.raises(
        InvalidRequestError, match="document 0 makes a pair of .* over tiny-bert-cross-encoder's maximum of 512"
    ):
        reranker.compress_documents([Document(page_content="vantor lab " * 300)], QUERY)
    assert len(reranker.compress_documents(DOCS, QUERY)) == 3  # the default top_n, after the errors


def test_unknown_parameters_get_the_closest_name():
    with pytest.raises(
        InvalidRequestError,
        match=r"RyzenAIRerank got an unknown parameter 'topn'; did you mean 'top_n'\? RyzenAIRerank takes .*top_n",
    ):
        RyzenAIRerank(model=str(BERT), topn=2)
    with pytest.raises(ValueError, match="top_n"):
        RyzenAIRerank(model=str(BERT), top_n=0)


async def test_acompress_documents_runs_off_the_event_loop_thread():
    reranker = RyzenAIRerank(model=str(BERT))
    engine = reranker.engine
    threads: list[int] = []
    original = engine.rerank

    def spy(*args, **kwargs):
        threads.append(threading.get_ident())
        return original(*args, **kwargs)

    engine.rerank = spy  # type: ignore[method-assign]
    try:
        out = await reranker.acompress_documents(DOCS, QUERY)
    finally:
        del engine.rerank
    assert threads and threading.get_ident() not in threads
    assert [d.page_content for d in out] == [d.page_content for d in reranker.compress_documents(DOCS, QUERY)]


def test_a_hugging_face_repo_id_resolves_from_the_cache(tmp_path, monkeypatch):
    import huggingface_hub.constants

    snapshot = cache_repository(tmp_path / "hub", "cross-encoder/tiny-ms-marco", BERT)
    assert (snapshot / "onnx" / "model.onnx").is_symlink()  # into blobs/, as huggingface_hub leaves it
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    reranker = RyzenAIRerank(model="cross-encoder/tiny-ms-marco")
    assert reranker.engine.package.path == resolve_model("cross-encoder/tiny-ms-marco").resolve()
    assert reranker.engine.package.name == "tiny-ms-marco"  # named by its repository
    assert [d.page_content for d in reranker.compress_documents(DOCS, QUERY)] == [
        t for t, _ in _expected(BERT, TEXTS, 3)
    ]


def test_copies_share_the_engine_and_pickles_rank_the_same():
    import copy
    import pickle

    reranker = RyzenAIRerank(model=str(BERT), top_n=2)
    assert copy.deepcopy(reranker).engine is reranker.engine
    assert RyzenAIRerank(model=str(BERT), top_n=4).engine is reranker.engine  # top_n is the face's, not the engine's
    restored = pickle.loads(pickle.dumps(reranker))
    assert restored.top_n == 2 and restored.engine.package == reranker.engine.package
    assert restored.rerank(TEXTS, QUERY) == reranker.rerank(TEXTS, QUERY)


def test_dumps_and_loads_round_trip_the_settings():
    import warnings

    from langchain_core.load import dumps, loads

    reranker = RyzenAIRerank(model=str(XLMR), top_n=2, batch_size=8, on_overflow="error")
    text = dumps(reranker)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # LangChainBetaWarning: loads is in beta
        again = loads(text, valid_namespaces=["langchain_ryzenai"], allowed_objects=[RyzenAIRerank])
    assert type(again) is RyzenAIRerank and (again.top_n, again.batch_size, again.on_overflow) == (2, 8, "error")
    assert again.engine is reranker.engine and again.rerank(TEXTS, QUERY) == reranker.rerank(TEXTS, QUERY)
