"""LangChain face of ryzenai-llm: :class:`ChatRyzenAI`, :class:`RyzenAIEmbeddings` and :class:`RyzenAIRerank`.

Each class loads with its module on first use: a chat model does not import the embedding and
rerank machinery (onnxruntime, LangChain's document types).
"""

from __future__ import annotations

import importlib
import typing

from ryzenai_core.faces import require_framework

require_framework("langchain_core", "langchain", "langchain_ryzenai")

if typing.TYPE_CHECKING:
    from .chat_models import ChatRyzenAI
    from .embeddings import RyzenAIEmbeddings
    from .rerank import RyzenAIRerank

    __version__: str

#: The public names imported on first use -> the module that defines them.
_LAZY = {"ChatRyzenAI": ".chat_models", "RyzenAIEmbeddings": ".embeddings", "RyzenAIRerank": ".rerank"}


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


__all__ = ["ChatRyzenAI", "RyzenAIEmbeddings", "RyzenAIRerank", "__version__"]
