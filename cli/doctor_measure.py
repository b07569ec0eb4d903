"""``ryzenai-llm doctor MODEL``'s speed figures, measured as AMD measures them.

AMD's ``model_benchmark`` (onnxruntime-genai's ``benchmark/c``): after the load, 1 warm-up run,
then 5 runs at each of a set of prompt lengths (128, 1024, 2048, ...), 128 generated tokens each;
mean time to first token, tokens per second, peak memory. AMD publishes its figures with the
NPU in performance mode (``xrt-smi configure --pmode performance``) and Windows in "Best
performance"; a laptop on battery or in another mode measures lower, so the power mode and AC
or battery stand beside every figure. The first prefill of each shape after a load is slower
(the runtime loads prefill subgraphs lazily): that is what the warm-up run takes.

A figure more than 30% below AMD's published one for the same package is flagged. ``--quick``
measures one run at the shortest length instead (a smoke test, not a benchmark).
"""

from __future__ import annotations

import re
import statistics
import sys
from dataclasses import dataclass
from typing import Any

from ryzenai_core.errors import RyzenAIError

from . import doctor_npu
from .doctor_report import Report, attempt, ms

__all__ = ["PUBLISHED", "Plan", "Published", "measure", "measurement_plan", "power_context", "second_load"]

#: AMD's generated tokens per run, warm-up runs and measured runs, and prompt lengths.
NEW_TOKENS, WARMUPS, RUNS, LENGTHS = 128, 1, 5, (128, 1024, 2048)
#: A figure below this share of AMD's published one is flagged.
SLOWER = 0.7


@dataclass(frozen=True)
class Published:
    """One of AMD's published figures (Ryzen AI 300 series laptops)."""

    pattern: str
    """Which packages it is for (a regular expression over the package's name, case-insensitive)."""
    label: str
    prompt_tokens: int
    ttft: float
    """Seconds to the first token at ``prompt_tokens``."""
    decode: float
    """Generated tokens per second."""
    memory: float | None = None
    """Peak memory, bytes."""


PUBLISHED = (
    Published(r"phi-3\.5-mini.*npu", "Phi-3.5-mini NPU 4K, Ryzen AI 1.8 on Linux", 128, 0.170, 49.1, 3.54e9),
    Published(r"llama-3\.2-3b.*hybrid", "Llama-3.2-3B hybrid, Ryzen AI 1.7", 1607, 1.64, 31.2),
)


@dataclass(frozen=True)
class Plan:
    """What to measure: each prompt length, runs after warm-ups, tokens generated per run."""

    lengths: tuple[int, ...]
    warmups: int
    runs: int
    new_tokens: int
    second_load: bool

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return dict(self.__dict__)


def published_for(name: str) -> Published | None:
    """AMD's published figure for a package, by its name."""
    return next((p for p in PUBLISHED if re.search(p.pattern, name, re.I)), None)


def measurement_plan(window: int, prompt_limit: int, name: str, *, quick: bool, new_tokens: int | None) -> Plan:
    """AMD's plan for a package of this window and prompt limit: each length that fits with its output.

    The length of AMD's published figure for the package is added when it fits. ``new_tokens``
    (``--max-new-tokens``) replaces the 128 generated tokens.
    """
    tokens = new_tokens or (16 if quick else NEW_TOKENS)
    wanted = list(LENGTHS)
    figure = published_for(name)
    if figure is not None and figure.prompt_tokens not in wanted:
        wanted.append(figure.prompt_tokens)
    fits = sorted(n for n in wanted if n <= prompt_limit and n + tokens <= window)
    if not fits:
        fits = [max(1, min(prompt_limit, window - tokens))]
    if quick:
        return Plan((fits[0],), 0, 1, tokens, False)
    return Plan(tuple(fits), WARMUPS, RUNS, tokens, True)


def power_context() -> dict[str, Any]:
    """The power settings a figure was measured in: the NPU's mode (``xrt-smi``), Windows' mode, AC or battery."""
    platform = doctor_npu.xrt_smi("examine", "-r", "platform")
    return {
        "npu_power_mode": doctor_npu.power_mode(platform) if platform else None,
        "windows_power_mode": doctor_npu.windows_power_mode() if sys.platform == "win32" else None,
        "ac_power": doctor_npu.on_ac_power(),
    }


def describe_power(context: dict[str, Any]) -> str:
    """``NPU mode Performance, on AC`` (what is known of it)."""
    parts = [f"NPU mode {context['npu_power_mode'] or 'unknown (no xrt-smi)'}"]
    if context["windows_power_mode"]:
        parts.append(f"Windows {context['windows_power_mode']}")
    ac = context["ac_power"]
    parts.append("on AC" if ac else ("on battery" if ac is False else "AC or battery unknown"))
    return ", ".join(parts)


def _filler(engine: Any, n: int) -> list[int]:
    text = "The NPU runs precompiled fixed shapes, and long prompts are fed in runs. "
    ids: list[int] = []
    while len(ids) < n:
        text += text
        ids = engine.encode(text)
    return list(ids[:n])


def _stats(values: list[float]) -> dict[str, float | None]:
    return {
        "mean": statistics.fmean(values) if values else None,
        "median": statistics.median(values) if values else None,
    }


