"""LlamaIndex face of the reranker: :class:`RyzenAIRerank`, a node postprocessor.

Data flow::

    retrieved nodes + query bundle
      -> ryzenai_core.rerank.engine.RerankEngine.rerank: (query, node text as the embedder sees it)
         pairs, sorted by length, padded to pair-length buckets on the NPU, one score each
      -> the best ``top_n`` nodes, best first, their scores replaced by the reranker's
         (LlamaIndex's ReRankStartEvent / ReRankEndEvent and a RERANKING callback event around it)

In a query engine, retrieve wide, rerank, then pack the prompt to the NPU's bucket:
``index.as_query_engine(similarity_top_k=20, node_postprocessors=[RyzenAIRerank(model=..., top_n=6),
BucketPackingPostprocessor(llm=llm, default_top_n=3)])``.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.callbacks import CBEventType, EventPayload
from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined]
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from ryzenai_core.errors import InvalidRequestError
from ryzenai_core.rerank.engine import RerankSettings

from ._fields import checked_fields

__all__ = ["RyzenAIRerank"]

dispatcher = get_dispatcher(__name__)


class RyzenAIRerank(BaseNodePostprocessor, RerankSettings):
    """Rerank retrieved nodes with a cross-encoder on the Ryzen AI NPU (or the CPU elsewhere).

    ``model`` is a cross-encoder folder as Hugging Face ships them (``config.json`` with a
    ``*ForSequenceClassification`` architecture and one label, ``tokenizer.json``,
    ``onnx/model.onnx``), a Hugging Face repository id (the cache first) or an embedded model's
    name. Each node is scored on its text with the metadata the embedder sees
    (``MetadataMode.EMBED``, as SentenceTransformerRerank); scores are what
    sentence-transformers' ``CrossEncoder.predict`` gives (the sigmoid of the logit) and replace
    the retriever's. A node too long to fit beside the query is scored on its first tokens,
    and logged (``on_overflow="error"`` raises instead).

    Example:
        .. code-block:: python

            from llamaindex_ryzenai import BucketPackingPostprocessor, RyzenAIRerank

            engine = index.as_query_engine(
                llm=llm,
                similarity_top_k=20,
                node_postprocessors=[
                    RyzenAIRerank(model="BAAI/bge-reranker-base", top_n=6),
                    BucketPackingPostprocessor(llm=llm, default_top_n=3),
                ],
            )
    """

    def __init__(self, **data: Any) -> None:
        """Build the reranker; unknown fields are refused with the closest known names."""
        super().__init__(**checked_fields(type(self), data, aliases={}))

    @classmethod
    def class_name(cls) -> str:
        """Name for serialisation."""
        return "RyzenAIRerank"

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if query_bundle is None:
            raise InvalidRequestError(
                "RyzenAIRerank needs the query to rank nodes against: call postprocess_nodes(nodes, query_str=...) "
                "or query_bundle=QueryBundle(...) (a query engine passes it)"
            )
        dispatcher.event(
            ReRankStartEvent(query=query_bundle, nodes=nodes, top_n=self.top_n or len(nodes), model_name=self.model)
        )
        if not nodes:
            dispatcher.event(ReRankEndEvent(nodes=[]))
            return []
        texts = [n.node.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
        payload: dict[str, Any] = {
            EventPayload.NODES: nodes,
            EventPayload.MODEL_NAME: self.model,
            EventPayload.QUERY_STR: query_bundle.query_str,
            EventPayload.TOP_K: self.top_n,
        }
        with self.callback_manager.event(CBEventType.RERANKING, payload=payload) as event:
            result = self.rerank_with_settings(query_bundle.query_str, texts)
            ranked = [NodeWithScore(node=nodes[i].node, score=result.scores[i]) for i in result.top(self.top_n)]
            event.on_end(payload={EventPayload.NODES: ranked})
        dispatcher.event(ReRankEndEvent(nodes=ranked))
        return ranked
