"""``ryzenai-llm bench``: time to first token and decode speed at each prefill bucket edge.

On an NPU package the time to first token follows the padded bucket, not the raw prompt
length: a prompt one token past a bucket edge pays for the next bucket. The benchmark
measures prompts exactly at each edge and one token past it, prints a table, writes JSON
for scripts and draws the steps as a PNG chart (needs matplotlib: the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from ryzenai_core.engine.engine import Engine
from ryzenai_core.errors import InvalidRequestError
from ryzenai_core.messages import RawPrompt
from ryzenai_core.options import validated_options

__all__ = ["add_parser", "prompt_lengths", "run"]

_FILLER = (
    "The NPU runs precompiled fixed shapes, so every prompt is padded to the smallest prefill bucket "
    "that holds it, and each decode step runs the token bucket that holds the history. "
)


def ttft_drawstyle(rows: list[dict[str, Any]]) -> str:
    """Steps where the package pads prompts to buckets (time follows the bucket), else a line."""
    return "steps-post" if any(r["prefill_bucket"] for r in rows) else "default"


def prompt_lengths(buckets: tuple[int, ...], limit: int, new_tokens: int) -> list[int]:
    """Prompt lengths to measure: each bucket edge and one past it (or powers of two without buckets)."""
    top = limit - new_tokens
    if buckets:
        points = {n for b in buckets for n in (b, b + 1)}
    else:
        points = {2**k for k in range(5, 15)}
    return sorted(n for n in points if 1 <= n <= top)


def _prompt_ids(engine: Engine, n: int) -> list[int]:
    ids: list[int] = []
    text = _FILLER
    while len(ids) < n:
        ids = engine.encode(text)
        text += _FILLER
    return ids[:n]


#: Execution providers that run a package's fixed prefill shapes (padded to its buckets).
_BUCKET_PROVIDERS = ("RyzenAI",)


def run(engine: Engine, lengths: list[int], new_tokens: int, repeats: int) -> list[dict[str, Any]]:
    """Measure every prompt length; returns one row per length.

    A warm-up call of the first row's shape runs first and is not measured (the first run of a
    shape allocates and, on the NPU, loads it). A bucketed package run on another provider
    (``--provider cpu`` on an NPU package) pads nothing: its rows have no bucket or padding
    (``planned_prefill_bucket`` keeps what the NPU would run).
    """
    opts = validated_options(max_new_tokens=new_tokens, temperature=0, kv_reuse=False)
    if lengths:
        engine.generate(RawPrompt(token_ids=_prompt_ids(engine, lengths[0])), opts)
    rows = []
    for n in lengths:
        ids = _prompt_ids(engine, n)
        ttft, rate = [], []
        plan = None
        padded = False
        for _ in range(repeats):
            c = engine.generate(RawPrompt(token_ids=ids), opts)
            plan = c.plan
            padded = c.provider in _BUCKET_PROVIDERS
            if c.timings and c.timings.time_to_first_token is not None:
                ttft.append(c.timings.time_to_first_token - c.timings.queued)
            if c.timings and c.timings.decode_tokens_per_second:
                rate.append(c.timings.decode_tokens_per_second)
        planned = plan.prefill_bucket if plan else None
        rows.append(
            {
                "prompt_tokens": n,
                "prefill_bucket": planned if padded else None,
                "padding": (plan.padding if padded else 0) if plan else None,
                "planned_prefill_bucket": planned,
                "ttft_ms": 1000 * statistics.median(ttft) if ttft else None,
                "decode_tokens_per_s": statistics.median(rate) if rate else None,
            }
        )
    return rows


def _chart(rows: list[dict[str, Any]], title: str, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise InvalidRequestError(
            "drawing the chart needs matplotlib: pip install 'ryzenai-llm[bench]' (or leave out --png)"
        ) from exc
    xs = [r["prompt_tokens"] for r in rows]
    ys = [r["ttft_ms"] for r in rows]
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    ax.plot(xs, ys, drawstyle=ttft_drawstyle(rows), color="#c00", marker="o", markersize=3, label="time to first token")
    buckets = sorted({r["prefill_bucket"] for r in rows if r["prefill_bucket"]})
    for b in buckets:
        ax.axvline(b, color="#999", linewidth=0.6, linestyle=":")
    ax.set_xlabel("prompt tokens" + (" (dotted: prefill bucket edges)" if buckets else ""))
    ax.set_ylabel("time to first token (ms)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    handles = ax.get_legend_handles_labels()[0]
    if buckets:
        ax2 = ax.twinx()
        padded = [r["prefill_bucket"] for r in rows]
        (line,) = ax2.step(xs, padded, where="post", color="#36c", linewidth=1, label="padded prefill length")
        ax2.set_ylabel("padded prefill length (tokens)")
        handles.append(line)
    ax.legend(handles=handles, loc="upper left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _bench(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from ryzenai_core.models import default_model_path
    from ryzenai_core.package.hub import resolve_model

    path = resolve_model(args.path) if args.path else default_model_path()
    engine = Engine.get(path, provider=args.provider, num_threads=args.threads)
    budget = engine.budget
    lengths = prompt_lengths(budget.prefill_buckets, budget.max_prompt_tokens, args.new_tokens)
    if args.max_prompt:
        lengths = [n for n in lengths if n <= args.max_prompt]
    console = Console(stderr=args.json)
    with console.status(f"loading {engine.package.name} (the first load on an NPU compiles for a while)"):
        engine.load()
    with console.status(f"measuring {len(lengths)} prompt lengths"):
        rows = run(engine, lengths, args.new_tokens, args.repeats)
    result = {
        "package": engine.package.name,
        "mode": engine.package.mode.value,
        "new_tokens": args.new_tokens,
        "rows": rows,
    }
    if args.png:
        _chart(rows, f"{engine.package.name} ({engine.package.mode.value})", Path(args.png))
        result["chart"] = str(args.png)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    table = Table(title=f"{engine.package.name}: {engine.package.mode.value}, {args.new_tokens} new tokens")
    for col in ("prompt tokens", "prefill bucket", "padding", "TTFT ms", "decode tok/s"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            str(r["prompt_tokens"]),
            str(r["prefill_bucket"] or "-"),
            str(r["padding"] if r["padding"] is not None else "-"),
            f"{r['ttft_ms']:.1f}" if r["ttft_ms"] is not None else "-",
            f"{r['decode_tokens_per_s']:.0f}" if r["decode_tokens_per_s"] else "-",
        )
    console.print(table)
    planned = {r["planned_prefill_bucket"] for r in rows if not r["prefill_bucket"]}
    unrun = sorted(b for b in planned if b)
    if unrun:
        console.print(
            f"{engine.package.name}'s prefill buckets ({', '.join(map(str, unrun))}) are the NPU's: on this provider "
            "prompts run at their own length, unpadded; run on the NPU to measure the buckets"
        )
    if args.png:
        console.print(f"chart: {args.png}")
    return 0


def add_parser(sub: Any) -> None:
    """Register ``bench`` on the CLI's subparsers."""
    p = sub.add_parser("bench", help="time to first token and decode speed at each prefill bucket edge")
    p.add_argument("path", nargs="?", help="model folder or Hugging Face repo id (default: the embedded model)")
    p.add_argument("--provider", choices=["cpu", "cuda", "dml"], help="run a plain ONNX package on this provider")
    p.add_argument("--threads", type=int, help="CPU threads for the runtime")
    p.add_argument("--new-tokens", type=int, default=16, help="tokens to generate per prompt (default 16)")
    p.add_argument("--repeats", type=int, default=3, help="runs per prompt length; the median is reported")
    p.add_argument("--max-prompt", type=int, help="measure prompts up to this many tokens only")
    p.add_argument("--png", help="write a chart of TTFT against prompt length to this PNG file")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_bench)
