"""BucketPackingPostprocessor: retrieved context that ends at a prefill bucket edge.

Data flow::

    retrieved nodes (ranked) + query
      -> exact token counts with the package's tokenizer: the QA prompt without context (base),
         each node's LLM text (+ the blank line that joins it to the next)
      -> ryzenai_core.package.packing.pack_context: default packing vs bucket-aware packing
      -> check the real prompt (rendered with the chosen context, counted exactly) stays within
         the limit and the chosen bucket, and that LlamaIndex's PromptHelper (counting with
         Settings.tokenizer) will not split it; tighten and repack if not
      -> the chosen nodes (copies; a cut node keeps the first part of its LLM text), each with
         the report in metadata["ryzenai_packing"] (hidden from the LLM and the embedder)

Use it in a query engine: ``index.as_query_engine(similarity_top_k=8,
node_postprocessors=[BucketPackingPostprocessor(llm=llm, default_top_n=4)])``: the retriever
fetches a reserve, default packing would send the top 4, and the packer sends what fills the
bucket the prompt lands in, or trims a few tokens to land on the edge below.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from functools import partial
from typing import Any

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.indices.prompt_helper import PromptHelper
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.prompts import BasePromptTemplate, SelectorPromptTemplate
from llama_index.core.prompts.default_prompt_selectors import (
    DEFAULT_REFINE_PROMPT_SEL,
    DEFAULT_TEXT_QA_PROMPT_SEL,
)
from llama_index.core.prompts.prompt_utils import get_biggest_prompt
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle
from llama_index.core.settings import Settings

from ryzenai_core.package.packing import PackedPrompt, PackingPlan, pack_context, packing_limit, padded_length

from .llms import RyzenAILLM

try:  # the padding compact/refine keep free when they repack chunks (500 in llama-index-core 0.14)
    from llama_index.core.response_synthesizers.refine import DEFAULT_RESPONSE_PADDING_SIZE
except ImportError:  # pragma: no cover - older llama-index-core
    DEFAULT_RESPONSE_PADDING_SIZE = 5

__all__ = ["BucketPackingPostprocessor", "REPORT_KEY"]

#: Node metadata key of the packing report (excluded from LLM and embedding text).
REPORT_KEY = "ryzenai_packing"
_SEPARATOR = "\n\n"  # how LlamaIndex's synthesizers join node texts
logger = logging.getLogger(__name__)
_ATTEMPTS = 6


class BucketPackingPostprocessor(BaseNodePostprocessor):
    """Choose the retrieved nodes so the final prompt lands on a prefill bucket edge.

    Default packing sends the top ``default_top_n`` nodes (all when None), wherever their
    lengths land. This postprocessor *fills* the bucket that prompt pads up to with more nodes
    (or the first part of one), or *trims* a prompt that spills a few tokens into a larger
    bucket back to the edge below, losing at most ``max_context_loss`` of the context. Its
    padding and its bucket are never larger than default packing's, and the prompt never
    exceeds the package's prompt limit (leaving room for the output).

    Token counts are exact (the package's template and tokenizer); to keep LlamaIndex from
    splitting the packed context, the packer also respects what PromptHelper accepts with the
    current ``Settings.tokenizer`` (set ``Settings.tokenizer = llm.tokenizer`` so both agree).
    The last plan is kept in :attr:`last_plan` and in every returned node's
    ``metadata["ryzenai_packing"]``. On a package without prefill buckets (plain ONNX) there
    is no edge to pack to: the top ``default_top_n`` nodes go as they are, within the prompt
    limit, and the report says so (``strategy: "no_buckets"``; logged once).
    """

    llm: RyzenAILLM = Field(description="The RyzenAILLM the query engine uses.", exclude=True)
    text_qa_template: BasePromptTemplate | None = Field(
        None, description="The QA prompt of the synthesizer (default: LlamaIndex's, selected for the LLM)."
    )
    refine_template: BasePromptTemplate | None = Field(
        None, description="The refine prompt of the synthesizer (default: LlamaIndex's)."
    )
    default_top_n: int | None = Field(
        None, ge=0, description="Nodes default packing sends; the rest are a reserve for filling. None: all."
    )
    max_context_loss: float = Field(
        0.1, ge=0.0, le=1.0, description="Fraction of the default's context a trim may drop to reach a smaller bucket."
    )
    allow_partial: bool = Field(True, description="Cut one node short to land exactly on a bucket edge.")
    min_partial_tokens: int = Field(32, ge=1, description="Never keep less than this of a cut node.")
    max_new_tokens: int | None = Field(None, ge=1, description="Output room to keep (default: the LLM's num_output).")
    response_padding_size: int = Field(
        DEFAULT_RESPONSE_PADDING_SIZE,
        ge=0,
        description="The synthesizer's response_padding_size (Settings.tokenizer tokens it keeps free when repacking).",
    )

    _last_plan: PackingPlan | None = PrivateAttr(default=None)
    _last_report: dict[str, Any] | None = PrivateAttr(default=None)
    _told_no_buckets: bool = PrivateAttr(default=False)

    @classmethod
    def class_name(cls) -> str:
        """The LlamaIndex component name."""
        return "BucketPackingPostprocessor"

    @property
    def last_plan(self) -> PackingPlan | None:
        """The plan of the last call (shared by concurrent calls: read it right after yours)."""
        return self._last_plan

    @property
    def last_report(self) -> dict[str, Any] | None:
        """The report of the last call, as put in the nodes' ``metadata["ryzenai_packing"]``."""
        return self._last_report

    def _templates(self, query: str) -> tuple[BasePromptTemplate, BasePromptTemplate]:
        qa = self.text_qa_template or DEFAULT_TEXT_QA_PROMPT_SEL
        refine = self.refine_template or DEFAULT_REFINE_PROMPT_SEL
        if isinstance(qa, SelectorPromptTemplate):
            qa = qa.select(llm=self.llm)
        if isinstance(refine, SelectorPromptTemplate):
            refine = refine.select(llm=self.llm)
        return qa.partial_format(query_str=query), refine.partial_format(query_str=query)

    def _prompt_tokens(self, qa: BasePromptTemplate, context: str) -> int:
        return self.llm.count_tokens(self.llm._get_messages(qa, context_str=context))

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if not nodes:
            return nodes
        llm = self.llm
        budget = llm.budget
        query = query_bundle.query_str if query_bundle is not None else ""
        if not budget.prefill_buckets:
            return self._without_buckets(nodes, query)
        qa, refine = self._templates(query)
        texts = [n.node.get_content(metadata_mode=MetadataMode.LLM).strip() for n in nodes]
        tokenizer = llm.tokenizer
        separator = len(tokenizer(_SEPARATOR))
        counts = [len(tokenizer(t)) + separator for t in texts]
        base = self._prompt_tokens(qa, "")
        num_output = self.max_new_tokens or llm.metadata.num_output
        helper_room = _prompt_helper_room(llm, get_biggest_prompt([qa, refine]), self.response_padding_size)

        cap = packing_limit(budget, num_output)

        def measure(packed: PackedPrompt) -> _Outcome:
            chosen = _chosen_texts(packed, texts, tokenizer, separator)
            context = _SEPARATOR.join(t for _, t in chosen)
            real = self._prompt_tokens(qa, context)
            return _Outcome(chosen, real, len(Settings.tokenizer(context)), budget.plan(min(real, cap), 1).padding)

        def fits(outcome: _Outcome, plan: PackingPlan) -> bool:
            return (
                outcome.real <= plan.limit
                and padded_length(budget, outcome.real) <= plan.packed.padded_tokens
                and outcome.counted <= helper_room
            )

        pack = partial(
            pack_context,
            default_count=self.default_top_n,
            max_new_tokens=num_output,
            max_context_loss=self.max_context_loss,
            allow_partial=self.allow_partial,
            min_partial_tokens=self.min_partial_tokens,
        )
        first = pack(budget, base, counts)
        default = measure(first.default)
        best: tuple[PackingPlan, _Outcome] | None = None
        limit: int | None = None
        shift = 0  # how much the counts overestimate the real prompt (separators, cut text)
        for _ in range(_ATTEMPTS):
            plan = first if limit is None and shift == 0 else pack(budget, base - shift, counts, limit=limit)
            outcome = measure(plan.packed)
            if fits(outcome, plan):
                if best is None or outcome.padding < best[1].padding:
                    best = (plan, outcome)
                over = plan.packed.prompt_tokens - outcome.real
                if over <= 0 or shift:
                    break
                shift = min(over, base - 1)  # plan once more with the measured overestimate
                continue
            if best is not None:
                break  # the finer plan overshot: keep the one that fit
            # Tighten: the real prompt came out longer than planned, or PromptHelper would split it.
            tighter = plan.packed.prompt_tokens - max(1, outcome.real - plan.packed.prompt_tokens)
            if outcome.counted > helper_room and outcome.counted > 0:
                context_real = max(0, outcome.real - base)
                tighter = min(tighter, base + math.floor(context_real * helper_room / outcome.counted) - 1)
            limit = max(base, min(tighter, plan.limit - 1))

        default_fits = default.real <= cap and default.counted <= helper_room
        if best is None or (
            default_fits
            and (
                padded_length(budget, best[1].real) > padded_length(budget, default.real)
                or best[1].padding > default.padding
            )
        ):
            self._last_plan = self._last_report = None
            return nodes[: self.default_top_n] if self.default_top_n is not None else nodes

        plan, outcome = best
        final = budget.plan(outcome.real, 1)
        report = {
            "strategy": plan.strategy,
            "target": plan.target,
            "limit": cap,
            "prompt_tokens": outcome.real,
            "prefill_bucket": final.prefill_bucket,
            "padding": final.padding,
            "default_prompt_tokens": default.real,
            "default_prefill_bucket": budget.plan(min(default.real, cap), 1).prefill_bucket,
            "default_padding": default.padding,
            "padding_saved": default.padding - final.padding,
            "context_added": outcome.real - default.real,
            "nodes": len(outcome.chosen),
            "default_nodes": len(first.default.selected),
            "partial": plan.packed.partial is not None,
        }
        self._last_plan = plan
        self._last_report = report
        out = []
        for index, text in outcome.chosen:
            original = nodes[index]
            node = _with_report(original.node, report, text, index == plan.packed.partial)
            out.append(NodeWithScore(node=node, score=original.score))
        return out

    def _without_buckets(self, nodes: list[NodeWithScore], query: str) -> list[NodeWithScore]:
        """Default packing, reported: a package without prefill buckets has no edge to land on."""
        llm = self.llm
        chosen = nodes[: self.default_top_n] if self.default_top_n is not None else nodes
        qa, _ = self._templates(query)
        texts = [n.node.get_content(metadata_mode=MetadataMode.LLM).strip() for n in chosen]
        prompt = self._prompt_tokens(qa, _SEPARATOR.join(texts))
        cap = packing_limit(llm.budget, self.max_new_tokens or llm.metadata.num_output)
        report = {
            "strategy": "no_buckets",
            "target": None,
            "limit": cap,
            "prompt_tokens": prompt,
            "prefill_bucket": None,
            "padding": 0,
            "default_prompt_tokens": prompt,
            "default_prefill_bucket": None,
            "default_padding": 0,
            "padding_saved": 0,
            "context_added": 0,
            "nodes": len(chosen),
            "default_nodes": len(chosen),
            "partial": False,
        }
        if not self._told_no_buckets:
            self._told_no_buckets = True
            logger.info(
                "%s has no prefill buckets (a plain ONNX package pads nothing): BucketPackingPostprocessor sends "
                "the top %s nodes as they are (%d prompt tokens of a limit of %d)",
                llm.metadata.model_name,
                self.default_top_n if self.default_top_n is not None else "all",
                prompt,
                cap,
            )
        self._last_plan = None
        self._last_report = report
        return [
            NodeWithScore(node=_with_report(n.node, report, t, False), score=n.score)
            for n, t in zip(chosen, texts, strict=True)
        ]


@dataclass
class _Outcome:
    """A packing as the synthesizer will send it: chosen texts, real prompt tokens, counts."""

    chosen: list[tuple[int, str]]
    real: int
    counted: int
    padding: int


def _prompt_helper_room(llm: RyzenAILLM, prompt: BasePromptTemplate, padding: int) -> int:
    """Context tokens (``Settings.tokenizer``) PromptHelper fits in one call with ``prompt``."""
    helper = PromptHelper.from_llm_metadata(llm.metadata)
    try:
        return helper.get_text_splitter_given_prompt(prompt, 1, padding=padding, llm=llm).chunk_size
    except ValueError:
        return 0


def _chosen_texts(packed: PackedPrompt, texts: list[str], tokenizer: Any, separator: int) -> list[tuple[int, str]]:
    """(index, LLM text) of the chosen nodes in rank order, the partial one cut to its tokens."""
    chosen = {i: texts[i] for i in packed.selected}
    if packed.partial is not None:
        keep = max(0, packed.partial_tokens - separator)
        ids = tokenizer(texts[packed.partial])[:keep]
        cut = tokenizer.decode(ids).strip() if ids else ""
        if cut:
            chosen[packed.partial] = cut
    return sorted(chosen.items())


def _with_report(node: Any, report: dict[str, Any], text: str, cut: bool) -> Any:
    """A copy of ``node`` carrying the report; a cut node's text is its cut LLM text."""
    metadata = {**node.metadata, REPORT_KEY: report}
    excluded_llm = [*node.excluded_llm_metadata_keys, REPORT_KEY]
    excluded_embed = [*node.excluded_embed_metadata_keys, REPORT_KEY]
    update: dict[str, Any] = {
        "metadata": metadata,
        "excluded_llm_metadata_keys": excluded_llm,
        "excluded_embed_metadata_keys": excluded_embed,
    }
    if cut:
        # The text already holds the metadata header the LLM would have seen: hide the keys.
        update["excluded_llm_metadata_keys"] = list(metadata)
    copy = node.model_copy(update=update)
    if cut:
        copy.set_content(text)
    return copy
