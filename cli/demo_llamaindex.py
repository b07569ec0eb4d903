"""The LlamaIndex half of ``ryzenai-llm demo``: a query engine on RyzenAILLM.

Retrieval is BM25 over a handful of local documents (rank-bm25), so the demo needs no
embedding model and no network; given an embedding model (``RyzenAIEmbedding``), it is a
``VectorStoreIndex`` retriever instead. Given a reranker (``RyzenAIRerank``), the retriever
fetches wide and the reranker, a node postprocessor, keeps its ``top_n``. The budget of the
answer (prompt tokens, prefill bucket, padding, timings) and each stage's time are read from
LlamaIndex's own instrumentation events.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from llama_index.core import QueryBundle, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined]
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.llm import LLMChatEndEvent, LLMChatInProgressEvent, LLMChatStartEvent
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
from llama_index.core.instrumentation.events.retrieval import RetrievalEndEvent, RetrievalStartEvent
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, TextNode

from llamaindex_ryzenai import RyzenAILLM

__all__ = ["BM25NodeRetriever", "build_query_engine", "run"]


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


class BM25NodeRetriever(BaseRetriever):
    """The ``k`` best nodes for a query by BM25 (Okapi)."""

    def __init__(self, nodes: Sequence[TextNode], k: int = 2) -> None:
        from rank_bm25 import BM25Okapi

        super().__init__()
        self._nodes = list(nodes)
        self._k = k
        self._index = BM25Okapi([_words(n.get_content()) for n in self._nodes])

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        scores = self._index.get_scores(_words(query_bundle.query_str))
        best = sorted(range(len(self._nodes)), key=lambda i: -scores[i])[: self._k]
        return [NodeWithScore(node=self._nodes[i], score=float(scores[i])) for i in best]


_STAGES = {
    RetrievalStartEvent: ("retrieve", True),
    RetrievalEndEvent: ("retrieve", False),
    ReRankStartEvent: ("rerank", True),
    ReRankEndEvent: ("rerank", False),
    LLMChatStartEvent: ("generate", True),
    LLMChatEndEvent: ("generate", False),
}


class _Stages(BaseEventHandler):
    """Each stage's seconds (retrieve, rerank, first token, generate) and the last chat response."""

    last: Any = None
    seconds: dict[str, float] = {}
    started: dict[str, float] = {}

    @classmethod
    def class_name(cls) -> str:
        return "RyzenAIDemoStages"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        now = time.perf_counter()
        if isinstance(event, LLMChatInProgressEvent) and "generate" in self.started:
            self.seconds.setdefault("first_token", now - self.started["generate"])
            return
        stage = _STAGES.get(type(event))
        if stage is None:
            return
        name, starts = stage
        if starts:
            self.started[name] = now
        elif name in self.started:
            self.seconds[name] = now - self.started[name]
        if isinstance(event, LLMChatEndEvent):
            self.last = event.response


def build_query_engine(
    llm: RyzenAILLM,
    texts: Sequence[str],
    k: int = 2,
    embed_model: BaseEmbedding | None = None,
    reranker: BaseNodePostprocessor | None = None,
) -> RetrieverQueryEngine:
    """A streaming query engine over ``texts`` (one node each): BM25, or vectors from ``embed_model``.

    With a ``reranker`` the retriever fetches every node and the reranker keeps the best (its
    ``top_n``); else the retriever fetches ``k``.
    """
    nodes = [TextNode(text=t, id_=f"doc-{i}") for i, t in enumerate(texts)]
    fetch = k if reranker is None else len(nodes)
    retriever: BaseRetriever
    if embed_model is None:
        retriever = BM25NodeRetriever(nodes, k=fetch)
    else:
        retriever = VectorStoreIndex(nodes, embed_model=embed_model).as_retriever(similarity_top_k=fetch)
    postprocessors = [reranker] if reranker is not None else []
    return RetrieverQueryEngine.from_args(retriever, llm=llm, streaming=True, node_postprocessors=postprocessors)


def run(
    llm: RyzenAILLM,
    texts: Sequence[str],
    question: str,
    on_token: Callable[[str], None],
    embed_model: BaseEmbedding | None = None,
    reranker: BaseNodePostprocessor | None = None,
) -> tuple[str, Any, dict[str, float]]:
    """Stream the answer through ``on_token``; return the text, the final chat response and the stage times."""
    handler = _Stages(seconds={}, started={})
    dispatcher = get_dispatcher()
    dispatcher.add_event_handler(handler)
    try:
        response = build_query_engine(llm, texts, embed_model=embed_model, reranker=reranker).query(question)
        parts = []
        for token in response.response_gen:  # type: ignore[union-attr]
            on_token(token)
            parts.append(token)
    finally:
        dispatcher.event_handlers.remove(handler)
    return "".join(parts), handler.last, handler.seconds
