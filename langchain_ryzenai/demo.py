"""The LangChain half of ``ryzenai-llm demo``: retriever | prompt | ChatRyzenAI | parser.

Retrieval is BM25 over a handful of local documents (rank-bm25), so the demo needs no
embedding model and no network; given embeddings (``RyzenAIEmbeddings``), it is a vector
search over an in-memory store instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessageChunk
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from pydantic import ConfigDict, PrivateAttr

from .chat_models import ChatRyzenAI

__all__ = ["PROMPT", "BM25Retriever", "build_chain", "build_retriever", "run"]

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
    documents: Sequence[Document], k: int = 2, embeddings: Embeddings | None = None
) -> Runnable[str, list[Document]]:
    """BM25 over ``documents``, or a vector search with ``embeddings`` when given."""
    if embeddings is None:
        return BM25Retriever(documents=list(documents), k=k)
    store = InMemoryVectorStore.from_documents(list(documents), embeddings)
    return store.as_retriever(search_kwargs={"k": k})


def build_chain(
    llm: ChatRyzenAI, documents: Sequence[Document], k: int = 2, embeddings: Embeddings | None = None
) -> Runnable[str, AIMessageChunk]:
    """``{context: retriever, question} | prompt | llm`` (the parser is applied while streaming)."""
    retriever = build_retriever(documents, k, embeddings)
    return {"context": retriever | _format, "question": RunnablePassthrough()} | PROMPT | llm  # type: ignore[return-value]


def run(
    llm: ChatRyzenAI,
    documents: Sequence[Document],
    question: str,
    on_token: Callable[[str], None],
    embeddings: Embeddings | None = None,
) -> AIMessageChunk:
    """Stream the answer to ``question`` through ``on_token``; return the whole message."""
    chain = build_chain(llm, documents, embeddings=embeddings)
    total: AIMessageChunk | None = None
    for chunk in chain.stream(question):
        if chunk.content:
            on_token(str(chunk.content))
        total = chunk if total is None else total + chunk
    assert total is not None
    return total
