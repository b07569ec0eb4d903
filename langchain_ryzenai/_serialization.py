"""How the LangChain face's classes serialize: under their public import (a mixin, listed first)."""

from __future__ import annotations

__all__ = ["PublicSerialization"]


class PublicSerialization:
    """``dumps`` / ``loads(..., valid_namespaces=["langchain_ryzenai"])`` round-trip a face's settings."""

    @classmethod
    def is_lc_serializable(cls) -> bool:
        """True: ``dumps`` / ``loads(..., valid_namespaces=["langchain_ryzenai"])`` round-trip the settings."""
        return True

    @classmethod
    def get_lc_namespace(cls) -> list[str]:
        """``["langchain_ryzenai"]``: serialized models name the public import, not a private module."""
        return ["langchain_ryzenai"]
