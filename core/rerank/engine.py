"""Reranking: a query and passages in, relevance scores out (:class:`RerankEngine`).

:class:`RerankEngine` runs a cross-encoder folder
(:class:`~ryzenai_core.rerank.package.RerankPackage`) on the embedding engine's machinery
(:class:`~ryzenai_core.embeddings.engine.EncoderEngine`: providers, shapes, sessions in this
process or a worker each, idle sessions closed)::

    query, passages
      -> pairs encoded as the model's tokenizer pairs them: [CLS] q [SEP] p [SEP]
         (token_type_ids 0 then 1) or <s> q </s></s> p </s>; a pair over the maximum length
         loses the end of its passage, never the query (reported, or refused on request)
      -> sorted by length, batched: dynamic on the CPU; on the NPU padded to pair-length
         buckets (256, 512), a static shape each (padding is masked: it changes no score)
      -> logits (pairs, 1) -> scores as sentence-transformers' CrossEncoder.predict gives them
         for a one-logit model: the sigmoid (or the logit, when config.json names Identity)

:class:`RerankSettings` is what the framework faces take. onnxruntime and tokenizers come with
the ``embeddings`` extra.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field

from ..embeddings.embedding import empty_blanks, is_blank
from ..embeddings.engine import EncoderEngine
from ..embeddings.settings import EncoderSettings
from ..errors import InvalidRequestError, UnsupportedModelError
from ..messages import check_prompt_text
from .package import Activation, RerankPackage

__all__ = ["DEFAULT_RERANK_BUCKETS", "RerankEngine", "RerankResult", "RerankSettings"]

log = logging.getLogger("ryzenai_core")

#: Pair-length buckets for static shapes: a question (a few dozen tokens) with a chunk of text (a
#: RAG chunk of ~1,000 characters makes a pair of ~250 tokens); two NPU compiles, once.
DEFAULT_RERANK_BUCKETS: tuple[int, ...] = (256, 512)


@dataclass(frozen=True)
class RerankResult:
    """Scores of the passages against the query, and what they cost.

    Attributes:
        scores: one score per passage, in the order given (sigmoid of the logit, or the logit).
        logits: the model's logit of each pair.
        tokens: tokens of each pair as run (after truncation, special tokens included).
        truncated: indices of passages cut to fit the maximum length (the query is kept whole).
        padding: pad tokens added over all runs (filler rows included).
        shapes: the (rows, sequence) shape of each run, in order.
        where: where each session shape of the call ran (as
            :attr:`~ryzenai_core.embeddings.embedding.EmbeddingResult.where`).
        input_shapes: the session shape label that scored each passage.
    """

    scores: list[float]
    logits: list[float]
    tokens: list[int]
    truncated: list[int]
    padding: int
    shapes: list[tuple[int, int]]
    where: dict[str, dict[str, Any]] = field(default_factory=dict)
    input_shapes: list[str] = field(default_factory=list)

    def placement_of(self, index: int) -> dict[str, Any]:
        """Where passage ``index`` was scored: its session shape, ``ran_on`` and the NPU's share of operators."""
        shape = self.input_shapes[index]
        where = self.where.get(shape, {})
        return {"shape": shape, "ran_on": where.get("ran_on"), "npu_share": where.get("npu_share")}

    @property
    def ranking(self) -> list[int]:
        """Passage indices, best first (equal scores keep their order)."""
        return sorted(range(len(self.scores)), key=lambda i: (-self.scores[i], i))

    def top(self, n: int | None) -> list[int]:
        """The ``n`` best passages' indices, best first (all when None)."""
        return self.ranking if n is None else self.ranking[:n]

    @property
    def padded_tokens(self) -> int:
        """Tokens the model ran: real plus padding."""
        return sum(self.tokens) + self.padding


