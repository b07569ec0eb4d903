"""LangChain face of ryzenai-llm: :class:`ChatRyzenAI`, :class:`RyzenAIEmbeddings` and :class:`RyzenAIRerank`."""

from ryzenai_core.faces import require_framework

require_framework("langchain_core", "langchain", "langchain_ryzenai")

from ryzenai_core import __version__  # noqa: E402

from .chat_models import ChatRyzenAI  # noqa: E402
from .embeddings import RyzenAIEmbeddings  # noqa: E402
from .rerank import RyzenAIRerank  # noqa: E402

__all__ = ["ChatRyzenAI", "RyzenAIEmbeddings", "RyzenAIRerank", "__version__"]
