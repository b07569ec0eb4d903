"""``ryzenai-llm demo``: RAG on the embedded default model, through both frameworks.

Shows what the package is (mode, limits, bucket table), then answers a question over a
small bundled document set twice, streaming: with a LangChain chain (BM25 retriever |
prompt | ChatRyzenAI | parser) and with a LlamaIndex query engine on RyzenAILLM. With
``--embed-model`` retrieval is a vector search through RyzenAIEmbeddings / RyzenAIEmbedding; with
``--rerank-model`` it fetches every document and RyzenAIRerank (a LangChain document compressor,
a LlamaIndex node postprocessor) keeps the best two: retrieve wide, rerank, generate, the
three-model pipeline. After each answer: prompt tokens, prefill bucket and padding, time to first
token, tokens/s, and each stage's time.

This is an application of the library: its two pipelines (:mod:`ryzenai_cli.demo_langchain`,
:mod:`ryzenai_cli.demo_llamaindex`) import the two adapters (lazily, here only), while the engine
itself imports neither framework.
"""

from __future__ import annotations

import argparse
import importlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ryzenai_core.errors import RyzenAIError

__all__ = ["DEMO_DOCS", "Budget", "add_parser", "load_documents"]

DEMO_DOCS = Path(__file__).resolve().parent / "demo_docs"
_STAGES = (("retrieve", "retrieve"), ("rerank", "rerank"), ("first_token", "first token"), ("generate", "generate"))


@dataclass
class Budget:
    """What one answer cost, whichever framework produced it."""

    prompt_tokens: int | None
    completion_tokens: int | None
    prefill_bucket: int | None
    padding: int | None
    ttft_s: float | None
    tokens_per_s: float | None
    wall_s: float

    @classmethod
    def from_parts(
        cls, usage: dict[str, Any], plan: dict[str, Any] | None, timings: dict[str, Any] | None, wall: float
    ) -> Budget:
        """From framework-neutral dicts: usage counts, the budget plan and the timings."""
        plan, timings = plan or {}, timings or {}
        return cls(
            prompt_tokens=usage.get("prompt_tokens", usage.get("input_tokens")),
            completion_tokens=usage.get("completion_tokens", usage.get("output_tokens")),
            prefill_bucket=plan.get("prefill_bucket"),
            padding=plan.get("padding"),
            ttft_s=timings.get("time_to_first_token"),
            tokens_per_s=timings.get("decode_tokens_per_second"),
            wall_s=wall,
        )

    @staticmethod
    def stages(seconds: dict[str, float]) -> str:
        """Each stage's time on one line (``retrieve 3 ms, rerank 41 ms, first token 12 ms, generate 90 ms``)."""
        return ", ".join(f"{label} {seconds[key] * 1000:.0f} ms" for key, label in _STAGES if key in seconds)

    def line(self) -> str:
        """One line for the terminal."""
        bucket = (
            f"prefill bucket {self.prefill_bucket} (+{self.padding} padding)"
            if self.prefill_bucket is not None
            else "no prefill buckets (plain ONNX on this machine)"
        )
        ttft = f"{self.ttft_s * 1000:.0f} ms" if self.ttft_s is not None else "-"
        rate = f"{self.tokens_per_s:.0f} tok/s" if self.tokens_per_s else "-"
        return (
            f"{self.prompt_tokens} prompt tokens, {bucket}, {self.completion_tokens} new tokens, "
            f"first token {ttft}, {rate}"
        )


def load_documents(folder: Path = DEMO_DOCS) -> tuple[list[str], list[dict[str, Any]]]:
    """The bundled documents and the demo questions (with their expected answers)."""
    texts = [p.read_text(encoding="utf-8").strip() for p in sorted(folder.glob("*.txt"))]
    texts = [t for t in texts if t]
    questions_file = folder / "questions.json"
    data = json.loads(questions_file.read_text(encoding="utf-8")) if questions_file.exists() else []
    questions = data.get("questions", []) if isinstance(data, dict) else data
    return texts, questions


