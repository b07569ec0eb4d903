"""``ryzenai-llm warmup``: compile the NPU shapes of embedding models and rerankers ahead, once.

    ryzenai-llm warmup MODEL [MODEL ...] [--buckets N,N,...] [--config-file PATH] [--cache-dir DIR]
                       [--provider auto|npu|cpu] [--json]

Each MODEL is an embedding folder, a cross-encoder folder or a Hugging Face repository id. On
the NPU each static shape's first session compiles it (minutes a shape); warmup compiles every
shape that is not compiled yet, one after another, with a progress bar, and says where each runs
(the VitisAI pass summary). A second run does nothing. The settings that key the compile cache
(``--buckets``, ``--config-file``, ``--cache-dir``) must be the application's. An LLM package
ships compiled: nothing to do. Exit code 0, or 1 when a shape failed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ryzenai_core.errors import RyzenAIError

__all__ = ["add_parser"]

_ACTIONS = {
    "compiled": "compiled in {s}",
    "opened": "session opened in {s}",
    "skipped": "already {before}",
    "failed": "failed after {s}: {error}",
}


def _buckets(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of token counts such as 128,256,512") from None
    if not values or any(v < 2 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: give bucket lengths of at least 2 tokens, such as 128,256,512")
    return values


def _engine(model: str, args: argparse.Namespace) -> tuple[str, Any]:
    """The model's kind and an engine of it with the given settings (None for an LLM package)."""
    from ryzenai_core.embeddings.embedding import EmbeddingEngine
    from ryzenai_core.embeddings.layout import describe_layout, is_encoder_in_genai_layout
    from ryzenai_core.embeddings.package import is_embedding_folder
    from ryzenai_core.errors import UnsupportedModelError
    from ryzenai_core.package.hub import resolve_model
    from ryzenai_core.rerank.engine import RerankEngine
    from ryzenai_core.rerank.package import is_rerank_folder

    path = resolve_model(model)
    settings: dict[str, Any] = {"provider": args.provider, "idle_timeout": None, "max_shapes": 1}
    if args.buckets:
        settings["buckets"] = args.buckets
    if args.config_file:
        settings["provider_options"] = {"config_file": str(args.config_file)}
    if args.cache_dir:
        settings["cache_dir"] = args.cache_dir
    if is_rerank_folder(path):
        return "reranker", RerankEngine(path, **settings)
    if is_embedding_folder(path):
        return "embedding model", EmbeddingEngine(path, **settings)
    if (path / "genai_config.json").is_file() and not is_encoder_in_genai_layout(path):
        return "LLM package", None
    layout = describe_layout(path)
    raise UnsupportedModelError(
        f"{path} is {layout.looks_like}; missing: {'; '.join(layout.missing) or 'nothing'}. {layout.hint}", path=path
    )


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 100 else f"{value / 60:.1f} min"


def _warmup(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from ryzenai_core.embeddings.warmup import WarmStep, warm_shapes, warm_up

    console = Console(stderr=True, soft_wrap=True)
    report: list[dict[str, Any]] = []  # one entry per model, in the order given
    engines: list[tuple[dict[str, Any], str, Any]] = []
    failed = False
    for model in args.models:
        entry: dict[str, Any] = {"model": model}
        report.append(entry)
        try:
            kind, engine = _engine(model, args)
        except RyzenAIError as exc:
            entry["error"] = str(exc)
            console.print(f"{model}: {exc}", markup=False)
            failed = True
            continue
        entry.update({"kind": kind, "shapes": []})
        if engine is None:
            console.print(
                f"{model}: an onnxruntime-genai LLM package: nothing to compile ahead (Ryzen AI packages ship "
                "compiled for the NPU)"
            )
            continue
        engines.append((entry, kind, engine))
    total = sum(len(warm_shapes(e)) for _, _, e in engines)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    bar = Progress(*columns, TimeElapsedColumn(), console=console, transient=True, disable=not console.is_terminal)
    with bar as progress:
        task = progress.add_task("warming up", total=total)
        for entry, kind, engine in engines:
            name = engine.package.name

            def starting(shape: Any, state: str, name: str = name) -> None:
                doing = "compiling" if shape is not None and state != "opened" else "opening"
                progress.update(task, description=f"{name} {_label(shape)}: {doing} (once; a compile takes minutes)")

            def done(step: WarmStep, name: str = name) -> None:
                progress.advance(task)
                text = _ACTIONS[step.action].format(s=_seconds(step.seconds), before=step.before, error=step.error)
                detail = f"; {step.placement.detail}" if step.placement else ""
                progress.console.print(f"{name} {step.label}: {text}{detail}", markup=False, highlight=False)

            console.print(f"{name} ({kind}, {_where(engine)})", markup=False, highlight=False)
            try:
                steps = warm_up(engine, starting=starting, done=done)
            finally:
                engine.close()
            failed = failed or any(s.action == "failed" for s in steps)
            entry.update({"name": name, "provider": engine.provider, "shapes": [step.describe() for step in steps]})
    if args.json:
        print(json.dumps({"models": report}, indent=2))
    else:
        work = [s for m in report for s in m.get("shapes", []) if s["action"] != "skipped"]
        shapes = sum(len(m.get("shapes", [])) for m in report)
        if shapes and not work:
            print(f"nothing to do: all {shapes} shape(s) were warm already")
        else:
            print(f"{len(work)} of {shapes} shape(s) warmed up" + ("; some failed (above)" if failed else ""))
    return 1 if failed else 0


def _where(engine: Any) -> str:
    from ryzenai_core.embeddings.cache import NPU_PROVIDER
    from ryzenai_core.embeddings.warmup import warm_shapes

    static = [s for s in warm_shapes(engine) if s is not None]
    if engine.provider == NPU_PROVIDER and static:
        return f"on the NPU; compile cache {engine.cache.vitisai_options(static[0])['cache_dir']}"
    return f"on {engine.provider}: nothing compiles, each session opens once"


def _label(shape: Any) -> str:
    return f"{shape[0]}x{shape[1]}" if shape else "dynamic"


def add_parser(sub: Any) -> None:
    """Register ``warmup`` on the CLI's subparsers."""
    p = sub.add_parser(
        "warmup",
        help="compile the NPU shapes of embedding models and rerankers ahead (minutes a shape, once)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("models", nargs="+", metavar="MODEL", help="embedding or reranker folder, or Hugging Face repo id")
    p.add_argument("--buckets", type=_buckets, help="sequence-length buckets, as the application sets them (128,256)")
    p.add_argument("--config-file", type=Path, help="the VitisAI compile configuration the application passes")
    p.add_argument("--cache-dir", type=Path, help="the engine cache folder the application passes (cache_dir=)")
    p.add_argument("--provider", default="auto", choices=("auto", "npu", "cpu"), help="default: auto (the NPU if any)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_warmup)
