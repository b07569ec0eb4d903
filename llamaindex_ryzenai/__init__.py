"""LlamaIndex face of ryzenai-llm.

``RyzenAILLM`` is a LlamaIndex ``FunctionCallingLLM`` over a Ryzen AI model package;
``RyzenAIEmbedding`` is a LlamaIndex ``BaseEmbedding`` over an ONNX embedding model;
``RyzenAIRerank`` is a node postprocessor that reranks retrieved nodes with a cross-encoder;
``BucketPackingPostprocessor`` fills retrieved context up to the NPU's prefill bucket edges.

Each class loads with its module on first use: an LLM does not import the embedding, rerank
and postprocessor machinery. Importing a class or building a model object starts nothing: the
model's worker process starts with its first call.
"""

from __future__ import annotations

import typing

from ryzenai_core.lazy import lazy_names, require_framework

require_framework("llama_index.core", "llamaindex", "llamaindex_ryzenai")

if typing.TYPE_CHECKING:
    from ._tokens import PackageTokenizer
    from .embeddings import RyzenAIEmbedding
    from .llms import RyzenAILLM
    from .postprocessor import BucketPackingPostprocessor
    from .rerank import RyzenAIRerank

    __version__: str

#: The public names imported on first use -> the module that defines them.
_LAZY = {
    "BucketPackingPostprocessor": ".postprocessor",
    "PackageTokenizer": "._tokens",
    "RyzenAIEmbedding": ".embeddings",
    "RyzenAILLM": ".llms",
    "RyzenAIRerank": ".rerank",
}


def _version() -> str:
    import ryzenai_core

    return str(ryzenai_core.__version__)


__getattr__, __dir__ = lazy_names(__name__, _LAZY, {"__version__": _version})


__all__ = [
    "BucketPackingPostprocessor",
    "PackageTokenizer",
    "RyzenAIEmbedding",
    "RyzenAILLM",
    "RyzenAIRerank",
    "__version__",
]