class RerankEngine(EncoderEngine[RerankPackage]):
    """Runs one cross-encoder folder: a query and passages in, relevance scores out.

    Sessions, shapes, providers and workers are :class:`~ryzenai_core.embeddings.engine.EncoderEngine`'s
    (its arguments); static shapes of a dynamic graph default to :data:`DEFAULT_RERANK_BUCKETS`.
    Share one engine per folder and settings with :meth:`get`.
    """

    package_type = RerankPackage
    missing_hint = (
        "reranker folder {model!r} does not exist; pass a cross-encoder folder as Hugging Face ships them "
        "(config.json, tokenizer.json, onnx/model.onnx), or a Hugging Face repository id like "
        "'cross-encoder/ms-marco-MiniLM-L6-v2' (downloaded on first use)"
    )
    package_options = ("onnx_file", "activation")
    default_buckets = DEFAULT_RERANK_BUCKETS
    cache_name = "rerank"
    truncation = "only_second"
    on_cpu = "reranking runs on the CPU"

    def describe(self) -> dict[str, Any]:
        """The package's description, how this engine runs it, and how the tokenizer pairs texts."""
        out = super().describe()
        out["pair_template"] = self.pair_template()
        return out

    def pair_template(self) -> str:
        """How the tokenizer joins a query and a passage (``[CLS] query [SEP] passage [SEP]``)."""
        enc = self.tokenizer.encode("query", "passage")
        parts: list[str] = []
        for token, seq in zip(enc.tokens, enc.sequence_ids, strict=True):
            part = token if seq is None else ("query", "passage")[seq]
            if not parts or part != parts[-1] or seq is None:
                parts.append(part)
        return " ".join(parts)

    def rerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        batch_size: int = 32,
        on_overflow: Literal["truncate", "error"] = "truncate",
        progress: Callable[[int], None] | None = None,
    ) -> RerankResult:
        """Score each passage against ``query``.

        No passages give an empty result (a retriever may have found none).

        A blank text (:func:`~ryzenai_core.embeddings.embedding.is_blank`: empty, whitespace, or only
        invisible characters) is the empty text, with a warning naming it, as in embeddings: a
        blank passage is scored as the empty passage (every blank passage gets one score), and a
        blank query (an agent's empty search) scores the passages against the empty query, so the
        pipeline goes on (the order then says little).

        Args:
            query: the question.
            documents: the passages.
            batch_size: pairs per run with dynamic shapes (static runs hold the graph's rows).
            on_overflow: ``"truncate"`` cuts the end of a passage whose pair is over the maximum
                length (logged, and listed in :attr:`RerankResult.truncated`); ``"error"`` raises.
            progress: called with the number of pairs done after each run.

        Raises:
            InvalidRequestError: a query that is not a string, or so long that it leaves no room
                for a passage; a passage that is not a string; a lone surrogate in either; a
                pair over the maximum length with ``on_overflow="error"``; a bad option.
            UnsupportedModelError: the graph's output is not one logit per pair.
            WorkerDiedError: the worker process died during the call; the next call starts a new one.
        """
        import numpy as np

        query, items = self._check(query, documents)
        self.check_call(on_overflow, batch_size)
        if not items:
            return RerankResult(scores=[], logits=[], tokens=[], truncated=[], padding=0, shapes=[])
        pkg = self.package
        limit = pkg.max_length
        room = limit - self.tokenizer.num_special_tokens_to_add(True)
        query_tokens = len(self.tokenizer.encode(query, add_special_tokens=False).ids)
        if query_tokens >= room:
            raise InvalidRequestError(
                f"the query is {query_tokens} tokens; with a pair's special tokens it leaves no room for a passage "
                f"within {pkg.name}'s maximum of {limit} ({pkg.max_length_source}). Shorten the query: rerankers "
                "are trained on questions of a few dozen tokens"
            )
        encodings, over = self.encode_within_limit(
            [(query, d) for d in items],
            on_overflow,
            lambda i, n, count: (
                f"document {i} makes a pair of {n} tokens with the query, over {pkg.name}'s maximum of {limit} "
                f"({pkg.max_length_source}); {count} pair(s) are too long. Split the documents into smaller chunks "
                f"(under {room - query_tokens} tokens beside this query), or pass on_overflow='truncate' to score "
                "the start of each"
            ),
        )
        if over:
            log.warning(
                "%d of %d document(s) do not fit %s's maximum of %d tokens beside the query and were cut to their "
                "first tokens (first: document %d); the query was kept whole. Use smaller chunks to rerank all of "
                "each document",
                len(over),
                len(items),
                pkg.name,
                limit,
                over[0],
            )
        logits = np.zeros(len(items), dtype=np.float32)
        run = self.run_batches(encodings, batch_size, progress)
        for batch, out in run:
            if out.ndim != 2 or out.shape[1] != 1:
                raise UnsupportedModelError(
                    f"{pkg.onnx_file.name}'s {pkg.output} has shape {list(out.shape)} for a batch of {batch.rows} "
                    "pairs; a reranker needs one relevance logit per pair (batch, 1)",
                    path=pkg.onnx_file,
                )
            logits[list(batch.indices)] = out[: len(batch.indices), 0]
        scores = 1.0 / (1.0 + np.exp(-logits)) if pkg.activation == "sigmoid" else logits
        where, input_shapes = self.where(run)
        return RerankResult(
            scores=scores.astype(np.float32).tolist(),
            logits=logits.tolist(),
            tokens=run.lengths,
            truncated=over,
            padding=run.padding,
            shapes=run.shapes,
            where=where,
            input_shapes=input_shapes,
        )

    @staticmethod
    def _check(query: str, documents: Sequence[str]) -> tuple[str, list[str]]:
        """The query and passages to score: strings without lone surrogates; blank ones as the empty text."""
        if not isinstance(query, str):
            raise InvalidRequestError(f"the query is a {type(query).__name__}, not a string: pass the question's text")
        check_prompt_text(query, "the query")
        if isinstance(documents, str):
            raise InvalidRequestError(
                f"documents is one string ({documents[:40]!r}...); pass a list of strings (one per passage)"
            )
        items = list(documents)
        for i, text in enumerate(items):
            if not isinstance(text, str):
                raise InvalidRequestError(f"document {i} is a {type(text).__name__}, not a string: pass strings only")
            check_prompt_text(text, f"document {i}")
        if is_blank(query) and items:
            log.warning(
                "the query is blank (%r): the documents were scored against the empty query, so their order says "
                "little; send the question",
                query,
            )
            query = ""
        empty_blanks(items, noun="document", verb="rank", made="scored as the empty passage")
        return query, items


