"""LangChain face of ryzenai-llm: :class:`ChatRyzenAI`, :class:`RyzenAIEmbeddings` and :class:`RyzenAIRerank`.

Each class loads with its module on first use: a chat model does not import the embedding and
rerank machinery (onnxruntime, LangChain's document types). Importing a class or building a model
object starts nothing: the model's worker process starts with its first call.
"""

from __future__ import annotations

import typing

from ryzenai_core.lazy import lazy_names, require_framework

require_framework("langchain_core", "langchain", "langchain_ryzenai")

if typing.TYPE_CHECKING:
    from .chat_models import ChatRyzenAI
    from .embeddings import RyzenAIEmbeddings
    from .rerank import RyzenAIRerank

    __version__: str

#: The public names imported on first use -> the module that defines them.
_LAZY = {"ChatRyzenAI": ".chat_models", "RyzenAIEmbeddings": ".embeddings", "RyzenAIRerank": ".rerank"}


def _version() -> str:
    import ryzenai_core

    return str(ryzenai_core.__version__)


__getattr__, __dir__ = lazy_names(__name__, _LAZY, {"__version__": _version})


__all__ = ["ChatRyzenAI", "RyzenAIEmbeddings", "RyzenAIRerank", "__version__"]