def _docs_folder(docs: str | None) -> Path:
    """The folder ``--docs`` names, checked: it exists and holds ``.txt`` documents.

    Raises:
        RyzenAIError: the folder does not exist, is a file, or has no ``.txt`` file.
    """
    if docs is None:
        return DEMO_DOCS
    folder = Path(docs).expanduser()
    if not folder.exists():
        raise RyzenAIError(f"--docs {docs}: the folder does not exist; pass a folder of .txt documents")
    if not folder.is_dir():
        raise RyzenAIError(f"--docs {docs} is a file, not a folder; pass the folder that holds the .txt documents")
    if not any(p.read_text(encoding="utf-8", errors="replace").strip() for p in folder.glob("*.txt")):
        others = sorted(p.suffix for p in folder.iterdir() if p.is_file() and p.suffix != ".txt")
        seen = f" (it holds {', '.join(dict.fromkeys(others))} files)" if others else ""
        raise RyzenAIError(
            f"--docs {docs} has no .txt documents{seen}: the demo reads only the non-empty *.txt files of the "
            "folder (UTF-8 plain text, one document per file); save the documents as .txt"
        )
    return folder


def _adapters() -> tuple[Any, Any]:
    try:
        lc = importlib.import_module("ryzenai_cli.demo_langchain")
        li = importlib.import_module("ryzenai_cli.demo_llamaindex")
    except ImportError as exc:
        raise RyzenAIError(
            f"the demo runs both frameworks and needs them installed: pip install 'ryzenai-llm[all]' ({exc})"
        ) from exc
    return lc, li