class RerankSettings(EncoderSettings):
    """What both framework faces take to choose and run a reranker (a pydantic mixin)."""

    engine_class = RerankEngine

    model: str = Field(description="cross-encoder folder, or Hugging Face repository id")
    top_n: int | None = Field(default=3, ge=1)
    """How many documents to return, best first (None: all of them, reordered)."""
    batch_size: int = Field(default=32, ge=1)
    """Pairs per run with dynamic shapes."""
    activation: Activation | None = None
    """How a logit becomes a score (default: as config.json says; a sigmoid, as CrossEncoder.predict)."""
    on_overflow: Literal["truncate", "error"] = "truncate"
    """A pair over the maximum length: ``truncate`` its passage (logged, listed in the result) or ``error``."""

    @property
    def engine(self) -> RerankEngine:
        """The core engine (package facts: ``engine.describe()``)."""
        if self._engine is None:  # pragma: no cover - model_post_init opened it
            self._engine = self.open_engine()
        engine: RerankEngine = self._engine
        return engine

    def engine_settings(self) -> dict[str, Any]:
        """The engine's settings, the activation override among them."""
        return {**super().engine_settings(), "activation": self.activation}

    def rerank_with_settings(self, query: str, documents: Sequence[str]) -> RerankResult:
        """:meth:`RerankEngine.rerank` with these settings' batch size and overflow policy."""
        return self.engine.rerank(query, documents, batch_size=self.batch_size, on_overflow=self.on_overflow)
