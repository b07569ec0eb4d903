"""``llama_index.llms.ryzenai``, where LlamaIndex looks for integrations: ``llamaindex_ryzenai``'s classes."""

from llamaindex_ryzenai import PackageTokenizer, RyzenAILLM

__all__ = ["PackageTokenizer", "RyzenAILLM"]