def _demo(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.panel import Panel
    from rich.table import Table

    from ryzenai_core.engine.engine import Engine
    from ryzenai_core.models import DEFAULT_MODEL, default_model_path
    from ryzenai_core.package.hub import resolve_model

    console = Console(highlight=False)
    texts, questions = load_documents(_docs_folder(args.docs))
    path = resolve_model(args.model) if args.model else default_model_path()
    question = args.question or (questions[0]["question"] if questions else "What is a prefill bucket?")
    expected = next((q.get("answer") for q in questions if q["question"] == question), None)

    with console.status("importing LangChain and LlamaIndex"):
        lc, li = _adapters()
        from langchain_core.documents import Document

        from langchain_ryzenai import ChatRyzenAI
        from llamaindex_ryzenai import RyzenAILLM

    engine = Engine.get(path, provider=args.provider)
    pkg, budget = engine.package, engine.budget
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")  # a long package path wraps, never cut with an ellipsis
    table.add_row("package", f"{pkg.name}  [dim]{pkg.path}[/dim]")
    table.add_row("mode", pkg.mode.value + (f", decode on {pkg.token_backend}" if pkg.token_backend else ""))
    table.add_row("release", pkg.release or "unknown")
    table.add_row("window", f"{budget.window} tokens; prompt limit {budget.prompt_limit}")
    table.add_row("prefill buckets", ", ".join(map(str, budget.prefill_buckets)) or "none (plain ONNX)")
    table.add_row("decode buckets", ", ".join(map(str, budget.decode_buckets)) or "none (plain ONNX)")
    console.print(Panel(table, title="model package", expand=False))
    if path == default_model_path():
        console.print(
            f"[dim]{DEFAULT_MODEL}: a 1.3M-parameter model trained to answer by copying a span out of the "
            f"retrieved documents; it knows nothing else (model card: {path / 'README.md'}).[/dim]"
        )
    with console.status(f"loading {pkg.name} (a first load on an NPU compiles for a while)"):
        engine.load()
    retrieval = "BM25"
    lc_embeddings = li_embed = lc_rerank = li_rerank = None
    if args.embed_model:
        from langchain_ryzenai import RyzenAIEmbeddings
        from llamaindex_ryzenai import RyzenAIEmbedding

        lc_embeddings = RyzenAIEmbeddings(model=args.embed_model)
        li_embed = RyzenAIEmbedding(model=args.embed_model)
        facts = lc_embeddings.engine.describe()
        retrieval = f"{facts['name']} embeddings on {facts['provider']}"
    if args.rerank_model:
        from langchain_ryzenai import RyzenAIRerank as LangChainRerank
        from llamaindex_ryzenai import RyzenAIRerank as LlamaIndexRerank

        lc_rerank = LangChainRerank(model=args.rerank_model, top_n=2)
        li_rerank = LlamaIndexRerank(model=args.rerank_model, top_n=2)
        facts = lc_rerank.engine.describe()
        retrieval += f", all {len(texts)} reranked by {facts['name']} on {facts['provider']}"
    console.print(f"[bold]question:[/bold] {question}  [dim]({len(texts)} documents, {retrieval}, top 2)[/dim]")

    common: dict[str, Any] = {"model": str(path), "temperature": 0, "provider": args.provider}
    answers: dict[str, str] = {}

    reranked = " | RyzenAIRerank" if lc_rerank is not None else ""
    console.print(f"\n[bold cyan]LangChain[/bold cyan]  retriever{reranked} | prompt | ChatRyzenAI | parser")
    t0 = time.perf_counter()
    llm = ChatRyzenAI(max_tokens=args.max_new_tokens, **common)
    docs = [Document(page_content=t) for t in texts]
    message, lc_stages = lc.run(
        llm, docs, question, lambda s: console.out(s, end="", highlight=False), lc_embeddings, lc_rerank
    )
    console.out("")
    meta = message.response_metadata
    usage = {
        "input_tokens": (message.usage_metadata or {}).get("input_tokens"),
        "output_tokens": (message.usage_metadata or {}).get("output_tokens"),
    }
    lc_budget = Budget.from_parts(usage, meta.get("budget_plan"), meta.get("timings"), time.perf_counter() - t0)
    console.print(f"[dim]{lc_budget.line()}[/dim]")
    console.print(f"[dim]{lc_budget.stages(lc_stages)}[/dim]")
    answers["LangChain"] = str(message.content)

    reranked = ", RyzenAIRerank postprocessor" if li_rerank is not None else ""
    console.print(f"\n[bold magenta]LlamaIndex[/bold magenta]  query engine on RyzenAILLM{reranked}")
    t0 = time.perf_counter()
    li_llm = RyzenAILLM(max_new_tokens=args.max_new_tokens, **common)
    from llama_index.core import Settings

    Settings.tokenizer = li_llm.tokenizer  # exact counts: LlamaIndex packs with the package's own tokenizer
    text, last, li_stages = li.run(
        li_llm, texts, question, lambda s: console.out(s, end="", highlight=False), li_embed, li_rerank
    )
    console.out("")
    raw = (last.raw or {}) if last is not None else {}
    li_budget = Budget.from_parts(
        raw.get("usage") or {}, raw.get("budget_plan"), raw.get("timings"), time.perf_counter() - t0
    )
    console.print(f"[dim]{li_budget.line()}[/dim]")
    console.print(f"[dim]{li_budget.stages(li_stages)}[/dim]")
    answers["LlamaIndex"] = text

    if expected is not None:
        console.print()
        for name, answer in answers.items():
            ok = answer == expected
            mark = "[green]right[/green]" if ok else "[red]not the expected answer[/red]"
            console.print(f"{name}: {mark} (expected {expected!r})")
    return 0


def add_parser(sub: Any) -> None:
    """Register ``demo`` on the CLI's subparsers."""
    p = sub.add_parser("demo", help="RAG demo: LangChain and LlamaIndex on the embedded model (no network)")
    p.add_argument("--model", help="model folder or Hugging Face repo id (default: the embedded model)")
    p.add_argument("--provider", choices=["cpu", "cuda", "dml"], help="run a plain ONNX package on this provider")
    p.add_argument("--question", help="ask this instead of the bundled question")
    p.add_argument("--docs", help="a folder of .txt documents to answer from (default: the bundled set)")
    p.add_argument(
        "--embed-model",
        metavar="PATH",
        help="retrieve with this embedding model (folder or Hugging Face repo id) instead of BM25",
    )
    p.add_argument(
        "--rerank-model",
        metavar="PATH",
        help="rerank every retrieved document with this cross-encoder (folder or Hugging Face repo id), keep the top 2",
    )
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.set_defaults(func=_demo)
