"""Text <-> token ids for one loaded model, whole: NUL characters included, invalid bytes kept.

onnxruntime-genai's tokenizer reads text as a C string (it would stop at a NUL) and its decode
returns valid UTF-8 only (it drops what follows a broken character). :class:`Tokens` encodes
between NULs, each NUL becoming the vocabulary's own token for byte 0, and decodes from the
tokens' bytes where the vocabulary maps to them (:mod:`.token_bytes`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ..errors import InvalidRequestError
from ..messages import check_prompt_text
from ..package.folder import ModelPackage
from .loader import load_tokenizer, token_table
from .streaming import IncrementalDecoder
from .token_bytes import TokenBytes, byte_zero_token

__all__ = ["TokenizerParts", "Tokens", "tokens_without_model"]


class TokenizerParts(Protocol):
    """What :class:`Tokens` reads of a loaded model (:class:`~.loader.Loaded` has it)."""

    @property
    def tokenizer(self) -> Any:
        """The ``og.Tokenizer``."""

    @property
    def token_bytes(self) -> TokenBytes | None:
        """The bytes of every token, where the vocabulary maps to them."""


class Tokens:
    """Encode and decode with a package's tokenizer; ``loaded`` loads the model on first use."""

    def __init__(self, package: ModelPackage, loaded: Callable[[], TokenizerParts]) -> None:
        self.package = package
        self._loaded = loaded
        #: Tokens of a text alone, cached (fixed texts such as a tool call's framing are counted often).
        self.count_text: Callable[[str], int] = functools.lru_cache(maxsize=1024)(self._count_text)

    @functools.cached_property
    def nul_token(self) -> tuple[int | None]:
        """The vocabulary's token for byte 0, if it has one (in a 1-tuple: read once)."""
        return (byte_zero_token(self.package.tokenizer_files),)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no special tokens added: templates carry their own BOS).

        The whole text is encoded: onnxruntime-genai's tokenizer reads its input as a C
        string and would stop at the first NUL character (PDF and OCR text often holds
        them), so the text is encoded between NULs and each NUL becomes the vocabulary's
        own token for byte 0.

        Raises:
            InvalidRequestError: a lone surrogate, or a NUL for a tokenizer without a byte-0 token.
        """
        check_prompt_text(text)
        tokenizer = self._loaded().tokenizer
        if "\x00" not in text:
            return _int_list(tokenizer.encode(text))
        nul = self.nul_token[0]
        if nul is None:
            raise InvalidRequestError(
                f"the prompt holds a NUL character at position {text.index(chr(0))}, and the tokenizer of "
                f"{self.package.name} has no token for byte 0; remove NUL characters (text.replace('\\x00', ''))"
            )
        ids: list[int] = []
        for i, part in enumerate(text.split("\x00")):
            if i:
                ids.append(nul)
            if part:
                ids.extend(_int_list(tokenizer.encode(part)))
        return ids

    def _count_text(self, text: str) -> int:
        return len(self.encode(text))

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (special tokens skipped; invalid bytes become U+FFFD, nothing is dropped).

        Byte-level and byte-fallback vocabularies are decoded from the tokens' bytes
        (:class:`~ryzenai_core.generation.token_bytes.TokenBytes`): the runtime's decode ends at a NUL and
        drops the text after bytes that are not valid UTF-8. Other tokenizers use the runtime's
        decode between the byte-0 tokens, joined with NUL, so no text after one is lost.
        """
        if not len(ids):
            return ""
        loaded = self._loaded()
        if loaded.token_bytes is not None:
            return loaded.token_bytes.decode([int(i) for i in ids])
        tokenizer = loaded.tokenizer
        nul = self.nul_token[0]
        if nul is None or nul not in ids:
            return str(tokenizer.decode(list(ids)))
        parts: list[list[int]] = [[]]
        for i in ids:
            if i == nul:
                parts.append([])
            else:
                parts[-1].append(int(i))
        return "\x00".join(str(tokenizer.decode(p)) if p else "" for p in parts)

    def incremental_decoder(self) -> IncrementalDecoder:
        """A decoder of generated ids into text deltas that add up to :meth:`decode`."""
        table = self._loaded().token_bytes
        return IncrementalDecoder(self.decode, token_bytes=table.table if table is not None else None)


class _TokenizerAlone:
    """A tokenizer loaded without its model; its byte table is read on the first decode."""

    def __init__(self, package: ModelPackage, tokenizer: Any) -> None:
        self.package = package
        self.tokenizer = tokenizer

    @functools.cached_property
    def token_bytes(self) -> TokenBytes | None:
        return token_table(self.package, self.tokenizer)


def tokens_without_model(package: ModelPackage) -> Tokens | None:
    """:class:`Tokens` of ``package`` with its tokenizer alone (no model loaded, nothing started).

    They encode and decode exactly as a loaded model's (the same code, the same tokenizer). None on a
    runtime that makes a tokenizer from a loaded model only (see :func:`~.loader.load_tokenizer`).
    """
    tokenizer = load_tokenizer(package)
    if tokenizer is None:
        return None
    parts = _TokenizerAlone(package, tokenizer)
    return Tokens(package, lambda: parts)


def _int_list(ids: Any) -> list[int]:
    """Python ints of the runtime's token ids (a numpy array: one conversion, not one per id)."""
    return list(ids.tolist()) if hasattr(ids, "tolist") else [int(i) for i in ids]
