"""``ryzenai-llm doctor [MODEL] [--json]``: will this run, and is it on the NPU?

Without a model it reports the machine (:mod:`.doctor_machine`: the interpreter, the runtimes,
distributions that overwrite each other, the Ryzen AI EP library, the release, the NPU and its
driver, Linux's and Windows' settings); with one it also reports the model (:mod:`.doctor_model`:
the package and its load; :mod:`.doctor_run`: where the work ran, a long prompt's answer and
logits, guidance, KV reuse; :mod:`.doctor_measure`: speed as AMD measures it, beside the power
mode; or an embedding folder's first vectors, or a reranker's first score). ``--adapter FILE``
(repeatable) checks a LoRA adapter against the model (:mod:`.doctor_adapters`).

Every check is ``ok``, ``warn``, ``fail`` or ``skip`` (it cannot be checked here, and the
detail says why); the command exits 1 when a check fails. ``--json`` prints
``{"checks": [{"name", "status", "detail"}], "system": {...}, "measurements": {...}}``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from .doctor_adapters import check_adapters
from .doctor_machine import check_system
from .doctor_model import check_model
from .doctor_report import Report

__all__ = ["add_parser", "run"]


def run(
    model: str | None,
    *,
    provider: str | None = None,
    kv_reuse: bool = False,
    new_tokens: int | None = None,
    quick: bool = False,
    adapters: Sequence[str] = (),
) -> Report:
    """Every check, in order: the machine, then ``model`` when given, then each of ``adapters`` on it.

    ``new_tokens`` replaces the tokens generated per run (16 for the first answer, AMD's 128 for the
    speed runs and the KV reuse comparison); ``quick`` measures one short run instead of AMD's plan;
    ``adapters`` are ``.onnx_adapter`` files to check against the model.
    """
    report = Report()
    check_system(report)
    if model is not None:
        check_model(report, model, provider=provider, kv_reuse=kv_reuse, new_tokens=new_tokens, quick=quick)
    check_adapters(report, model, adapters, provider)
    return report


_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


def _doctor(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=args.json)
    with console.status("checking (a first load on an NPU compiles for a while)"):
        report = run(
            args.model,
            provider=args.provider,
            kv_reuse=args.kv_reuse,
            new_tokens=args.max_new_tokens,
            quick=args.quick,
            adapters=args.adapter or (),
        )
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        return 1 if report.failed else 0
    table = Table(title="ryzenai-llm doctor", show_lines=False)
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("detail", overflow="fold")
    for c in report.checks:
        table.add_row(c.name, f"[{_STYLE[c.status]}]{c.status}[/]", c.detail)
    console.print(table)
    counts = {s: sum(c.status == s for c in report.checks) for s in _STYLE}
    console.print(", ".join(f"{n} {s}" for s, n in counts.items()))
    return 1 if report.failed else 0


def add_parser(sub: Any) -> None:
    """Register ``doctor`` on the CLI's subparsers."""
    p = sub.add_parser("doctor", help="check this machine (and a model): will it run, and is it on the NPU?")
    p.add_argument("model", nargs="?", help="a package or embedding folder, embedded model or Hugging Face repo id")
    p.add_argument("--provider", choices=["cpu", "cuda", "dml"], help="run the model on this provider instead")
    p.add_argument("--kv-reuse", action="store_true", help="turn KV reuse on to compare a warm answer with a cold one")
    p.add_argument(
        "--max-new-tokens",
        type=int,
        help="tokens generated per run (default: 16 for the first answer, AMD's 128 for the speed and KV reuse runs)",
    )
    p.add_argument("--quick", action="store_true", help="one short speed run instead of AMD's 1 warm-up + 5 runs")
    p.add_argument(
        "--adapter",
        action="append",
        metavar="FILE",
        help="a LoRA adapter (.onnx_adapter) to check against the model: it loads, and a run with it set works "
        "(repeatable)",
    )
    p.add_argument("--json", action="store_true", help='print {"checks": [{"name", "status", "detail"}], ...}')
    p.set_defaults(func=_doctor)
