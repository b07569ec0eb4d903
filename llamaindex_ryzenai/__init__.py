"""LlamaIndex face of ryzenai-llm.

``RyzenAILLM`` is a LlamaIndex ``FunctionCallingLLM`` over a Ryzen AI model package;
``RyzenAIEmbedding`` is a LlamaIndex ``BaseEmbedding`` over an ONNX embedding model;
``RyzenAIRerank`` is a node postprocessor that reranks retrieved nodes with a cross-encoder;
``BucketPackingPostprocessor`` fills retrieved context up to the NPU's prefill bucket edges.

Each class loads with its module on first use: an LLM does not import the embedding, rerank
and postprocessor machinery.
"""

from __future__ import annotations

import importlib
import typing

from ryzenai_core.faces import require_framework

require_framework("llama_index.core", "llamaindex", "llamaindex_ryzenai")

if typing.TYPE_CHECKING:
    from .embeddings import RyzenAIEmbedding
    from .llms import PackageTokenizer, RyzenAILLM
    from .postprocessor import BucketPackingPostprocessor
    from .rerank import RyzenAIRerank

    __version__: str

#: The public names imported on first use -> the module that defines them.
_LAZY = {
    "BucketPackingPostprocessor": ".postprocessor",
    "PackageTokenizer": ".llms",
    "RyzenAIEmbedding": ".embeddings",
    "RyzenAILLM": ".llms",
    "RyzenAIRerank": ".rerank",
}


def __getattr__(name: str) -> typing.Any:
    """Import a public name's module on first use (then the name is an ordinary attribute)."""
    if name == "__version__":
        import ryzenai_core

        value: typing.Any = ryzenai_core.__version__
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "BucketPackingPostprocessor",
    "PackageTokenizer",
    "RyzenAIEmbedding",
    "RyzenAILLM",
    "RyzenAIRerank",
    "__version__",
]
