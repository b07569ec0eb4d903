"""ryzenai_core: the engine behind ryzenai-llm.

Model packages (:class:`ModelPackage`), bucketed context accounting
(:class:`ContextBudget`, :class:`BudgetPlan`), chat templates (:class:`ChatTemplate`),
streaming generation (:class:`Engine` -> :class:`Chunk`), embedding models
(:class:`EmbeddingPackage`, :class:`EmbeddingEngine`), rerankers (:class:`RerankPackage`,
:class:`RerankEngine`) and the error hierarchy
(:class:`RyzenAIError`). Imports neither LangChain nor LlamaIndex, and imports
onnxruntime-genai (onnxruntime for embeddings) only when a model is loaded.

Names load on first use (PEP 562): ``import ryzenai_core`` imports only the errors, and a
worker process or a face imports only the wings it runs (no embeddings, rerankers or
LlamaIndex-only helpers for a chat model).
"""

from __future__ import annotations

import typing

from .errors import *  # noqa: F403 - the error hierarchy (errors.__all__), public here and listed below
from .lazy import lazy_names

if typing.TYPE_CHECKING:
    from .adapters import LoraAdapter
    from .embeddings.embedding import EmbeddingEngine, EmbeddingResult
    from .embeddings.package import EmbeddingPackage
    from .engine.engine import Engine
    from .generation.streaming import Chunk, Completion, Timings, Usage
    from .lifecycle import close_all
    from .messages import ChatMessage, RawPrompt, ToolCall
    from .options import GenerationOptions, Guidance, ResponseFormat
    from .package.budget import BudgetPlan, ContextBudget
    from .package.folder import Mode, ModelPackage
    from .prompt.templates import ChatTemplate
    from .request import Request
    from .rerank.engine import RerankEngine, RerankResult
    from .rerank.package import RerankPackage
    from .spawn import freeze_support

    __version__: str

if typing.TYPE_CHECKING:  # the worker modules freeze_support runs by name, named for freezers that follow imports
    from .embeddings import worker as _embedding_worker  # noqa: F401
    from .engine import worker as _engine_worker  # noqa: F401

#: The public names imported on first use -> the module that defines them.
_LAZY = {
    "BudgetPlan": ".package.budget",
    "ChatMessage": ".messages",
    "ChatTemplate": ".prompt.templates",
    "Chunk": ".generation.streaming",
    "Completion": ".generation.streaming",
    "ContextBudget": ".package.budget",
    "EmbeddingEngine": ".embeddings.embedding",
    "EmbeddingPackage": ".embeddings.package",
    "EmbeddingResult": ".embeddings.embedding",
    "Engine": ".engine.engine",
    "GenerationOptions": ".options",
    "Guidance": ".options",
    "LoraAdapter": ".adapters",
    "Mode": ".package.folder",
    "ModelPackage": ".package.folder",
    "RawPrompt": ".messages",
    "Request": ".request",
    "RerankEngine": ".rerank.engine",
    "RerankPackage": ".rerank.package",
    "RerankResult": ".rerank.engine",
    "ResponseFormat": ".options",
    "Timings": ".generation.streaming",
    "ToolCall": ".messages",
    "Usage": ".generation.streaming",
    "close_all": ".lifecycle",
    "freeze_support": ".spawn",
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ryzenai-llm")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0.0.0"


__getattr__, __dir__ = lazy_names(__name__, _LAZY, {"__version__": _version})


__all__ = [
    "AdapterError",
    "BudgetPlan",
    "ChatMessage",
    "ChatTemplate",
    "ChatTemplateError",
    "Chunk",
    "Completion",
    "ConfigError",
    "ContextBudget",
    "ContextWindowExceededError",
    "EmbeddingEngine",
    "EmbeddingPackage",
    "EmbeddingResult",
    "Engine",
    "GenerationError",
    "GenerationOptions",
    "GenerationTimeoutError",
    "Guidance",
    "GuidanceUnsupportedError",
    "InvalidRequestError",
    "LfsPointerError",
    "LoraAdapter",
    "MissingTokenizerError",
    "Mode",
    "ModelNotFoundError",
    "ModelPackage",
    "ModelPackageError",
    "RawPrompt",
    "Request",
    "RerankEngine",
    "RerankPackage",
    "RerankResult",
    "ResponseFormat",
    "RuntimeNotAvailableError",
    "RyzenAIError",
    "StreamAbandonedError",
    "Timings",
    "ToolCall",
    "UnsafePathError",
    "UnsupportedModelError",
    "Usage",
    "WorkerDiedError",
    "__version__",
    "close_all",
    "freeze_support",
]
