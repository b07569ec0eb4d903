"""LlamaIndex face of the embedding engine: :class:`RyzenAIEmbedding`."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from pydantic import Field

from ryzenai_core.embeddings.settings import EmbeddingSettings

from ._fields import checked_fields

__all__ = ["RyzenAIEmbedding"]


class RyzenAIEmbedding(BaseEmbedding, EmbeddingSettings):
    """A LlamaIndex embedding model on the Ryzen AI NPU (or the CPU elsewhere).

    ``model`` is an embedding folder (Hugging Face's sentence-transformers layout with
    ``onnx/model.onnx``, or AMD's static export) or a Hugging Face repository id. LlamaIndex
    batches texts by ``embed_batch_size`` (each batch is one engine call, sorted by length and
    padded to buckets on the NPU). A blank text (whitespace or invisible characters only: an
    image-only page, an empty query; LlamaIndex's index skips only empty nodes) is embedded as
    the empty text, with a warning naming it, as in the LangChain face. LlamaIndex's default
    chunk size (1024 tokens) is longer than most embedding models take (512): such chunks are
    truncated and logged; set
    ``Settings.chunk_size`` below the model's ``max_length``, or ``on_overflow="error"``.

    Example:
        .. code-block:: python

            from llama_index.core import Settings, VectorStoreIndex
            from llamaindex_ryzenai import RyzenAIEmbedding

            Settings.embed_model = RyzenAIEmbedding(model="BAAI/bge-small-en-v1.5")
            index = VectorStoreIndex.from_documents(documents)
    """

    text_instruction: str | None = Field(default=None, description="prefix for documents (default: none)")

    def __init__(self, **data: Any) -> None:
        """Build the embedding model; unknown fields are refused with the closest known names.

        Raises:
            InvalidRequestError: an unknown field (``batchsize``: did you mean ``embed_batch_size``?), or
                ``dimensions`` the model was not trained for.
        """
        data = checked_fields(type(self), data, aliases={})
        data.setdefault("model_name", str(data.get("model", "")))
        super().__init__(**data)
        self.engine.check_dimensions(self.dimensions)

    @classmethod
    def class_name(cls) -> str:
        """Name for serialisation."""
        return "RyzenAIEmbedding"

    def _embed(self, texts: list[str], kind: Literal["query", "document"]) -> list[Embedding]:
        instruction = self.query_instruction if kind == "query" else self.text_instruction
        vectors: list[Embedding] = self.embed_with_settings(
            texts,
            kind=kind,
            instruction=instruction,
            batch_size=self.embed_batch_size,
        ).vectors
        return vectors

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._embed([query], "query")[0]

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._embed([text], "document")[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return self._embed(texts, "document")

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return await asyncio.to_thread(self._get_query_embedding, query)

    async def _aget_text_embedding(self, text: str) -> Embedding:
        return await asyncio.to_thread(self._get_text_embedding, text)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return await asyncio.to_thread(self._get_text_embeddings, texts)
