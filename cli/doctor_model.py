"""``ryzenai-llm doctor MODEL``'s checks of a model: the package, its load, a generation, where it ran.

For an LLM package: the package (facts, Git LFS pointers, missing files, path hazards, chat
format, release), a load the way an application loads it (in a worker process), a short greedy
generation with the execution provider that ran it, the load time, time to first token and
tokens/s; a warm (KV reuse) answer compared with a cold one when reuse is on; a prompt longer
than the EP's run length on packages that have one (16K). For an embedding folder: the first
vector of each run shape, timed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ryzenai_core.errors import RyzenAIError
from ryzenai_core.package.runtime import parse_release, runtime_info

from .doctor_report import Report, Status, ms

__all__ = ["check_model"]

_PROMPT = "Say hello in one short sentence."
_REUSE_SYSTEM = (
    "You are a friendly assistant on a laptop. Answer in one short sentence, in plain words, without lists, "
    "code or markup. If a question is unclear, say so briefly. Greet the user warmly, thank them when they "
    "thank you, and say goodbye when they leave. Never repeat the question back to the user."
)


def check_model(report: Report, model: str, *, provider: str | None, kv_reuse: bool, new_tokens: int) -> None:
    """The checks of one model: an LLM package or an embedding folder."""
    from ryzenai_core.embeddings.package import is_embedding_folder
    from ryzenai_core.package.hub import resolve_model

    try:
        path = resolve_model(model)
    except RyzenAIError as exc:
        report.add("package", "fail", str(exc))
        return
    if is_embedding_folder(path):
        _check_embedding(report, path)
    else:
        _check_llm(report, path, provider=provider, kv_reuse=kv_reuse, new_tokens=new_tokens)


def _check_llm(report: Report, path: Path, *, provider: str | None, kv_reuse: bool, new_tokens: int) -> None:
    from ryzenai_core.package.folder import ModelPackage
    from ryzenai_core.prompt.templates import ChatTemplate

    try:
        pkg = ModelPackage.open(path)
        budget = pkg.budget
    except RyzenAIError as exc:
        report.add("package", "fail", str(exc))
        return
    release = f"release {pkg.release} (from {pkg.release_source})" if pkg.release else "release unknown"
    report.add(
        "package",
        "ok",
        f"{pkg.name} ({pkg.path}): {pkg.model_type}, {pkg.mode.value}, {pkg.provider} provider, {release}; "
        f"window {budget.window}, prompt limit {budget.prompt_limit}"
        + (f", {budget.prefill_window} tokens per prefill run" if budget.prefill_window else ""),
    )
    loadable = _check_files(report, pkg)
    warnings = pkg.path_warnings
    if warnings:
        report.add("package path", "warn", " ".join(warnings))
    elif sys.platform == "win32":
        length = len(str(pkg.path / pkg.longest_file)) if pkg.longest_file else len(str(pkg.path))
        report.add("package path", "ok", f"ASCII, longest file path {length} characters")
    else:
        report.add("package path", "ok", "no path limits here (non-ASCII and long paths matter on Windows only)")
    try:
        template = ChatTemplate.for_package(pkg)
    except RyzenAIError as exc:
        report.add("chat format", "fail", str(exc))
    else:
        note = template.format_message or template.fallback_message
        report.add("chat format", "warn" if note else "ok", note or f"{template.family} ({template.source_name})")
    _check_built_for(report, pkg)
    if loadable:
        _run_llm(report, pkg, provider=provider, kv_reuse=kv_reuse, new_tokens=new_tokens)


def _check_files(report: Report, pkg: Any) -> bool:
    """The package-files check; whether loading is worth trying."""
    try:
        pkg.check_loadable()
    except RyzenAIError as exc:
        report.add("package files", "fail", str(exc))
        return False
    cache = [m for m in pkg.missing_files if m.startswith(("cache/", ".cache/"))]
    if cache:
        report.add("package files", "fail", f"missing {', '.join(pkg.missing_files)}: download the package again")
    elif pkg.missing_files:
        report.add(
            "package files",
            "warn",
            f"missing {', '.join(pkg.missing_files)}: AMD's loader compiles it at the first load, into the package "
            "folder (slow); download the package again to avoid that",
        )
    else:
        report.add(
            "package files", "ok", "every file the configs and the NPU file names imply is there, none an LFS pointer"
        )
    return True


def _check_built_for(report: Report, pkg: Any) -> None:
    info = runtime_info()
    if not pkg.is_ryzenai:
        return
    if not (info.ryzenai and info.release and pkg.built_for):
        why = "no Ryzen AI build installed" if not info.ryzenai else "a release is unknown"
        report.add("release match", "skip", f"built for {pkg.built_for or 'an unknown release'}; {why}")
        return
    built, runs = parse_release(pkg.built_for)[:2], parse_release(info.release)[:2]
    if built > runs:
        report.add(
            "release match",
            "fail",
            f"built for Ryzen AI {pkg.built_for}, newer than the installed {info.release}: activate the Ryzen AI "
            f"{pkg.built_for} environment, or use the package built for {info.release}",
        )
    elif built < runs:
        report.add(
            "release match",
            "warn",
            f"built for Ryzen AI {pkg.built_for}, older than the installed {info.release}; AMD ships packages for "
            "each release: prefer the one built for yours",
        )
    else:
        report.add("release match", "ok", f"built for {pkg.built_for}, runs on {info.release}")


def _run_llm(report: Report, pkg: Any, *, provider: str | None, kv_reuse: bool, new_tokens: int) -> None:
    from ryzenai_core.engine.engine import Engine
    from ryzenai_core.messages import ChatMessage, RawPrompt
    from ryzenai_core.options import validated_options

    info = runtime_info()
    if pkg.is_ryzenai and provider is None and not info.ryzenai:
        report.add(
            "NPU load",
            "skip",
            f"{pkg.name} needs AMD's Ryzen AI build of onnxruntime-genai to run on the NPU; found {info.describe()}. "
            "Its plain ONNX weights are run on the CPU (provider='cpu') for the checks below",
        )
        provider = "cpu"
    engine = Engine.get(pkg.path, provider=provider)
    where = f"provider={provider!r}" if provider else "the package's provider"
    try:
        try:
            seconds = engine.load()
        except RyzenAIError as exc:
            report.add("load", "fail", f"{where}: {exc}")
            return
        report.measurements["load_seconds"] = seconds
        report.add("load", "ok", f"{pkg.name} loaded in {seconds:.2f} s ({where}, in a worker process)")

        # With --kv-reuse every call keeps its generator, so that the second turn can continue the first.
        greedy = validated_options(max_new_tokens=new_tokens, temperature=0, **({"kv_reuse": True} if kv_reuse else {}))
        c = engine.generate([ChatMessage("user", _PROMPT)], greedy)
        t = c.timings
        ttft = t.time_to_first_token - t.queued if t and t.time_to_first_token is not None else None
        rate = t.decode_tokens_per_second if t else None
        report.measurements.update(
            {
                "provider": c.provider,
                "ttft_seconds": ttft,
                "decode_tokens_per_second": rate,
                "prompt_tokens": c.usage.prompt_tokens if c.usage else None,
            }
        )
        on_npu = c.provider == "RyzenAI"
        status: Status = "ok" if on_npu or not pkg.is_ryzenai else "warn"
        speed = f"{rate:.1f} tokens/s" if rate else "- tokens/s"
        report.add(
            "generation",
            status,
            f"ran on {c.provider}"
            + ("" if on_npu or not pkg.is_ryzenai else " (not the NPU)")
            + f": {c.usage.completion_tokens if c.usage else 0} tokens, time to first token {ms(ttft)}, {speed}",
        )
        _check_reuse(report, engine, greedy)
        _check_long_prompt(report, engine, pkg, RawPrompt)
    except RyzenAIError as exc:
        report.add("generation", "fail", str(exc))
    finally:
        engine.close()


def _check_reuse(report: Report, engine: Any, greedy: Any) -> None:
    from ryzenai_core.messages import ChatMessage
    from ryzenai_core.options import validated_options

    # A conversation long enough to keep: the engine keeps whole multiples of 64 prompt tokens.
    opening = [ChatMessage("system", _REUSE_SYSTEM), ChatMessage("user", _PROMPT)]
    first = engine.generate(opening, greedy)
    turns = [*opening, ChatMessage("assistant", first.text), ChatMessage("user", "Now say goodbye.")]
    warm = engine.generate(turns, greedy)
    reused = warm.timings.reused_prompt_tokens if warm.timings else 0
    if not reused:
        report.add(
            "KV reuse",
            "skip",
            "off for this package (the default on Ryzen AI packages, whose runtime support is unverified); "
            "`--kv-reuse` turns it on to compare a warm answer with a cold one",
        )
        return
    cold = engine.generate(
        turns, validated_options(max_new_tokens=greedy.max_new_tokens, temperature=0, kv_reuse=False)
    )
    same = warm.token_ids == cold.token_ids
    report.measurements["reused_prompt_tokens"] = reused
    report.add(
        "KV reuse",
        "ok" if same else "fail",
        f"a second turn reused {reused} of {warm.usage.prompt_tokens if warm.usage else '?'} prompt tokens; "
        + (
            "its greedy answer equals a cold run's"
            if same
            else "its greedy answer differs from a cold run's: pass kv_reuse=False"
        ),
    )


def _filler_ids(engine: Any, n: int) -> list[int]:
    text = "The NPU runs precompiled fixed shapes, and long prompts are fed in runs. "
    ids: list[int] = []
    while len(ids) < n:
        text += text
        ids = engine.encode(text)
    return list(ids[:n])


def _check_long_prompt(report: Report, engine: Any, pkg: Any, raw_prompt: Callable[..., Any]) -> None:
    from ryzenai_core.options import validated_options

    budget = pkg.budget
    run = budget.prefill_window
    if not run or budget.prompt_limit <= run + 16:
        report.add("long prompt", "skip", "the package has no run length shorter than its prompt limit")
        return
    n = min(run + 512, budget.prompt_limit - 8)
    c = engine.generate(
        raw_prompt(token_ids=_filler_ids(engine, n)), validated_options(max_new_tokens=4, temperature=0)
    )
    windows = c.plan.prefill_windows if c.plan else 1
    t = c.timings
    report.measurements["long_prompt"] = {
        "prompt_tokens": n,
        "prefill_runs": windows,
        "ttft_seconds": t.time_to_first_token if t else None,
    }
    report.add(
        "long prompt",
        "ok",
        f"{n} tokens (over the {run}-token run length) in {windows} prefill run(s) on {c.provider}, "
        f"time to first token {ms(t.time_to_first_token if t else None)}",
    )


def _check_embedding(report: Report, path: Path) -> None:
    from ryzenai_core.embeddings.embedding import EmbeddingEngine

    try:
        engine = EmbeddingEngine(path)
    except RyzenAIError as exc:
        report.add("embedding model", "fail", str(exc))
        return
    facts = engine.describe()
    report.add(
        "embedding model",
        "ok",
        f"{facts['name']} ({facts['path']}): {facts['dims']} dims, {facts['pooling']} pooling, max length "
        f"{facts['max_length']}, runs on {facts['provider']} with {facts['run_shapes']} shapes",
    )
    shapes = list(engine.buckets) or [None]
    times = {}
    try:
        for bucket in shapes:
            text = _text_of(engine, (bucket or 16) - 2)
            start = time.perf_counter()
            result = engine.embed([text])
            times[str(result.shapes[0][1]) if bucket else "dynamic"] = time.perf_counter() - start
    except RyzenAIError as exc:
        report.add("first vector", "fail", str(exc))
        return
    finally:
        engine.close()
    report.measurements["first_vector_seconds"] = times
    on_npu = facts["provider"] == "VitisAIExecutionProvider"
    report.add(
        "first vector",
        "ok" if on_npu else "warn",
        ", ".join(f"{shape}: {ms(s)}" for shape, s in times.items())
        + f" on {facts['provider']}"
        + ("" if on_npu else " (not the NPU: onnxruntime has no VitisAIExecutionProvider)")
        + (" (the first run of each shape compiles it on the NPU)" if on_npu else ""),
    )


def _text_of(engine: Any, tokens: int) -> str:
    """A text of about ``tokens`` tokens (special tokens included), at most that many."""
    words: list[str] = []
    for word in _words():
        words.append(word)
        if engine.count_tokens([" ".join(words)])[0] > tokens:
            words.pop()
            break
    return " ".join(words) or "a"


def _words() -> Iterator[str]:
    i = 0
    while True:
        yield ("npu", "bucket", "shape", "vector", "token", "model")[i % 6]
        i += 1
