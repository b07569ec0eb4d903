"""LangChain face of ryzenai-llm: :class:`ChatRyzenAI`, :class:`RyzenAIEmbeddings` and :class:`RyzenAIRerank`.

Each class loads with its module on first use: a chat model does not import the embedding and
rerank machinery (onnxruntime, LangChain's document types). The chat model's first import starts
its model worker before LangChain's own import, which it runs beside (see
:mod:`ryzenai_core.engine.spare`; ``RYZENAI_LLM_EXECUTION=inline`` starts none).
"""

from __future__ import annotations

import typing

from ryzenai_core.engine.spare import start_spare_ahead
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


#: The LLM's worker starts before the framework's import, which then runs beside it.
__getattr__, __dir__ = lazy_names(__name__, _LAZY, {"__version__": _version}, ahead={"ChatRyzenAI": start_spare_ahead})


__all__ = ["ChatRyzenAI", "RyzenAIEmbeddings", "RyzenAIRerank", "__version__"]
