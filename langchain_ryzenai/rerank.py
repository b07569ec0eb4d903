"""LangChain face of the reranker: :class:`RyzenAIRerank`, a document compressor.

Data flow::

    retrieved documents + query
      -> ryzenai_core.rerank.engine.RerankEngine.rerank: (query, page_content) pairs, sorted by length,
         padded to pair-length buckets on the NPU, one relevance score each
      -> the best ``top_n`` documents, best first: copies with metadata["relevance_score"] and
         metadata["ryzenai_rerank"] (where the score was computed), the rest of their metadata kept

Use it behind a retriever that fetches wide: ``ContextualCompressionRetriever(
base_compressor=RyzenAIRerank(model=...), base_retriever=store.as_retriever(search_kwargs={"k": 20}))``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.load.serializable import Serializable
from pydantic import ConfigDict

from ryzenai_core.rerank.engine import RerankResult, RerankSettings

from ._shared import CheckedEncoder

__all__ = ["RyzenAIRerank"]


class RyzenAIRerank(CheckedEncoder, RerankSettings, BaseDocumentCompressor, Serializable):
    """Rerank retrieved documents with a cross-encoder on the Ryzen AI NPU (or the CPU elsewhere).

    ``model`` is a cross-encoder folder as Hugging Face ships them (``config.json`` with a
    ``*ForSequenceClassification`` architecture and one label, ``tokenizer.json``,
    ``onnx/model.onnx``: cross-encoder/ms-marco-MiniLM-L6-v2, BAAI/bge-reranker-base), a
    Hugging Face repository id (the cache first) or an embedded model's name. Scores are what
    sentence-transformers' ``CrossEncoder.predict`` gives (the sigmoid of the logit). A document
    too long to fit beside the query is scored on its first tokens, and logged
    (``on_overflow="error"`` raises instead).

    Example:
        .. code-block:: python

            from langchain_classic.retrievers import ContextualCompressionRetriever
            from langchain_ryzenai import RyzenAIRerank

            retriever = ContextualCompressionRetriever(
                base_compressor=RyzenAIRerank(model="cross-encoder/ms-marco-MiniLM-L6-v2", top_n=3),
                base_retriever=store.as_retriever(search_kwargs={"k": 20}),
            )
            docs = retriever.invoke("Who directs the Vantor Lab?")
    """

    model_config = ConfigDict(extra="forbid", protected_namespaces=(), arbitrary_types_allowed=True)

    def __init__(self, **data: Any) -> None:  # declared here, so that type checkers read the settings as its own
        """Build from the class docstring's parameters; an unknown one is refused (InvalidRequestError)."""
        super().__init__(**data)

    def score(self, documents: Sequence[str | Document], query: str) -> RerankResult:
        """Every document's score against ``query``, in the order given, and what the run cost."""
        texts = [d.page_content if isinstance(d, Document) else d for d in documents]
        result: RerankResult = self.rerank_with_settings(query, texts)
        return result

    def rerank(
        self, documents: Sequence[str | Document], query: str, *, top_n: int | None = -1
    ) -> list[dict[str, Any]]:
        """The best documents' indices and scores, best first (``{"index", "relevance_score"}``).

        Args:
            documents: the documents (or their texts).
            query: the question.
            top_n: how many to return: -1 (the default, as CohereRerank's) for this reranker's
                ``top_n``, None for all.
        """
        result = self.score(documents, query)
        chosen = result.top(self.top_n if top_n == -1 else top_n)
        return [{"index": i, "relevance_score": result.scores[i]} for i in chosen]

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """The ``top_n`` most relevant documents, best first, with ``metadata["relevance_score"]``.

        Each also gets ``metadata["ryzenai_rerank"]``: where its score was computed (``shape``,
        ``ran_on``: ``npu``, ``partial``, ``cpu`` or ``unknown``, and ``npu_share``, the share of
        the model's operators the NPU ran, from the VitisAI pass summary).
        """
        result = self.score(documents, query)
        out = []
        for i in result.top(self.top_n):
            doc = documents[i]
            metadata = {**doc.metadata, "relevance_score": result.scores[i], "ryzenai_rerank": result.placement_of(i)}
            out.append(doc.model_copy(update={"metadata": metadata}))
        return out

    async def acompress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """compress_documents on a worker thread: the event loop keeps running."""
        return await asyncio.to_thread(self.compress_documents, documents, query, callbacks)
