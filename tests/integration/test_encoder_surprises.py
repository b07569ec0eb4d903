"""Embeddings and rerankers do what their framework's own do with the inputs real pipelines produce.

No texts, a lone surrogate, a blank node, a misspelt constructor argument, a folder that is not
there: each gets the framework's answer (``[]``, a skipped or empty vector) or a typed error that
names the value and the fix, in both faces and both execution modes.
"""

from __future__ import annotations

import logging

import pytest
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore

from conftest import FIXTURES
from langchain_ryzenai import RyzenAIEmbeddings
from langchain_ryzenai import RyzenAIRerank as LangChainRerank
from llamaindex_ryzenai import RyzenAIEmbedding
from llamaindex_ryzenai import RyzenAIRerank as LlamaIndexRerank
from ryzenai_core import InvalidRequestError, ModelNotFoundError
from ryzenai_core.embeddings.embedding import EmbeddingEngine
from ryzenai_core.rerank.engine import RerankEngine

TINY_ST = FIXTURES / "embeddings" / "tiny-bert-st"
CROSS = FIXTURES / "rerank" / "tiny-bert-cross-encoder"
DOCS = ["The Orsk Foundry is located in Tamberlow.", "Kessarine Systems builds the Pellix accelerator."]


# -- no texts: [] as LangChain's embeddings give ---------------------------------------------------


def test_no_documents_embed_to_no_vectors_in_langchain():
    embeddings = RyzenAIEmbeddings(model=str(TINY_ST))
    assert embeddings.embed_documents([]) == []
    result = embeddings.embed([])
    assert result.vectors == [] and result.tokens == [] and result.shapes == [] and result.padding == 0


async def test_no_documents_embed_to_no_vectors_async():
    assert await RyzenAIEmbeddings(model=str(TINY_ST)).aembed_documents([]) == []


def test_a_vector_store_takes_no_documents():
    store = InMemoryVectorStore(RyzenAIEmbeddings(model=str(TINY_ST)))
    assert store.add_texts([]) == []
    assert store.add_documents([]) == []
    store.add_documents([Document(page_content=DOCS[0])])
    assert store.similarity_search(DOCS[0], k=1)[0].page_content == DOCS[0]


def test_the_llamaindex_face_takes_no_documents_too():
    assert RyzenAIEmbedding(model=str(TINY_ST)).get_text_embedding_batch([]) == []


# -- a lone surrogate: the LLM path's typed error, naming the text ---------------------------------


@pytest.mark.parametrize("execution", ["inline", "process"])
def test_a_lone_surrogate_in_an_embedding_text_names_the_text_and_position(execution):
    texts = ["fine", "bad \udcff bytes"]
    want = r"text 1 holds a lone surrogate '\\udcff' at character 4 .*errors='replace'"
    lc = RyzenAIEmbeddings(model=str(TINY_ST), execution=execution)
    with pytest.raises(InvalidRequestError, match=want):
        lc.embed_documents(texts)
    with pytest.raises(InvalidRequestError, match=r"text 0 holds a lone surrogate '\\ud800' at character 3"):
        lc.embed_query("who\ud800")
    li = RyzenAIEmbedding(model=str(TINY_ST), execution=execution)
    with pytest.raises(InvalidRequestError, match=want):
        li.get_text_embedding_batch(texts)
    with pytest.raises(InvalidRequestError, match=r"text 0 holds a lone surrogate '\\ud800'"):
        li.get_query_embedding("who\ud800")
    assert len(lc.embed_documents(["still works"])[0]) == 32  # nothing left broken


@pytest.mark.parametrize("execution", ["inline", "process"])
def test_a_lone_surrogate_in_a_rerank_text_names_the_document(execution):
    engine = RerankEngine.get(str(CROSS), execution=execution)
    with pytest.raises(InvalidRequestError, match=r"document 2 holds a lone surrogate '\\udcff' at character 4"):
        engine.rerank("who builds the Pellix?", [*DOCS, "bad \udcff bytes"])
    with pytest.raises(InvalidRequestError, match=r"the query holds a lone surrogate '\\ud800' at character 3"):
        engine.rerank("who\ud800", DOCS)
    with pytest.raises(InvalidRequestError, match=r"document 0 holds a lone surrogate"):
        LangChainRerank(model=str(CROSS), execution=execution).compress_documents(
            [Document(page_content="\ud800")], "who?"
        )


