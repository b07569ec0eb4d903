"""``llama_index.embeddings.ryzenai``, where LlamaIndex looks for integrations: ``llamaindex_ryzenai``'s class."""

from llamaindex_ryzenai import RyzenAIEmbedding

__all__ = ["RyzenAIEmbedding"]
