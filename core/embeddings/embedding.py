"""Embedding texts: :class:`EmbeddingEngine` (texts in, pooled and normalised vectors out).

Texts are checked (strings, no lone surrogates; a blank one is embedded as the empty text, with
a warning: see :func:`is_blank`), prefixed with the query or document instruction, tokenized,
truncated to the model's maximum length (or, with ``on_overflow="error"``, rejected), batched
(:mod:`.batches`) and run on :class:`~ryzenai_core.embeddings.engine.EncoderEngine`'s sessions,
which pool on the host (CLS or mean) unless the graph does; the folder's Dense layers follow
(:mod:`.modules`), then a Matryoshka cut to ``dimensions`` where the model was trained for it, and
L2 normalisation as the folder says. Padding never changes a vector: padded positions are masked
in attention and left out of the pooling.
"""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import InvalidRequestError
from ..messages import check_prompt_text
from .batches import l2_normalize
from .engine import EncoderEngine
from .package import EmbeddingPackage
from .runner import Pooling

__all__ = ["EmbeddingEngine", "EmbeddingResult", "Kind", "blanks", "empty_blanks", "is_blank"]

log = logging.getLogger("ryzenai_core")

Kind = Literal["query", "document"]

#: Unicode categories of characters that show nothing: controls (NUL, ...) and format characters
#: (the BOM, zero-width spaces and joiners, ...); whitespace is ``str.isspace``.
_INVISIBLE = frozenset({"Cc", "Cf"})


def is_blank(text: str) -> bool:
    """Whether a text has nothing to embed or rank: empty, whitespace, or only invisible characters.

    Invisible characters are controls (NUL, ...) and format characters (the BOM, zero-width
    spaces and joiners): a PDF page that is all image, or an empty search query, gives such texts.
    An encoder treats every blank text as the empty text, so they all get one vector (or score).
    """
    return all(c.isspace() or unicodedata.category(c) in _INVISIBLE for c in text)


def blanks(texts: Sequence[str]) -> list[int]:
    """The indices of the blank texts (:func:`is_blank`)."""
    return [i for i, text in enumerate(texts) if is_blank(text)]


def empty_blanks(items: list[str], *, noun: str, verb: str, made: str) -> None:
    """Make each blank text of ``items`` the empty text (in place), with one warning naming the first.

    The warning reads "N of M {noun}(s) have nothing to {verb} (...) and were {made}".
    """
    empty = blanks(items)
    if not empty:
        return
    log.warning(
        "%d of %d %s(s) have nothing to %s (empty, whitespace or invisible characters only; first: %s %d, %r) "
        "and were %s; drop blank texts first to leave them out",
        len(empty),
        len(items),
        noun,
        verb,
        noun,
        empty[0],
        items[empty[0]],
        made,
    )
    for i in empty:
        items[i] = ""


@dataclass(frozen=True)
class EmbeddingResult:
    """Vectors and what they cost.

    Attributes:
        vectors: one vector per text, in the order given.
        tokens: tokens of each text as embedded (after truncation, special tokens included).
        truncated: indices of texts cut to ``max_length``.
        padding: pad tokens added over all runs (filler rows included).
        shapes: the (rows, sequence) shape of each run, in order.
        where: where each session shape of the call ran (``"1x128"``, ``"dynamic"``): its
            provider, ``ran_on`` (``npu``, ``partial``, ``cpu``, ``gpu``, ``unknown``), the share
            of operators on the NPU and a one-line detail (on VitisAI, from the compiler's pass
            summary).
        input_shapes: the session shape label that embedded each text.
    """

    vectors: list[list[float]]
    tokens: list[int]
    truncated: list[int]
    padding: int
    shapes: list[tuple[int, int]]
    where: dict[str, dict[str, Any]] = field(default_factory=dict)
    input_shapes: list[str] = field(default_factory=list)

    @property
    def padded_tokens(self) -> int:
        """Tokens the model ran: real plus padding."""
        return sum(self.tokens) + self.padding


