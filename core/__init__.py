"""ryzenai_core: the engine behind ryzenai-llm.

Model packages (:class:`ModelPackage`), bucketed context accounting
(:class:`ContextBudget`, :class:`BudgetPlan`), chat templates (:class:`ChatTemplate`),
streaming generation (:class:`Engine` -> :class:`Chunk`), embedding models
(:class:`EmbeddingPackage`, :class:`EmbeddingEngine`), rerankers (:class:`RerankPackage`,
:class:`RerankEngine`) and the error hierarchy
(:class:`RyzenAIError`). Imports neither LangChain nor LlamaIndex, and imports
onnxruntime-genai (onnxruntime for embeddings) only when a model is loaded.
"""

from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version
from typing import TYPE_CHECKING as _TYPE_CHECKING

from .embeddings.embedding import EmbeddingEngine, EmbeddingResult
from .embeddings.package import EmbeddingPackage
from .engine.engine import Completion, Engine
from .errors import (
    ChatTemplateError,
    ConfigError,
    ContextWindowExceededError,
    GenerationError,
    GenerationTimeoutError,
    GuidanceUnsupportedError,
    InvalidRequestError,
    LfsPointerError,
    MissingTokenizerError,
    ModelNotFoundError,
    ModelPackageError,
    RuntimeNotAvailableError,
    RyzenAIError,
    StreamAbandonedError,
    UnsafePathError,
    UnsupportedModelError,
    WorkerDiedError,
)
from .generation.streaming import Chunk, Timings, Usage
from .messages import ChatMessage, RawPrompt, ToolCall
from .options import GenerationOptions, Guidance, ResponseFormat
from .package.budget import BudgetPlan, ContextBudget
from .package.folder import Mode, ModelPackage
from .prompt.templates import ChatTemplate
from .request import Request
from .rerank.engine import RerankEngine, RerankResult
from .rerank.package import RerankPackage
from .spawn import freeze_support

if _TYPE_CHECKING:  # the worker modules freeze_support runs by name, named for freezers that follow imports
    from .embeddings import worker as _embedding_worker  # noqa: F401
    from .engine import worker as _engine_worker  # noqa: F401

try:
    __version__ = _version("ryzenai-llm")
except _PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
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
    "freeze_support",
]
