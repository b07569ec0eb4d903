"""LlamaIndex face of ryzenai-llm."""

from ryzenai_core._compat import require_framework

require_framework("llama_index.core", "llamaindex", "llamaindex_ryzenai")

from ryzenai_core import __version__  # noqa: E402

__all__ = ["__version__"]
