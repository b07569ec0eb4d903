"""``llama_index.postprocessor.ryzenai_rerank``, where LlamaIndex looks for rerankers: ``llamaindex_ryzenai``'s."""

from llamaindex_ryzenai import RyzenAIRerank

__all__ = ["RyzenAIRerank"]
