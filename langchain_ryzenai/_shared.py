"""What the LangChain face's classes share: serialization under the public import, the encoders' construction."""

from __future__ import annotations

from typing import Any

from langchain_core.load.serializable import Serializable

from ._options import refuse_unknown

__all__ = ["CheckedEncoder", "PublicSerialization"]


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


class CheckedEncoder(PublicSerialization):
    """An encoder's LangChain class (a mixin, listed first): unknown parameters refused by name.

    (Its class keeps its own ``model_config``: pydantic takes a later base's over a mixin's.)
    """

    def __init__(self, **data: Any) -> None:
        """Build from the settings' fields (``model``, ``provider``, ``shapes``, ...) and the class's own.

        Raises:
            InvalidRequestError: an unknown parameter (with the closest known name).
            pydantic.ValidationError: a value out of range.
        """
        refuse_unknown(type(self), data, Serializable)  # type: ignore[arg-type]  # a pydantic model by its bases
        super().__init__(**data)
