"""LangChain face of the embedding engine: :class:`RyzenAIEmbeddings`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Literal

from langchain_core.embeddings import Embeddings
from langchain_core.load.serializable import Serializable
from pydantic import ConfigDict, Field

from ryzenai_core.embeddings.embedding import EmbeddingResult
from ryzenai_core.embeddings.settings import EmbeddingSettings

from ._shared import CheckedEncoder

__all__ = ["RyzenAIEmbeddings"]


class RyzenAIEmbeddings(CheckedEncoder, EmbeddingSettings, Embeddings, Serializable):
    """Embeddings from an ONNX embedding model on the Ryzen AI NPU (or the CPU elsewhere).

    ``model`` is a folder as Hugging Face ships sentence-transformers models
    (``onnx/model.onnx``, ``tokenizer.json``, ``1_Pooling/config.json``) or as AMD's NPU
    examples export them (a static ``model.onnx``), or a Hugging Face repository id (the
    cache first). Pooling, maximum length and normalisation come from the folder; BGE models
    get BGE's query instruction. Texts longer than the maximum length are truncated and
    logged (``on_overflow="error"`` raises instead). A blank text (whitespace or invisible
    characters only: an image-only PDF page, an agent's empty search query) is embedded as the
    empty text, with a warning naming it, so ``from_documents`` and the agent go on.

    Example:
        .. code-block:: python

            from langchain_core.vectorstores import InMemoryVectorStore
            from langchain_ryzenai import RyzenAIEmbeddings

            embeddings = RyzenAIEmbeddings(model="BAAI/bge-small-en-v1.5")
            store = InMemoryVectorStore.from_texts(["NPUs run fixed shapes."], embeddings)
    """

    model_config = ConfigDict(extra="forbid", protected_namespaces=(), arbitrary_types_allowed=True)

    batch_size: int = Field(default=32, ge=1)
    """Texts per run with dynamic shapes."""
    document_instruction: str | None = None
    """Prefix for documents (default: none)."""
    show_progress: bool = False
    """Show a progress bar over the texts of embed_documents."""

    def __init__(self, **data: Any) -> None:  # declared here, so that type checkers read the settings as its own
        """Build from the fields above and the encoder settings'.

        Raises:
            InvalidRequestError: an unknown field, or ``dimensions`` the model was not trained for.
        """
        super().__init__(**data)
        self.engine.check_dimensions(self.dimensions)

    def embed(self, texts: list[str], *, kind: Literal["query", "document"] = "document") -> EmbeddingResult:
        """Embed with the full result: vectors, token counts, truncated texts, padding."""
        instruction = self.query_instruction if kind == "query" else self.document_instruction
        progress: Callable[[int], None] | None = None
        bar: Any = None
        if self.show_progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(texts), desc="embedding", unit="text")

            def progress(done: int) -> None:
                bar.update(done - bar.n)

        try:
            result: EmbeddingResult = self.embed_with_settings(
                texts, kind=kind, instruction=instruction, batch_size=self.batch_size, progress=progress
            )
            return result
        finally:
            if bar is not None:
                bar.close()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """One vector per text (none for no texts, as LangChain's embeddings do)."""
        vectors: list[list[float]] = self.embed(texts).vectors
        return vectors

    def embed_query(self, text: str) -> list[float]:
        """The vector of one query (with the query instruction)."""
        vector: list[float] = self.embed([text], kind="query").vectors[0]
        return vector

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """embed_documents on a worker thread: the event loop keeps running."""
        return await asyncio.to_thread(self.embed_documents, texts)

    async def aembed_query(self, text: str) -> list[float]:
        """embed_query on a worker thread: the event loop keeps running."""
        return await asyncio.to_thread(self.embed_query, text)