class EmbeddingEngine(EncoderEngine[EmbeddingPackage]):
    """Runs one embedding folder: texts in, pooled and normalised vectors out.

    Sessions, shapes, providers and workers are :class:`EncoderEngine`'s (its arguments);
    share one engine per folder and settings with :meth:`get`.
    """

    package_type = EmbeddingPackage
    package_options = ("onnx_file", "pooling")

    # -- running -----------------------------------------------------------------------------

    def instruction(self, kind: Kind) -> str:
        """The package's default prefix for queries or documents."""
        return self.package.query_instruction if kind == "query" else self.package.document_instruction

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each text before truncation (special tokens included)."""
        return [len(e.ids) for e in self.tokenizer.encode_batch(list(texts))]

    def embed(
        self,
        texts: Sequence[str],
        *,
        kind: Kind = "document",
        instruction: str | None = None,
        normalize: bool | None = None,
        batch_size: int = 32,
        on_overflow: Literal["truncate", "error"] = "truncate",
        progress: Callable[[int], None] | None = None,
        blank: Literal["embed", "error"] = "embed",
        dimensions: int | None = None,
    ) -> EmbeddingResult:
        """Embed ``texts``.

        No texts give an empty result (a filter may have removed every document).

        Args:
            texts: the texts.
            kind: ``"query"`` or ``"document"``: picks the default instruction.
            instruction: prefix for every text (default: the package's for ``kind``).
            normalize: L2-normalise (default: the package's setting).
            batch_size: texts per run with dynamic shapes (static runs hold the graph's rows).
            on_overflow: ``"truncate"`` cuts texts longer than the maximum length (logged, and
                listed in :attr:`EmbeddingResult.truncated`); ``"error"`` raises instead.
            progress: called with the number of texts done after each run.
            blank: a text with nothing to embed (:func:`is_blank`: empty, whitespace, or only
                invisible characters such as NUL, the BOM or zero-width spaces): ``"embed"`` (the
                default, in both faces) embeds it as the empty text, with a warning naming it: the
                model's special tokens alone (after the instruction, if any), what
                sentence-transformers gives ``""``, so every blank text gets one vector and a
                pipeline goes on; ``"error"`` refuses it.
            dimensions: cut each vector to its first ``dimensions`` values, then normalise it
                again (when normalising): Matryoshka truncation, for a model trained for it at
                that size (:meth:`check_dimensions`); None keeps the full vector.

        Raises:
            InvalidRequestError: a text that is not a string, holds a lone surrogate or (with
                ``blank="error"``) is blank, a text over the maximum length with
                ``on_overflow="error"``, ``dimensions`` the model was not trained for, or a bad option.
            WorkerDiedError: the worker process died during the call; the next call starts a new one.
        """
        import numpy as np

        if blank not in ("embed", "error"):
            raise InvalidRequestError(f"blank {blank!r} is not one of 'embed', 'error'")
        items = self._check_texts(texts, blank=blank)
        self.check_call(on_overflow, batch_size)
        self.check_dimensions(dimensions)
        if not items:
            return EmbeddingResult(vectors=[], tokens=[], truncated=[], padding=0, shapes=[])
        prefix = self.instruction(kind) if instruction is None else instruction
        limit, name = self.package.max_length, self.package.name
        encodings, over = self.encode_within_limit(
            [prefix + t for t in items],
            on_overflow,
            lambda i, n, count: (
                f"text {i} is {n} tokens, over {name}'s maximum of {limit} ({self.package.max_length_source}); "
                f"{count} text(s) are too long. Split the text into smaller chunks (e.g. a chunk size of "
                f"{limit - 32} tokens), or pass on_overflow='truncate'"
            ),
        )
        if over:
            log.warning(
                "%d of %d text(s) are longer than %s's maximum of %d tokens and were truncated (first: text %d); "
                "use smaller chunks to embed all of each text",
                len(over),
                len(items),
                name,
                limit,
                over[0],
            )
        out: list[np.ndarray | None] = [None] * len(items)
        run = self.run_batches(encodings, batch_size, progress)
        for batch, pooled in run:
            for row, i in enumerate(batch.indices):
                out[i] = pooled[row]
        vectors = np.stack([v for v in out if v is not None])
        for layer in self.package.dense:
            vectors = layer(vectors)
        if dimensions is not None:
            vectors = vectors[:, :dimensions]
        if normalize if normalize is not None else self.package.normalize:
            vectors = l2_normalize(vectors)
        as_lists: list[list[float]] = vectors.astype(np.float32).tolist()
        where, input_shapes = self.where(run)
        return EmbeddingResult(
            vectors=as_lists,
            tokens=run.lengths,
            truncated=over,
            padding=run.padding,
            shapes=run.shapes,
            where=where,
            input_shapes=input_shapes,
        )

    def check_dimensions(self, dimensions: int | None) -> None:
        """Refuse a ``dimensions`` the model was not trained to be cut to (None, or its full size, always pass).

        Raises:
            InvalidRequestError: the model was not trained for Matryoshka truncation, or not at
                that size; the message names the sizes it was trained for.
        """
        pkg = self.package
        if dimensions is None:
            return
        if not isinstance(dimensions, int) or isinstance(dimensions, bool) or dimensions < 1:
            raise InvalidRequestError(f"dimensions is {dimensions!r}; pass a positive number of dimensions, or None")
        if dimensions == pkg.dims:
            return
        if not pkg.matryoshka_dims:
            raise InvalidRequestError(
                f"dimensions={dimensions}, but {pkg.name} was not trained for Matryoshka truncation (its model card "
                f"names no matryoshka_dims, and it is not a known Matryoshka model): its first {dimensions} values "
                f"are not an embedding of their own. Leave dimensions out for its {pkg.dims}-dimension vectors, or use "
                "a model trained for it (EmbeddingGemma: 768, 512, 256, 128)"
            )
        if dimensions not in pkg.matryoshka_dims:
            raise InvalidRequestError(
                f"dimensions={dimensions} is not a size {pkg.name} was trained for: {list(pkg.matryoshka_dims)} "
                f"({pkg.matryoshka_source}); pass one of them"
            )

    @staticmethod
    def _check_texts(texts: Sequence[str], *, blank: Literal["embed", "error"] = "embed") -> list[str]:
        """The texts to embed: each a string without a lone surrogate; a blank one as the empty text."""
        if isinstance(texts, str):
            raise InvalidRequestError(
                f"texts is one string ({texts[:40]!r}...); pass a list of strings (embed_query takes one text)"
            )
        items = list(texts)
        for i, text in enumerate(items):
            if not isinstance(text, str):
                raise InvalidRequestError(f"text {i} is a {type(text).__name__}, not a string: pass strings only")
            check_prompt_text(text, f"text {i}")
        empty = blanks(items)
        if empty and blank == "error":
            raise InvalidRequestError(
                f"text {empty[0]} is blank ({items[empty[0]]!r}): it has nothing to embed; drop it before embedding, "
                "or pass blank='embed' to embed it as the empty text"
            )
        empty_blanks(items, noun="text", verb="embed", made="embedded as the empty text")
        return items

    def session_pooling(self) -> Pooling | None:
        """The package's pooling (sessions return pooled vectors), or None when the graph pools."""
        return None if self.package.pooled_in_graph else self.package.pooling
