"""LlamaIndex face of ryzenai-llm.

``RyzenAILLM`` is a LlamaIndex ``FunctionCallingLLM`` over a Ryzen AI model package;
``RyzenAIEmbedding`` is a LlamaIndex ``BaseEmbedding`` over an ONNX embedding model;
``RyzenAIRerank`` is a node postprocessor that reranks retrieved nodes with a cross-encoder;
``BucketPackingPostprocessor`` fills retrieved context up to the NPU's prefill bucket edges.
"""

from ryzenai_core.faces import require_framework

require_framework("llama_index.core", "llamaindex", "llamaindex_ryzenai")

from ryzenai_core import __version__  # noqa: E402

from .embeddings import RyzenAIEmbedding  # noqa: E402
from .llms import PackageTokenizer, RyzenAILLM  # noqa: E402
from .postprocessor import BucketPackingPostprocessor  # noqa: E402
from .rerank import RyzenAIRerank  # noqa: E402

__all__ = [
    "BucketPackingPostprocessor",
    "PackageTokenizer",
    "RyzenAIEmbedding",
    "RyzenAILLM",
    "RyzenAIRerank",
    "__version__",
]
