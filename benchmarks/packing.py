"""Bucket-aware packing vs default packing: NPU prefill padding over the same queries.

    python benchmarks/packing.py [--model PATH] [--provider cpu] [--top-k 3 5 8]
                                 [--json benchmarks/results/packing.json]

A LlamaIndex query engine (compact mode) over a bundled document set
(``benchmarks/data/packing_docs.json``: the docstrings of ``ryzenai_core``, frozen), retrieved
with a deterministic hashed bag-of-words embedding, answers the same questions twice per k:

- default: the top k chunks, as LlamaIndex sends them;
- bucket-aware: the top 2k chunks retrieved, ``BucketPackingPostprocessor(default_top_n=k)``
  choosing which to send (fill the default's bucket, or trim a small spill to the edge below).

Every LLM call's BudgetPlan (prompt tokens, prefill bucket, padding) is read from the response
through LlamaIndex's instrumentation, so the numbers are those the engine planned for the real
prompts. ``max_new_tokens=1``: only the prefill differs between the two. The default model is the
replica of ``Qwen3-4B_rai_1.8.0_npu_4K`` (its real prefill buckets 128..4096, tiny weights) run on
the CPU; ``Settings.tokenizer`` is the package's own tokenizer (exact counts).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a source checkout without installing
    sys.path.insert(0, str(ROOT))

import llama_index.core  # noqa: E402
from llama_index.core import Document, Settings, VectorStoreIndex  # noqa: E402
from llama_index.core.base.embeddings.base import BaseEmbedding  # noqa: E402
from llama_index.core.instrumentation import get_dispatcher  # noqa: E402
from llama_index.core.instrumentation.event_handlers import BaseEventHandler  # noqa: E402
from llama_index.core.instrumentation.events.llm import LLMChatEndEvent  # noqa: E402
from llama_index.core.node_parser import SentenceSplitter  # noqa: E402

from llamaindex_ryzenai import BucketPackingPostprocessor, RyzenAILLM  # noqa: E402

DEFAULT_MODEL = ROOT / "tests" / "fixtures" / "replicas" / "Qwen3-4B_rai_1.8.0_npu_4K"
DOCS = ROOT / "benchmarks" / "data" / "packing_docs.json"
QUESTIONS = [
    "How does the engine cancel a generation when the caller stops reading?",
    "Why does generation run in a worker process?",
    "What is a prefill bucket and how is a prompt padded?",
    "How is the prompt limit chosen for a Ryzen AI release?",
    "What happens to a prompt that is over the limit?",
    "How are Qwen3 tool calls parsed from the output?",
    "How does the chat template sandbox stop a hostile template?",
    "What does bound_schema do to strings and arrays?",
    "How are stop strings held back while streaming?",
    "Which errors derive from ValueError?",
    "How does KV prefix reuse work between chat turns?",
    "What does a BudgetPlan report?",
    "How is a model found by name or Hugging Face id?",
    "What does the bench command measure?",
    "How does incremental detokenization handle split characters?",
    "What is the difference between full fusion and hybrid packages?",
    "How does a forced tool call work for Llama 3.2?",
    "What is the overflow policy drop_oldest?",
    "How are LFS pointer files detected?",
    "What does bucket-aware packing choose?",
]


class HashEmbedding(BaseEmbedding):
    """A deterministic local embedding: hashed bag of words."""

    dim: int = 256

    @classmethod
    def class_name(cls) -> str:
        return "HashEmbedding"

    def _vector(self, text: str) -> list[float]:
        v = [0.0] * self.dim
        for word in text.lower().split():
            word = word.strip(".,:;()`'\"")
            if len(word) > 3:
                v[int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dim] += 1.0
        norm = math.sqrt(sum(x * x for x in v)) or 1.0
        return [x / norm for x in v]

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vector(text)


class Plans(BaseEventHandler):
    """The BudgetPlan of every LLM call."""

    plans: list = []

    @classmethod
    def class_name(cls) -> str:
        return "Plans"

    def handle(self, event: Any, **kwargs: Any) -> None:
        if isinstance(event, LLMChatEndEvent) and event.response is not None and event.response.raw:
            self.plans.append(event.response.raw["budget"])


def summarize(plans: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "calls": len(plans),
        "prompt_tokens": sum(p["prompt_tokens"] for p in plans),
        "padding": sum(p["padding"] for p in plans),
        "prefill_tokens": sum(p["prompt_tokens"] + p["padding"] for p in plans),
        "buckets": [p["prefill_bucket"] for p in plans],
    }


def run(model: Path, provider: str | None, top_ks: list[int], chunk_size: int) -> dict[str, Any]:
    llm = RyzenAILLM(model=str(model), provider=provider, max_new_tokens=1, temperature=0)
    Settings.tokenizer = llm.tokenizer
    data = json.loads(DOCS.read_text(encoding="utf-8"))
    docs = [Document(id_=d["title"], text=d["text"], metadata={"title": d["title"]}) for d in data["documents"]]
    # deterministic node ids: retrieval ties then break the same way on every run
    splitter = SentenceSplitter(chunk_size=chunk_size, chunk_overlap=0, id_func=lambda i, doc: f"{doc.doc_id}#{i}")
    index = VectorStoreIndex.from_documents(docs, embed_model=HashEmbedding(), transformations=[splitter])
    handler = Plans(plans=[])
    get_dispatcher().add_event_handler(handler)
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    try:
        for k in top_ks:
            plain = index.as_query_engine(llm=llm, similarity_top_k=k)
            packer = BucketPackingPostprocessor(llm=llm, default_top_n=k)
            packed = index.as_query_engine(llm=llm, similarity_top_k=2 * k, node_postprocessors=[packer])
            for question in QUESTIONS:
                handler.plans.clear()
                plain.query(question)
                default = summarize(handler.plans)
                handler.plans.clear()
                packed.query(question)
                aware = summarize(handler.plans)
                report = packer.last_report or {}
                rows.append(
                    {
                        "top_k": k,
                        "question": question,
                        "strategy": report.get("strategy", "default"),
                        "partial": report.get("partial", False),
                        "default": default,
                        "bucket_aware": aware,
                    }
                )
    finally:
        get_dispatcher().event_handlers.remove(handler)
        llama_index.core.global_tokenizer = None
    budget = llm.budget
    return {
        "model": llm.engine.package.name,
        "provider": provider,
        "prefill_buckets": list(budget.prefill_buckets),
        "prompt_limit": budget.prompt_limit,
        "documents": len(docs),
        "chunks": len(index.docstore.docs),
        "chunk_size": chunk_size,
        "questions": len(QUESTIONS),
        "seconds": round(time.perf_counter() - started, 1),
        "rows": rows,
    }


def totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def s(side: str, key: str) -> int:
        return sum(r[side][key] for r in rows)

    out = {
        f"{side}_{key}": s(side, key)
        for side in ("default", "bucket_aware")
        for key in ("calls", "prompt_tokens", "padding", "prefill_tokens")
    }
    out["padding_saved"] = out["default_padding"] - out["bucket_aware_padding"]
    out["padding_saved_pct"] = round(100 * out["padding_saved"] / max(1, out["default_padding"]), 1)
    out["prefill_saved"] = out["default_prefill_tokens"] - out["bucket_aware_prefill_tokens"]
    out["prefill_saved_pct"] = round(100 * out["prefill_saved"] / max(1, out["default_prefill_tokens"]), 1)
    out["context_added"] = out["bucket_aware_prompt_tokens"] - out["default_prompt_tokens"]
    strategies = [r["strategy"] for r in rows]
    out["fill"], out["trim"], out["unchanged"] = (strategies.count(x) for x in ("fill", "trim", "default"))
    out["padding_per_call_default"] = round(out["default_padding"] / max(1, out["default_calls"]), 1)
    out["padding_per_call_bucket_aware"] = round(out["bucket_aware_padding"] / max(1, out["bucket_aware_calls"]), 1)
    out["median_bucket_default"] = statistics.median(b for r in rows for b in r["default"]["buckets"])
    out["median_bucket_bucket_aware"] = statistics.median(b for r in rows for b in r["bucket_aware"]["buckets"])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--provider", default="cpu", help="'cpu' runs a Ryzen AI replica here; 'none' = the package's")
    parser.add_argument("--top-k", type=int, nargs="+", default=[3, 5, 8])
    parser.add_argument("--chunk-size", type=int, default=192, help="chunk size in package tokens")
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "packing.json")
    args = parser.parse_args()
    provider = None if args.provider == "none" else args.provider

    result = run(args.model, provider, args.top_k, args.chunk_size)
    by_k = {k: totals([r for r in result["rows"] if r["top_k"] == k]) for k in args.top_k}
    result["by_top_k"] = by_k
    result["total"] = totals(result["rows"])

    print(f"{result['model']} (provider {provider}), prefill buckets {result['prefill_buckets']}")
    print(f"{result['questions']} questions, {result['chunks']} chunks of <= {args.chunk_size} tokens, compact mode\n")
    head = (
        f"{'top k':>6} {'calls':>11} {'prompt tokens':>15} {'padding':>13} {'saved':>7} "
        f"{'prefill tokens':>15} {'saved':>7} {'fill/trim/same':>15}"
    )
    print(head)
    print("-" * len(head))
    for label, t in [*((str(k), v) for k, v in by_k.items()), ("all", result["total"])]:
        print(
            f"{label:>6} {t['default_calls']:>5}/{t['bucket_aware_calls']:<5} "
            f"{t['default_prompt_tokens']:>7}/{t['bucket_aware_prompt_tokens']:<7} "
            f"{t['default_padding']:>6}/{t['bucket_aware_padding']:<6} {t['padding_saved_pct']:>6}% "
            f"{t['default_prefill_tokens']:>7}/{t['bucket_aware_prefill_tokens']:<7} {t['prefill_saved_pct']:>6}% "
            f"{t['fill']:>5}/{t['trim']}/{t['unchanged']}"
        )
    print("\n(default/bucket-aware; padding = pad tokens the NPU prefills; prefill tokens = prompt + padding)")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.json.relative_to(ROOT) if args.json.is_relative_to(ROOT) else args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
