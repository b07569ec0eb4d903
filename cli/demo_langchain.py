"""The LangChain half of ``ryzenai-llm demo``: retriever [| reranker] | prompt | ChatRyzenAI | parser.

Retrieval is BM25 over a handful of local documents (rank-bm25), so the demo needs no
embedding model and no network; given embeddings (``RyzenAIEmbeddings``), it is a vector
search over an in-memory store instead. Given a reranker (``RyzenAIRerank``), the retriever
fetches wide and the reranker keeps its ``top_n``: the three-model pipeline. :class:`StageTimes`
times each stage from LangChain's callbacks.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler, CallbackManagerForRetrieverRun
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessageChunk
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnableLambda, RunnableParallel, RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from pydantic import ConfigDict, PrivateAttr

from langchain_ryzenai import ChatRyzenAI

__all__ = ["PROMPT", "BM25Retriever", "StageTimes", "build_chain", "build_retriever", "run"]

PROMPT = ChatPromptTemplate.from_messages(
    [
        (
            "system",
            "Answer the question using only the context below. "
            "If the answer is not in the context, say you don't know.",
        ),
        ("human", "Context: {context}\n\nQuestion: {question}"),
    ]
)


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


class BM25Retriever(BaseRetriever):
    """The ``k`` best documents for a query by BM25 (Okapi)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    documents: list[Document]
    k: int = 2
    _index: Any = PrivateAttr(default=None)

    def model_post_init(self, context: Any, /) -> None:
        """Build the BM25 index once."""
        from rank_bm25 import BM25Okapi

        self._index = BM25Okapi([_words(d.page_content) for d in self.documents])

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        scores = self._index.get_scores(_words(query))
        best = sorted(range(len(self.documents)), key=lambda i: -scores[i])[: self.k]
        return [self.documents[i] for i in best]


def _format(docs: Sequence[Document]) -> str:
    return "\n\n".join(d.page_content for d in docs)


def build_retriever(
    documents: Sequence[Document],
    k: int = 2,
    embeddings: Embeddings | None = None,
    reranker: BaseDocumentCompressor | None = None,
    wide: int | None = None,
) -> Runnable[str, list[Document]]:
    """BM25 over ``documents``, or a vector search with ``embeddings`` when given.

    With a ``reranker``, the search fetches ``wide`` documents (default: all of them) and the
    reranker keeps the best (its ``top_n``), in a step named ``rerank``; else it fetches ``k``.
    """
    fetch = k if reranker is None else (wide or len(documents))
    search: Runnable[str, list[Document]]
    if embeddings is None:
        search = BM25Retriever(documents=list(documents), k=fetch)
    else:
        store = InMemoryVectorStore.from_documents(list(documents), embeddings)
        search = store.as_retriever(search_kwargs={"k": fetch})
    if reranker is None:
        return search

    def rerank(found: dict[str, Any]) -> list[Document]:
        return list(reranker.compress_documents(found["documents"], found["query"]))

    return RunnableParallel(documents=search, query=RunnablePassthrough()) | RunnableLambda(rerank, name="rerank")


def build_chain(
    llm: ChatRyzenAI,
    documents: Sequence[Document],
    k: int = 2,
    embeddings: Embeddings | None = None,
    reranker: BaseDocumentCompressor | None = None,
) -> Runnable[str, AIMessageChunk]:
    """``{context: retriever, question} | prompt | llm`` (the parser is applied while streaming)."""
    retriever = build_retriever(documents, k, embeddings, reranker)
    return {"context": retriever | _format, "question": RunnablePassthrough()} | PROMPT | llm  # type: ignore[return-value]


class StageTimes(BaseCallbackHandler):
    """Seconds each stage of a chain run took, from LangChain's callbacks.

    ``seconds`` gets ``retrieve`` (the retriever), ``rerank`` (the step of that name),
    ``first_token`` (from the chat model's start) and ``generate`` (the chat model's whole run).
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._running: dict[UUID, tuple[str, float]] = {}

    def _start(self, stage: str, run_id: UUID) -> None:
        self._running[run_id] = (stage, time.perf_counter())

    def _end(self, run_id: UUID) -> None:
        stage, started = self._running.pop(run_id, ("", 0.0))
        if stage:
            self.seconds[stage] = time.perf_counter() - started

    def on_retriever_start(self, serialized: Any, query: str, *, run_id: UUID, **kwargs: Any) -> None:
        """The retriever starts: the search alone."""
        self._start("retrieve", run_id)

    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """The retriever returns."""
        self._end(run_id)

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """A runnable starts: only the one named ``rerank`` is a stage."""
        if kwargs.get("name") == "rerank":
            self._start("rerank", run_id)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """A runnable ends."""
        self._end(run_id)

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """The chat model starts on the prompt."""
        self._start("generate", run_id)

    def on_llm_new_token(self, token: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """A streamed token: the first one marks ``first_token``."""
        if "first_token" not in self.seconds and run_id in self._running:
            self.seconds["first_token"] = time.perf_counter() - self._running[run_id][1]

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """The chat model's answer is complete."""
        self._end(run_id)


def run(
    llm: ChatRyzenAI,
    documents: Sequence[Document],
    question: str,
    on_token: Callable[[str], None],
    embeddings: Embeddings | None = None,
    reranker: BaseDocumentCompressor | None = None,
) -> tuple[AIMessageChunk, dict[str, float]]:
    """Stream the answer to ``question`` through ``on_token``; return the whole message and the stage times."""
    chain = build_chain(llm, documents, embeddings=embeddings, reranker=reranker)
    times = StageTimes()
    total: AIMessageChunk | None = None
    for chunk in chain.stream(question, config={"callbacks": [times]}):
        if chunk.content:
            on_token(str(chunk.content))
        total = chunk if total is None else total + chunk
    assert total is not None
    return total, times.seconds
