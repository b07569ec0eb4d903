"""What the LangChain face's classes share: serialization under the public import, the encoders' construction."""

from __future__ import annotations

from typing import Any

from langchain_core.load.serializable import Serializable

from ._options import refuse_unknown

__all__ = ["CheckedEncoder", "PublicSerialization"]


class PublicSerialization:
    """LangChain's ``dumps`` / ``loads`` round-trip a face's settings (never its loaded model).

    Example:
        >>> from langchain_core.load import dumps, loads
        >>> from langchain_ryzenai import ChatRyzenAI
        >>> llm = ChatRyzenAI(model="amd/Llama-3.2-1B_rai_1.8.0_npu_4K", temperature=0)
        >>> loads(dumps(llm), valid_namespaces=["langchain_ryzenai"], allowed_objects=[ChatRyzenAI]) == llm
        True

    ``valid_namespaces`` lets ``loads`` import from ``langchain_ryzenai``; ``allowed_objects`` names
    the classes it may revive (langchain-core 0.3.81 and 1.2.5 and later revive only their own
    classes unless told; a chain lists its parts too). Releases before those have no
    ``allowed_objects``: ``loads(text, valid_namespaces=["langchain_ryzenai"])`` there.
    """

    @classmethod
    def is_lc_serializable(cls) -> bool:
        """True: ``dumps`` / ``loads`` round-trip the settings (see the class docstring for the arguments)."""
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