def _run_length(engine: Any, n: int, plan: Plan) -> dict[str, Any]:
    """``plan``'s runs at one prompt length: each a whole prefill (no reuse), then exactly its tokens, greedy."""
    ids = _filler(engine, n)
    ttft: list[float] = []
    decode: list[float] = []
    generated: list[int] = []
    for i in range(plan.warmups + plan.runs):
        run = engine.probe(ids, plan.new_tokens, watch=False, exact=True)
        if i < plan.warmups:
            continue
        if run["first_token_seconds"] is not None:
            ttft.append(run["first_token_seconds"])
        if run["decode_tokens_per_second"]:
            decode.append(run["decode_tokens_per_second"])
        generated.append(len(run["tokens"]))
    return {
        "prompt_tokens": n,
        "runs": plan.runs,
        "generated_tokens": generated,
        "ttft_seconds": _stats(ttft),
        "prefill_tokens_per_second": _stats([n / s for s in ttft if s > 0]),
        "decode_tokens_per_second": _stats(decode),
    }


def measure(report: Report, engine: Any, pkg: Any, plan: Plan, context: dict[str, Any]) -> None:
    """Run ``plan`` on the loaded ``engine``: one ``speed`` check per prompt length, AMD's figures, peak memory."""
    power = describe_power(context)
    results: dict[str, Any] = {}
    report.measurements["speed"] = {"plan": plan.to_dict(), "power": context, "by_prompt_length": results}
    kind = "quick run" if plan.runs == 1 and not plan.warmups else f"{plan.runs} runs after {plan.warmups} warm-up"
    for n in plan.lengths:
        try:
            figures = _run_length(engine, n, plan)
        except RyzenAIError as exc:
            report.add(f"speed at {n} tokens", "fail", str(exc))
            continue
        figures["power"] = context
        results[str(n)] = figures
        ttft, prefill, decode = (
            figures["ttft_seconds"],
            figures["prefill_tokens_per_second"],
            figures["decode_tokens_per_second"],
        )
        made = figures["generated_tokens"]
        short = f" (the window held {min(made)})" if made and min(made) < plan.new_tokens else ""
        rate = f"{decode['mean']:.1f} (median {decode['median']:.1f})" if decode["mean"] else "-"
        report.add(
            f"speed at {n} tokens",
            "ok",
            f"{kind}, {plan.new_tokens} tokens generated{short}: time to first token {ms(ttft['mean'])} "
            f"(median {ms(ttft['median'])}), prefill {prefill['mean'] or 0:.0f} tokens/s, decode {rate} tokens/s "
            f"[{power}]",
        )
    pid = engine.worker_pid()
    peak = doctor_npu.peak_memory(pid) if pid else None
    report.measurements["speed"]["worker_peak_memory_bytes"] = peak
    if peak is not None:
        report.add("memory", "ok", f"the worker's peak memory {peak / 1e9:.2f} GB (pid {pid}) [{power}]")
    _compare(report, pkg.name, results, peak, power)


def _compare(report: Report, name: str, results: dict[str, Any], peak: int | None, power: str) -> None:
    figure = published_for(name)
    if figure is None:
        table = "; ".join(
            f"{p.label}: {ms(p.ttft)} at {p.prompt_tokens} tokens, {p.decode} tokens/s" for p in PUBLISHED
        )
        report.add("AMD's figures", "skip", f"AMD publishes none for {name} (published: {table})")
        return
    ours = results.get(str(figure.prompt_tokens))
    if ours is None or ours["ttft_seconds"]["mean"] is None:
        report.add("AMD's figures", "skip", f"{figure.label}: no run at its {figure.prompt_tokens}-token prompt here")
        return
    ttft, decode = ours["ttft_seconds"]["mean"], ours["decode_tokens_per_second"]["mean"]
    slow = []
    if ttft > figure.ttft / SLOWER:
        slow.append(f"time to first token {ms(ttft)} vs AMD's {ms(figure.ttft)}")
    if decode is not None and decode < figure.decode * SLOWER:
        slow.append(f"decode {decode:.1f} vs AMD's {figure.decode} tokens/s")
    report.measurements["speed"]["published"] = {**figure.__dict__, "flagged": slow}
    if slow:
        report.add(
            "AMD's figures",
            "warn",
            f"more than 30% below {figure.label}: {'; '.join(slow)} [{power}]. AMD measures in performance mode on "
            "AC: `xrt-smi configure --pmode performance`, Windows power mode 'Best performance', charger plugged in",
        )
    else:
        mem = f", peak memory {peak / 1e9:.2f} GB vs {figure.memory / 1e9:.2f} GB" if peak and figure.memory else ""
        report.add(
            "AMD's figures",
            "ok",
            f"within 30% of {figure.label}: time to first token {ms(ttft)} vs {ms(figure.ttft)}, decode "
            f"{decode or 0:.1f} vs {figure.decode} tokens/s{mem} [{power}]",
        )


def second_load(report: Report, key: Any, first: float | None) -> None:
    """Load the package again in a new worker: the second load reads what the first compiled or cached."""
    from ryzenai_core.engine.engine import Engine

    engine = Engine(key, "process")
    seconds = attempt(report, "second load", engine.load, engine.close)
    if seconds is None:
        return
    report.measurements["second_load_seconds"] = seconds
    report.add(
        "second load",
        "ok",
        f"{seconds or 0:.2f} s in a new worker, after a first load of {first or 0:.2f} s (the first reads the package "
        "from disk and builds what the runtime caches)",
    )
