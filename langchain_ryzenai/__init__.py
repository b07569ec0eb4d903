"""LangChain face of ryzenai-llm."""

from ryzenai_core._compat import require_framework

require_framework("langchain_core", "langchain", "langchain_ryzenai")

from ryzenai_core import __version__  # noqa: E402

__all__ = ["__version__"]