# -- a blank node: LlamaIndex's own embeddings embed it; the index build goes on ------------------


def test_a_whitespace_only_node_does_not_abort_a_vector_store_index(caplog, llamaindex_event_loop):
    from llama_index.core import VectorStoreIndex
    from llama_index.core.schema import TextNode

    nodes = [TextNode(text=DOCS[0], id_="a"), TextNode(text="  \n\t", id_="blank"), TextNode(text=DOCS[1], id_="b")]
    with caplog.at_level(logging.WARNING, logger="ryzenai_core"):
        index = VectorStoreIndex(nodes, embed_model=RyzenAIEmbedding(model=str(TINY_ST), query_instruction=""))
    assert "1 of 3 text(s) are empty or only whitespace (first: text 1, '  \\n\\t')" in caplog.text
    (hit,) = index.as_retriever(similarity_top_k=1).retrieve(DOCS[1])
    assert hit.node.node_id == "b"


def test_a_blank_text_embeds_as_the_special_tokens_alone():
    engine = EmbeddingEngine(TINY_ST)
    result = engine.embed(["   ", DOCS[0]], blank="embed")
    assert result.tokens[0] == engine.count_tokens([""])[0] == 2  # [CLS] [SEP]
    assert result.vectors[0] == engine.embed([" "], blank="embed").vectors[0]
    with pytest.raises(InvalidRequestError, match=r"text 0 is empty \('   '\)"):
        engine.embed(["   "])  # the core and the LangChain face still refuse it by default
    with pytest.raises(InvalidRequestError, match="blank 'skip' is not one of 'error', 'embed'"):
        engine.embed(["x"], blank="skip")  # type: ignore[arg-type]


# -- a misspelt argument: did you mean ---------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "folder", "key", "suggestion"),
    [
        (RyzenAIEmbeddings, TINY_ST, "batchsize", "batch_size"),
        (RyzenAIEmbeddings, TINY_ST, "normalise", "normalize"),
        (RyzenAIEmbedding, TINY_ST, "batchsize", "embed_batch_size"),
        (RyzenAIEmbedding, TINY_ST, "text_instructions", "text_instruction"),
        (LangChainRerank, CROSS, "batchsize", "batch_size"),
        (LlamaIndexRerank, CROSS, "batchsize", "batch_size"),
        (LlamaIndexRerank, CROSS, "topn", "top_n"),
    ],
)
def test_a_misspelt_argument_is_a_typed_error_with_the_closest_name(cls, folder, key, suggestion):
    with pytest.raises(InvalidRequestError, match=rf"got (an )?unknown (parameter|field\(s\)) '{key}'.*did you mean '{suggestion}'"):
        cls(model=str(folder), **{key: 4})


# -- a folder that is not there: a message for encoder folders --------------------------------------


@pytest.mark.parametrize(
    ("cls", "words"),
    [
        (RyzenAIEmbeddings, "embedding model folder '{p}' does not exist; pass a folder as Hugging Face ships sentence-transformers"),
        (RyzenAIEmbedding, "embedding model folder '{p}' does not exist"),
        (LangChainRerank, "reranker folder '{p}' does not exist; pass a cross-encoder folder"),
        (LlamaIndexRerank, "reranker folder '{p}' does not exist"),
    ],
)
def test_a_missing_encoder_folder_is_told_what_an_encoder_folder_holds(cls, words, tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(ModelNotFoundError) as info:
        cls(model=str(missing))
    message = str(info.value)
    assert message.startswith(words.format(p=missing))
    assert "genai_config.json" not in message and "git lfs pull" not in message
