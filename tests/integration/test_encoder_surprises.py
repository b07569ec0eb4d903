"""Embeddings and rerankers do what their framework's own do with the inputs real pipelines produce.

No texts, a lone surrogate, blank text (the empty text, with a warning), a misspelt constructor
argument, a folder that is not there: each gets the framework's answer (``[]``, a skipped or empty vector) or a typed error that
names the value and the fix, in both faces and both execution modes.
"""

from __future__ import annotations

import logging

import pytest
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore
from llama_index.core.schema import NodeWithScore

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


# -- blank text: the empty text, with a warning, in both faces; the pipeline goes on -----------------

#: Texts with nothing to embed: empty, whitespace (a PDF's form feed), NUL, the BOM, zero-width characters.
BLANKS = ["", " ", "\n\t\x0c", "\x00", "\ufeff", "\u200b", "\u200b\ufeff \x00\u2060\u200d"]
XLMR = FIXTURES / "rerank" / "tiny-xlmr-reranker"


def test_a_whitespace_only_node_does_not_abort_a_vector_store_index(caplog, llamaindex_event_loop):
    from llama_index.core import VectorStoreIndex
    from llama_index.core.schema import TextNode

    nodes = [TextNode(text=DOCS[0], id_="a"), TextNode(text="  \n\t", id_="blank"), TextNode(text=DOCS[1], id_="b")]
    with caplog.at_level(logging.WARNING, logger="ryzenai_core"):
        index = VectorStoreIndex(nodes, embed_model=RyzenAIEmbedding(model=str(TINY_ST), query_instruction=""))
    assert (
        "1 of 3 text(s) have nothing to embed (empty, whitespace or invisible characters only; first: text 1, '  \\n\\t')"
        in caplog.text
    )
    (hit,) = index.as_retriever(similarity_top_k=1).retrieve(DOCS[1])
    assert hit.node.node_id == "b"


def test_every_blank_text_embeds_as_the_empty_text_with_a_warning(caplog):
    engine = EmbeddingEngine(TINY_ST)
    with caplog.at_level(logging.WARNING, logger="ryzenai_core"):
        result = engine.embed([*BLANKS, DOCS[0]])
    assert f"{len(BLANKS)} of {len(BLANKS) + 1} text(s) have nothing to embed" in caplog.text
    assert result.tokens[: len(BLANKS)] == [2] * len(BLANKS)  # [CLS] [SEP], whatever invisible characters it held
    assert all(v == result.vectors[0] for v in result.vectors[: len(BLANKS)])
    assert result.vectors[-1] != result.vectors[0]
    # a query keeps its instruction: a blank one is the instruction alone
    query = engine.embed(BLANKS, kind="query", instruction="find: ")
    assert query.vectors == engine.embed(["find: "] * len(BLANKS), instruction="").vectors
    with pytest.raises(InvalidRequestError, match=r"text 1 is blank \('\\ufeff'\): it has nothing to embed"):
        engine.embed(["x", "\ufeff"], blank="error")  # the core's opt-in refusal
    with pytest.raises(InvalidRequestError, match="blank 'skip' is not one of 'embed', 'error'"):
        engine.embed(["x"], blank="skip")  # type: ignore[arg-type]


@pytest.mark.parametrize("execution", ["inline", "process"])
def test_a_blank_page_and_an_empty_query_go_through_a_langchain_vector_store(execution, caplog):
    """An image-only PDF page (no text, or a form feed) in from_documents, and an agent's search for ''."""
    embeddings = RyzenAIEmbeddings(model=str(TINY_ST), execution=execution)
    pages = [
        Document(page_content=DOCS[0]),
        Document(page_content=""),
        Document(page_content="\x0c"),
        Document(page_content=DOCS[1]),
    ]
    with caplog.at_level(logging.WARNING, logger="ryzenai_core"):
        store = InMemoryVectorStore.from_documents(pages, embeddings)
        hits = store.as_retriever(search_kwargs={"k": 4}).invoke("")  # a retriever tool's empty query
    assert len(hits) == 4
    assert store.similarity_search(DOCS[1], k=1)[0].page_content == DOCS[1]
    assert (
        "2 of 4 text(s) have nothing to embed" in caplog.text and "1 of 1 text(s) have nothing to embed" in caplog.text
    )
    vectors = embeddings.embed_documents(BLANKS)
    assert all(v == vectors[0] for v in vectors)
    queries = [embeddings.embed_query(b) for b in BLANKS]
    assert all(q == queries[0] for q in queries)


