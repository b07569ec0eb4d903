"""ryzenai_core: the engine behind ryzenai-llm.

Model packages (:class:`ModelPackage`), bucketed context accounting
(:class:`ContextBudget`, :class:`BudgetPlan`) and the error hierarchy
(:class:`RyzenAIError`). Imports neither LangChain nor LlamaIndex, and imports
onnxruntime-genai only when a model is loaded.
"""

from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
from importlib.metadata import version as _version

from .budget import BudgetPlan, ContextBudget
from .errors import (
    ChatTemplateError,
    ConfigError,
    ContextWindowExceededError,
    GenerationError,
    GuidanceUnsupportedError,
    InvalidRequestError,
    LfsPointerError,
    MissingTokenizerError,
    ModelNotFoundError,
    ModelPackageError,
    RuntimeNotAvailableError,
    RyzenAIError,
    UnsafePathError,
    UnsupportedModelError,
)
from .package import Mode, ModelPackage

try:
    __version__ = _version("ryzenai-llm")
except _PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
    "BudgetPlan",
    "ChatTemplateError",
    "ConfigError",
    "ContextBudget",
    "ContextWindowExceededError",
    "GenerationError",
    "GuidanceUnsupportedError",
    "InvalidRequestError",
    "LfsPointerError",
    "MissingTokenizerError",
    "Mode",
    "ModelNotFoundError",
    "ModelPackage",
    "ModelPackageError",
    "RuntimeNotAvailableError",
    "RyzenAIError",
    "UnsafePathError",
    "UnsupportedModelError",
    "__version__",
]
