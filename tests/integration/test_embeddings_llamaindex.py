"""RyzenAIEmbedding in LlamaIndex: VectorStoreIndex ingestion and retrieval, IngestionPipeline, sync and async."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import TextNode

from conftest import FIXTURES
from llamaindex_ryzenai import RyzenAIEmbedding
from ryzenai_core import InvalidRequestError

TINY_ST = FIXTURES / "embeddings" / "tiny-bert-st"
TINY_STATIC = FIXTURES / "embeddings" / "tiny-bert-static"
TEXTS = [
    "The Vantor Lab was founded in 2011. The director of the Vantor Lab is Ilsa Brandecott.",
    "The Orsk Foundry is located in Tamberlow.",
    "Kessarine Systems builds the Pellix accelerator.",
    "The Halvek Observatory was founded in 1964.",
]


@pytest.fixture
def embed_model() -> RyzenAIEmbedding:
    return RyzenAIEmbedding(model=str(TINY_ST), query_instruction="", embed_batch_size=3)


def _nodes() -> list[TextNode]:
    return [TextNode(text=t, id_=f"doc-{i}") for i, t in enumerate(TEXTS)]


def test_vector_store_index_ingests_and_retrieves_each_node_by_its_text(embed_model, llamaindex_event_loop):
    index = VectorStoreIndex(_nodes(), embed_model=embed_model)
    retriever = index.as_retriever(similarity_top_k=1)
    for i, text in enumerate(TEXTS):
        (hit,) = retriever.retrieve(text)
        assert hit.node.node_id == f"doc-{i}" and hit.score == pytest.approx(1.0, abs=1e-5)


async def test_vector_store_index_async_ingestion_and_retrieval(embed_model):
    index = VectorStoreIndex(_nodes(), embed_model=embed_model, use_async=True)
    hits = await index.as_retriever(similarity_top_k=2).aretrieve(TEXTS[2])
    assert hits[0].node.node_id == "doc-2" and len(hits) == 2


def test_ingestion_pipeline_splits_and_embeds(embed_model, llamaindex_event_loop):
    pipeline = IngestionPipeline(transformations=[SentenceSplitter(chunk_size=24, chunk_overlap=0), embed_model])
    nodes = pipeline.run(documents=[Document(text=" ".join(TEXTS))])
    assert len(nodes) > 1 and all(len(n.embedding or []) == 32 for n in nodes)
    want = embed_model.get_text_embedding_batch([n.get_content(metadata_mode="embed") for n in nodes])
    np.testing.assert_allclose([n.embedding for n in nodes], want, atol=1e-5)


async def test_ingestion_pipeline_async(embed_model):
    pipeline = IngestionPipeline(transformations=[SentenceSplitter(chunk_size=24, chunk_overlap=0), embed_model])
    nodes = await pipeline.arun(documents=[Document(text=" ".join(TEXTS))])
    assert len(nodes) > 1 and all(len(n.embedding or []) == 32 for n in nodes)


def test_query_text_batch_and_async_agree(embed_model, llamaindex_event_loop):
    batch = embed_model.get_text_embedding_batch(TEXTS)
    np.testing.assert_allclose(batch, [embed_model.get_text_embedding(t) for t in TEXTS], atol=1e-5)
    np.testing.assert_allclose(embed_model.get_query_embedding(TEXTS[0]), batch[0], atol=1e-6)
    loop = llamaindex_event_loop
    np.testing.assert_allclose(loop.run_until_complete(embed_model.aget_text_embedding_batch(TEXTS)), batch, atol=1e-5)
    np.testing.assert_allclose(loop.run_until_complete(embed_model.aget_query_embedding(TEXTS[1])), batch[1], atol=1e-6)
    np.testing.assert_allclose(loop.run_until_complete(embed_model.aget_text_embedding(TEXTS[2])), batch[2], atol=1e-6)


def test_embed_batch_size_is_the_engine_s_batch(embed_model, llamaindex_event_loop):
    calls: list[int] = []
    engine = embed_model.engine
    original = engine.embed

    def spy(texts, **kwargs):
        calls.append(len(texts))
        assert kwargs["batch_size"] == 3
        return original(texts, **kwargs)

    engine.embed = spy  # type: ignore[method-assign]
    try:
        embed_model.get_text_embedding_batch(TEXTS + TEXTS)
    finally:
        del engine.embed
    assert calls == [3, 3, 2]


def test_instructions_and_defaults(llamaindex_event_loop):
    model = RyzenAIEmbedding(model=str(TINY_ST), query_instruction="query: ", text_instruction="passage: ")
    plain = RyzenAIEmbedding(model=str(TINY_ST))
    assert model.model_name == str(TINY_ST) and model.class_name() == "RyzenAIEmbedding"
    np.testing.assert_allclose(
        model.get_query_embedding("vantor"), plain.get_text_embedding("query: vantor"), atol=1e-6
    )
    np.testing.assert_allclose(
        model.get_text_embedding("vantor"), plain.get_text_embedding("passage: vantor"), atol=1e-6
    )


def test_static_export_and_bad_input(llamaindex_event_loop):
    model = RyzenAIEmbedding(model=str(TINY_STATIC), on_overflow="error")
    assert model.engine.describe()["run_shapes"] == "static"
    assert len(model.get_text_embedding("vantor lab")) == 32
    with pytest.raises(InvalidRequestError, match="over tiny-bert-static's maximum of 128"):
        model.get_text_embedding("vantor lab " * 100)
    assert model.get_query_embedding(" ") == model.get_query_embedding("\u200b")  # blank: the empty text
    assert len(model.get_text_embedding("still fine")) == 32


async def test_async_embeddings_run_off_the_event_loop_thread(embed_model):
    seen: list[int] = []
    engine = embed_model.engine
    original = engine.embed

    def spy(texts, **kwargs):
        seen.append(threading.get_ident())
        return original(texts, **kwargs)

    engine.embed = spy  # type: ignore[method-assign]
    try:
        await embed_model.aget_query_embedding("vantor")
        await embed_model.aget_text_embedding_batch(TEXTS)
    finally:
        del engine.embed
    assert seen and threading.get_ident() not in seen


def test_copies_and_serialisation(embed_model, llamaindex_event_loop):
    import copy

    assert copy.deepcopy(embed_model).engine is embed_model.engine
    again = RyzenAIEmbedding.from_dict(embed_model.to_dict())
    assert again.engine is embed_model.engine and again.embed_batch_size == 3 and again.query_instruction == ""
    np.testing.assert_allclose(again.get_text_embedding(TEXTS[0]), embed_model.get_text_embedding(TEXTS[0]), atol=1e-6)