def test_a_blank_document_and_an_empty_query_go_through_a_llamaindex_index(caplog, llamaindex_event_loop):
    from llama_index.core import Document as LlamaDocument
    from llama_index.core import VectorStoreIndex

    embed_model = RyzenAIEmbedding(model=str(TINY_ST))
    documents = [LlamaDocument(text=DOCS[0]), LlamaDocument(text="\u200b\ufeff"), LlamaDocument(text=DOCS[1])]
    with caplog.at_level(logging.WARNING, logger="ryzenai_core"):
        index = VectorStoreIndex.from_documents(documents, embed_model=embed_model)
        # " ": LlamaIndex's QueryBundle asks no embedding of "" (its retriever then fails by itself)
        hits = index.as_retriever(similarity_top_k=3).retrieve(" ")
    assert len(hits) == 3 and "1 of 1 text(s) have nothing to embed" in caplog.text
    vectors = embed_model.get_text_embedding_batch(BLANKS)
    assert all(v == vectors[0] for v in vectors)
    queries = [embed_model.get_query_embedding(b) for b in BLANKS]
    assert all(q == queries[0] for q in queries)
    # both faces give a blank text the same vector
    assert vectors[0] == RyzenAIEmbeddings(model=str(TINY_ST)).embed_documents([" "])[0]


@pytest.mark.parametrize("folder", [CROSS, XLMR], ids=["bert", "xlmr"])
def test_blank_passages_score_as_the_empty_passage_and_a_blank_query_still_ranks(folder, caplog):
    engine = RerankEngine.get(str(folder))
    with caplog.at_level(logging.WARNING, logger="ryzenai_core"):
        result = engine.rerank("who builds the Pellix?", [*BLANKS, *DOCS])
    assert f"{len(BLANKS)} of {len(BLANKS) + 2} document(s) have nothing to rank" in caplog.text
    assert result.scores[: len(BLANKS)] == [result.scores[0]] * len(BLANKS)
    assert result.tokens[: len(BLANKS)] == [result.tokens[0]] * len(BLANKS)
    empty = engine.rerank("", DOCS)
    for query in BLANKS[1:]:
        assert engine.rerank(query, DOCS).scores == empty.scores
    assert "the query is blank ('\\u200b'): the documents were scored against the empty query" in caplog.text


def test_a_blank_query_ranks_in_both_reranker_faces():
    from llama_index.core.schema import QueryBundle, TextNode

    docs = [Document(page_content=t) for t in DOCS]
    assert len(LangChainRerank(model=str(CROSS), top_n=None).compress_documents(docs, " ")) == 2
    nodes = LlamaIndexRerank(model=str(CROSS), top_n=None).postprocess_nodes(
        [NodeWithScore(node=TextNode(text=t)) for t in DOCS], query_bundle=QueryBundle("\u200b")
    )
    assert len(nodes) == 2


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
    with pytest.raises(
        InvalidRequestError, match=rf"got (an )?unknown (parameter|field\(s\)) '{key}'.*did you mean '{suggestion}'"
    ):
        cls(model=str(folder), **{key: 4})


# -- a folder that is not there: a message for encoder folders --------------------------------------


@pytest.mark.parametrize(
    ("cls", "words"),
    [
        (
            RyzenAIEmbeddings,
            "embedding model folder '{p}' does not exist; pass a folder as Hugging Face ships sentence-transformers",
        ),
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
