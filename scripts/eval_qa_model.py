"""Held-out evaluation of tiny-qa-llama THROUGH THE PLUGIN (exact match, greedy).

Every example uses names from the held-out side of the name split in ``qa_synth.py`` (never
produced by the training generator) and is sent as ``ChatMessage``s to
``ryzenai_core.Engine.get(model, execution="inline")`` with
``validated_options(max_new_tokens=..., temperature=0)``; the prompt is rendered by the plugin
itself (with today's date: the model was trained with random dates). The output must equal
the answer span exactly.

Cells: 2, 4 and 8 documents with the training question wordings, and the same with reworded
questions (wordings never used in training). If the framework adapters import
(``langchain_ryzenai.ChatRyzenAI``, ``llamaindex_ryzenai.RyzenAILLM``), a smaller cell also
runs through a LangChain prompt | model chain and a LlamaIndex response synthesizer, and so
do the independent sets: the test split of ``qa_eval_independent.py`` (a second generator,
never used for training: 2/4/8 documents x training-like/new question wordings) and the
hand-written ``qa_independent.json``.

Answers are compared exactly as the plugin returns them (the model answers the bare span);
``--strip`` strips them first, for older models that answered " " + span.

    python scripts/eval_qa_model.py                       # core/models/tiny-qa-llama, 200 per cell
    python scripts/eval_qa_model.py --n 100 --model DIR --out eval.json
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))

import qa_eval_independent  # noqa: E402
import qa_synth  # noqa: E402

CELLS = [
    ("2 docs", 2, "train"),
    ("4 docs", 4, "train"),
    ("8 docs", 8, "train"),
    ("2 docs reworded", 2, "reworded"),
    ("4 docs reworded", 4, "reworded"),
    ("8 docs reworded", 8, "reworded"),
]
EVAL_SEED = 777_000_111  # far from the training seeds (train: seed * 1_000_003 + step)
INDEPENDENT_CELLS = [(n_docs, wording) for wording in ("like", "new") for n_docs in (2, 4, 8)]
_norm = str  # the answer as compared: as returned, or stripped with --strip


def examples(n_docs: int, wording: str, n: int, seed: int = EVAL_SEED):
    rng = random.Random(seed + 1000 * n_docs + (0 if wording == "train" else 500))
    out = []
    for _ in range(n):
        msgs, answers, docs = qa_synth.make_qa(rng, n_docs, split="heldout", wording=wording)
        out.append({"messages": msgs, "answer": answers[-1], "docs": docs})
    return out


def run_cell(engine, exs, max_new_tokens: int):
    from ryzenai_core.messages import ChatMessage
    from ryzenai_core.options import validated_options

    opts = validated_options(max_new_tokens=max_new_tokens, temperature=0)
    ok = 0
    by_shape: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    fails = []
    for ex in exs:
        msgs = [ChatMessage(r, c) for r, c in ex["messages"]]
        out = engine.generate(msgs, opts).text
        good = _norm(out) == ex["answer"]
        ok += good
        shape = _shape(ex["messages"])
        by_shape[shape][0] += good
        by_shape[shape][1] += 1
        if not good and len(fails) < 8:
            fails.append({"question": _question(ex["messages"]), "expected": ex["answer"], "got": out})
    return ok, dict(by_shape), fails


def _question(msgs) -> str:
    text = msgs[-1][1]
    for key in ("Query: ", "Question: "):
        if key in text:
            return text.rsplit(key, 1)[1].split("\n")[0].strip()
    return text[-120:]


def _shape(msgs) -> str:
    sys_text = msgs[0][1] if msgs[0][0] == "system" else ""
    user = msgs[-1][1]
    if "Context information is below" in user:
        return "llamaindex chat" if sys_text.startswith("You are an expert Q&A") else "llamaindex text"
    if "New Context:" in user:
        return "llamaindex refine"
    if "retrieved context" in sys_text + user:
        return "langchain tutorial"
    if user.startswith("Context: ") or "Context:\n" in sys_text:
        return "langchain system"
    return "plain"


def adapters_cell(model: Path, n: int, max_new_tokens: int) -> dict:
    """A smaller cell through the LangChain and LlamaIndex adapters, when they import."""
    res: dict = {}
    exs = examples(2, "train", n, seed=EVAL_SEED + 99)
    try:
        chain = langchain_chain(model, max_new_tokens)
        ok = 0
        fails = []
        for ex in exs:
            ctx = "\n\n".join(d.text for d in ex["docs"])
            q = _question(ex["messages"])
            out = _norm(chain.invoke({"context": ctx, "question": q}))
            ok += out == ex["answer"]
            if out != ex["answer"] and len(fails) < 5:
                fails.append({"question": q, "expected": ex["answer"], "got": out})
        res["langchain"] = {"correct": ok, "n": len(exs), "accuracy": ok / len(exs), "failures": fails}
    except Exception as exc:  # noqa: BLE001
        res["langchain"] = {"skipped": f"{type(exc).__name__}: {exc}"}
    try:
        from llama_index.core import Settings, get_response_synthesizer
        from llama_index.core.schema import NodeWithScore, TextNode

        from llamaindex_ryzenai import RyzenAILLM  # type: ignore[attr-defined]

        llm = RyzenAILLM(model=str(model), temperature=0, max_new_tokens=max_new_tokens)
        try:
            res["llamaindex_default_context_window"] = llm.metadata.context_window
        except Exception as exc:  # noqa: BLE001
            res["llamaindex_default_context_window"] = f"{type(exc).__name__}: {exc}"
        # Exact counts, set explicitly (RyzenAILLM sets them itself only when nothing else has).
        Settings.tokenizer = llm.tokenizer
        res["llamaindex_context_window_exact"] = llm.metadata.context_window
        synth = get_response_synthesizer(llm=llm, response_mode="compact")
        ok = 0
        fails = []
        for ex in exs:
            nodes = [
                NodeWithScore(node=TextNode(text=d.text, metadata={"file_path": f"/docs/{d.slug}.txt"}), score=1.0)
                for d in ex["docs"]
            ]
            q = _question(ex["messages"])
            out = _norm(str(synth.synthesize(q, nodes=nodes)))
            ok += out == ex["answer"]
            if out != ex["answer"] and len(fails) < 5:
                fails.append({"question": q, "expected": ex["answer"], "got": out})
        res["llamaindex"] = {"correct": ok, "n": len(exs), "accuracy": ok / len(exs), "failures": fails}
    except Exception as exc:  # noqa: BLE001
        res["llamaindex"] = {"skipped": f"{type(exc).__name__}: {exc}"}
    return res


INDEPENDENT = Path(__file__).parent / "qa_independent.json"
RAG_SYSTEM = (
    "Answer the question using only the context below. If the answer is not in the context, say you don't know."
)


def langchain_chain(model: Path, max_new_tokens: int, *, system: str = RAG_SYSTEM, **llm_kwargs):
    """``prompt | ChatRyzenAI | StrOutputParser()``, the LangChain RAG shape of the evaluation and the tests."""
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate

    from langchain_ryzenai import ChatRyzenAI  # type: ignore[attr-defined]

    prompt = ChatPromptTemplate.from_messages(
        [("system", system), ("human", "Context: {context}\n\nQuestion: {question}")]
    )
    llm = ChatRyzenAI(model=str(model), temperature=0, max_tokens=max_new_tokens, **llm_kwargs)
    return prompt | llm | StrOutputParser()


def summary_index_answer(llm, texts: list[str], question: str, metadata: list[dict] | None = None) -> str:
    """A LlamaIndex ``SummaryIndex`` query engine (compact) over ``texts``; its answer as compared
    (as returned, stripped with ``--strip``)."""
    from llama_index.core import Document, SummaryIndex

    docs = [Document(text=t, metadata=m) for t, m in zip(texts, metadata or [{} for _ in texts], strict=True)]
    return _norm(
        str(SummaryIndex.from_documents(docs).as_query_engine(llm=llm, response_mode="compact").query(question))
    )


def _score_faces(items: list[dict], answer: dict, max_failures: int | None = None) -> dict:
    """Exact match of each face's answers (``answer[face](item) -> text``) on ``items`` (documents,
    question, answer dicts)."""
    res: dict = {}
    for face, ask in answer.items():
        ok, fails = 0, []
        kinds = {kind: 0 for kind in ERROR_KINDS}
        for item in items:
            got = _norm(ask(item))
            ok += got == item["answer"]
            if got != item["answer"]:
                kinds[error_kind(got, item)] += 1
                if max_failures is None or len(fails) < max_failures:
                    fails.append({"question": item["question"], "expected": item["answer"], "got": got})
        res[face] = {
            "correct": ok,
            "n": len(items),
            "accuracy": round(ok / len(items), 4),
            "errors": kinds,
            "failures": fails,
        }
    return res


#: What a wrong answer is (kind: in words).
ERROR_KINDS = {
    "empty": "nothing",
    "contains_answer": "the right span with more",
    "part_of_answer": "part of the right span",
    "other_span": "other words of the documents (another fact's answer, a name from the wrong sentence)",
    "not_in_documents": "text in no document (a garbled copy)",
}


def error_kind(got: str, item: dict) -> str:
    """Which of :data:`ERROR_KINDS` a wrong answer ``got`` is."""
    want = item["answer"]
    if not got.strip():
        return "empty"
    if want in got:
        return "contains_answer"
    if got.strip() in want:
        return "part_of_answer"
    text = "\n".join(item["documents"])
    if re.search(r"(?<!\w)" + re.escape(got.strip()) + r"(?!\w)", text):
        return "other_span"
    return "not_in_documents"


def independent_set(model: Path, max_new_tokens: int, *, system: str = RAG_SYSTEM, **llm_kwargs) -> dict:
    """The hand-written set (``qa_independent.json``: its own names, sentences and wordings)
    through a LangChain RAG chain and a LlamaIndex query engine, both with default settings."""
    from llamaindex_ryzenai import RyzenAILLM  # type: ignore[attr-defined]

    items = json.loads(INDEPENDENT.read_text(encoding="utf-8"))["items"]
    chain = langchain_chain(model, max_new_tokens, system=system, **llm_kwargs)
    llm = RyzenAILLM(model=str(model), temperature=0, max_new_tokens=max_new_tokens, **llm_kwargs)
    return {
        "n": len(items),
        **_score_faces(
            items,
            {
                "langchain": lambda it: chain.invoke(
                    {"context": "\n\n".join(it["documents"]), "question": it["question"]}
                ),
                "llamaindex": lambda it: summary_index_answer(llm, it["documents"], it["question"]),
            },
        ),
    }


def generated_independent(
    model: Path,
    n: int,
    max_new_tokens: int,
    *,
    cells: list[tuple[int, str]] | None = None,
    split: str = "test",
    **llm_kwargs,
) -> list[dict]:
    """The test split (or ``split``) of the second generator (``qa_eval_independent.py``) through both
    adapters: a LangChain RAG chain and a LlamaIndex compact response synthesizer over the documents."""
    from llama_index.core import get_response_synthesizer
    from llama_index.core.schema import NodeWithScore, TextNode

    from llamaindex_ryzenai import RyzenAILLM  # type: ignore[attr-defined]

    chain = langchain_chain(model, max_new_tokens, **llm_kwargs)
    llm = RyzenAILLM(model=str(model), temperature=0, max_new_tokens=max_new_tokens, **llm_kwargs)
    synth = get_response_synthesizer(llm=llm, response_mode="compact")
    faces = {
        "langchain": lambda it: chain.invoke({"context": "\n\n".join(it["documents"]), "question": it["question"]}),
        "llamaindex": lambda it: str(
            synth.synthesize(
                it["question"], nodes=[NodeWithScore(node=TextNode(text=d), score=1.0) for d in it["documents"]]
            )
        ),
    }
    result = []
    for n_docs, wording in cells or INDEPENDENT_CELLS:
        t = time.time()
        cell: dict = {"docs": n_docs, "wording": wording, "n": n}
        cell.update(_score_faces(qa_eval_independent.items(split, n_docs, wording, n), faces, max_failures=6))
        cell["seconds"] = round(time.time() - t, 1)
        result.append(cell)
        print(
            f"independent {n_docs} docs {wording:4s}: LangChain {cell['langchain']['correct']}/{n}, "
            f"LlamaIndex {cell['llamaindex']['correct']}/{n} ({cell['seconds']} s)",
            flush=True,
        )
    return result


def main() -> None:
    global _norm
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=ROOT / "core" / "models" / "tiny-qa-llama")
    p.add_argument("--n", type=int, default=200, help="examples per cell")
    p.add_argument("--adapter-n", type=int, default=50)
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--cells", default="", help="comma-separated cell names (default: all; 'none' for none)")
    p.add_argument("--independent-n", type=int, default=100, help="questions per cell of the generated independent set")
    p.add_argument(
        "--independent-split",
        default="test",
        choices=["test", "val"],
        help="split of the generated independent set (val: for choosing a checkpoint)",
    )
    p.add_argument(
        "--strip", action="store_true", help="strip answers before comparing (models that answer ' ' + span)"
    )
    p.add_argument("--out", type=Path, default=None, help="JSON (default: MODEL/eval.json)")
    args = p.parse_args()
    if args.strip:
        _norm = str.strip

    from ryzenai_core import Engine

    engine = Engine.get(args.model, execution="inline")
    result = {
        "model": args.model.name,
        "method": "exact match, greedy (temperature=0), through ryzenai_core.Engine (inline), "
        "held-out names (qa_synth name split), plugin-rendered prompt with today's date"
        + ("; answers stripped" if args.strip else "; answers compared as returned"),
        "n_per_cell": args.n,
        "cells": [],
    }
    wanted = {c.strip() for c in args.cells.split(",") if c.strip()}
    for name, n_docs, wording in CELLS:
        if wanted and name not in wanted:
            continue
        t = time.time()
        exs = examples(n_docs, wording, args.n)
        ok, by_shape, fails = run_cell(engine, exs, args.max_new_tokens)
        cell = {
            "name": name,
            "docs": n_docs,
            "wording": wording,
            "correct": ok,
            "n": len(exs),
            "accuracy": round(ok / len(exs), 4),
            "by_prompt_shape": by_shape,
            "failures": fails,
            "seconds": round(time.time() - t, 1),
        }
        result["cells"].append(cell)
        print(f"{name:18s} {ok}/{len(exs)} = {100 * ok / len(exs):.1f}%  ({cell['seconds']} s)", flush=True)
    if args.adapter_n:
        result["adapters"] = adapters_cell(args.model, args.adapter_n, args.max_new_tokens)
        print(
            json.dumps(
                {
                    k: ({kk: vv for kk, vv in v.items() if kk != "failures"} if isinstance(v, dict) else v)
                    for k, v in result["adapters"].items()
                }
            )
        )
    if args.adapter_n:
        result["independent"] = independent_set(args.model, args.max_new_tokens)
        print("independent set:", {k: v["accuracy"] for k, v in result["independent"].items() if k != "n"})
    if args.independent_n:
        result["independent_generated"] = generated_independent(
            args.model, args.independent_n, args.max_new_tokens, split=args.independent_split
        )
        if args.independent_split != "test":
            result["independent_split"] = args.independent_split
    out = args.out or args.model / "eval.json"
    if out.exists():
        old = json.loads(out.read_text(encoding="utf-8"))
        for k in ("notes", "previous"):
            if k in old:
                result[k] = old[k]
    out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
