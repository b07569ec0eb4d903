"""``ryzenai-llm doctor MODEL``'s checks of a model: the package, its load, and what runs on it.

For an LLM package: the package (facts, one prompt limit, Git LFS pointers, missing files
and broken links, path hazards, chat format, the release it was built for against the
runtime's), a load the way an application loads it (in a worker process), then the checks
and measurements on the loaded model (:mod:`.doctor_run`, :mod:`.doctor_measure`), and a
second load. A package the runtime here cannot run on the NPU is checked on the CPU (its
plain ONNX weights), and says so. For an embedding folder: the first vector of each run
shape, timed; for a reranker (a cross-encoder): how it pairs texts, its score activation and
a first score, timed. For both, on the NPU: where the compile cache is, which shapes are
compiled, and where each shape's session ran (the VitisAI pass summary: "VitisAI requested,
ran on the CPU" fails). A folder of no layout the plugin runs: what it looks like and lacks.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ryzenai_core.errors import RyzenAIError

from . import doctor_measure, doctor_run
from .doctor_report import Report, Status, attempt, ms

__all__ = ["check_model"]


def check_model(
    report: Report, model: str, *, provider: str | None, kv_reuse: bool, new_tokens: int | None, quick: bool
) -> None:
    """The checks of one model: an LLM package, an embedding folder or a reranker."""
    from ryzenai_core.embeddings.package import is_embedding_folder
    from ryzenai_core.package.hub import resolve_model
    from ryzenai_core.rerank.package import is_rerank_folder

    try:
        path = resolve_model(model)
    except RyzenAIError as exc:
        report.add("package", "fail", str(exc))
        return
    from ryzenai_core.embeddings.layout import describe_layout, is_encoder_in_genai_layout

    if is_rerank_folder(path):
        _check_reranker(report, path)
    elif is_embedding_folder(path):
        _check_embedding(report, path)
    elif not (path / "genai_config.json").is_file() or is_encoder_in_genai_layout(path):
        layout = describe_layout(path)
        missing = "; ".join(layout.missing) or "nothing the closest layout needs"
        report.add("package", "fail", f"{path} is {layout.looks_like}; missing: {missing}. {layout.hint}")
    else:
        _check_llm(report, path, provider=provider, kv_reuse=kv_reuse, new_tokens=new_tokens, quick=quick)


def _check_llm(
    report: Report, path: Path, *, provider: str | None, kv_reuse: bool, new_tokens: int | None, quick: bool
) -> None:
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
        report.add("package path", "ok", f"longest file path {length} characters; nothing the native loader refuses")
    else:
        report.add("package path", "ok", "no path limits here (non-ASCII and long paths matter on Windows only)")
    try:
        template = ChatTemplate.for_package(pkg)
    except RyzenAIError as exc:
        report.add("chat format", "fail", str(exc))
    else:
        note = template.format_message or template.fallback_message
        report.add("chat format", "warn" if note else "ok", note or f"{template.family} ({template.source_name})")
    _check_release_match(report, pkg)
    if loadable:
        provider = _choose_provider(report, pkg, provider)
        _run_llm(report, pkg, provider=provider, kv_reuse=kv_reuse, new_tokens=new_tokens, quick=quick)


def _check_files(report: Report, pkg: Any) -> bool:
    """The package-files check; whether loading is worth trying."""
    try:
        pkg.check_loadable()
    except RyzenAIError as exc:
        report.add("package files", "fail", str(exc))
        return False
    npu = [m for m in pkg.missing_files if not m.endswith(".state")]
    if npu:
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
            "package files",
            "ok",
            "every file the configs, the ONNX graphs and the NPU file names imply is there, none an LFS pointer",
        )
    return True


def _check_release_match(report: Report, pkg: Any) -> None:
    from ryzenai_core.package.capabilities import release_problem, runtime_release

    if not pkg.is_ryzenai:
        return
    runs, source = runtime_release()
    if not (pkg.built_for and runs):
        why = "the runtime's release is unknown" if pkg.built_for else "its name says no release"
        report.add("release match", "skip", f"built for {pkg.built_for or 'an unknown release'}; {why}")
        return
    problem = release_problem(pkg)
    if problem is not None:
        report.add("release match", "fail", problem)
    else:
        report.add("release match", "ok", f"built for {pkg.built_for}, runs on Ryzen AI {runs} ({source})")


def _choose_provider(report: Report, pkg: Any, provider: str | None) -> str | None:
    """The package's own provider when this runtime can run it on the NPU; else the CPU, with the ``NPU load`` check."""
    from ryzenai_core.package.capabilities import load_problem, release_problem

    if not pkg.is_ryzenai or provider is not None:
        return provider
    problem = load_problem(pkg)
    if problem is None:
        return None
    npu = any(d.get("runs_llm_packages") is not False for d in report.system.get("npu", {}).get("devices", []))
    mismatch = release_problem(pkg) is not None
    report.add(
        "NPU load",
        "fail" if npu or mismatch else "skip",
        f"{problem} The checks below run its plain ONNX weights on the CPU (provider='cpu')",
    )
    return "cpu"


def _run_llm(
    report: Report, pkg: Any, *, provider: str | None, kv_reuse: bool, new_tokens: int | None, quick: bool
) -> None:
    from ryzenai_core.engine.engine import Engine

    engine = Engine.get(pkg.path, provider=provider)
    where = f"provider={provider!r}" if provider else "the package's provider"
    budget = pkg.budget
    plan = doctor_measure.measurement_plan(
        budget.window, budget.prompt_limit, pkg.name, quick=quick, new_tokens=new_tokens
    )
    try:
        try:
            first = engine.load()
        except RyzenAIError as exc:
            report.add("load", "fail", f"{where}: {exc}")
            return
        report.measurements["load_seconds"] = first
        report.add("load", "ok", f"{pkg.name} loaded in {first or 0:.2f} s ({where}, in a worker process)")
        c = doctor_run.generation(report, engine, pkg, new_tokens or 16)
        doctor_run.check_where(report, engine, pkg, provider, c.provider)
        doctor_measure.measure(report, engine, pkg, plan, doctor_measure.power_context())
        doctor_run.check_needle(report, engine, pkg)
        doctor_run.check_guidance(report, engine)
        doctor_run.check_reuse(report, engine, new_tokens or (16 if quick else doctor_measure.NEW_TOKENS), kv_reuse)
        doctor_run.check_long_prompt(report, engine, pkg)
    except RyzenAIError as exc:
        report.add("generation", "fail", str(exc))
        return
    finally:
        engine.close()
    if plan.second_load:
        doctor_measure.second_load(report, engine.key, first)


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
    _check_compile_cache(report, facts)
    where: dict[str, Any] = {}

    def first_vectors() -> dict[str, float]:
        times = {}
        shapes: list[int | None] = [*engine.buckets] or [None]
        for bucket in shapes:
            text = _text_of(engine, (bucket or 16) - 2)
            start = time.perf_counter()
            result = engine.embed([text])
            times[str(result.shapes[0][1]) if bucket else "dynamic"] = time.perf_counter() - start
            where.update(result.where)
        return times

    times = attempt(report, "first vector", first_vectors, engine.close)
    if times is None:
        return
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
    _check_where(report, where)


def _check_reranker(report: Report, path: Path) -> None:
    """A cross-encoder: how it pairs a query and a passage, its score activation, and a first score, timed."""
    from ryzenai_core.rerank.engine import RerankEngine

    try:
        engine = RerankEngine(path)
        facts = engine.describe()
    except RyzenAIError as exc:
        report.add("reranker", "fail", str(exc))
        return
    _check_compile_cache(report, facts)
    report.add(
        "reranker",
        "ok",
        f"{facts['name']} ({facts['path']}): {facts['architecture'] or facts['model_type'] or 'cross-encoder'}, "
        f"pairs as {facts['pair_template']}, scores are the {facts['activation']} of its logit "
        f"({facts['activation_source']}), max length {facts['max_length']} tokens a pair; runs on "
        f"{facts['provider']} with {facts['run_shapes']} shapes",
    )
    passages = ["The NPU runs precompiled fixed shapes.", "Cats sleep for most of the day."]

    def first_score() -> tuple[Any, float]:
        start = time.perf_counter()
        result = engine.rerank("What does the NPU run?", passages)
        return result, time.perf_counter() - start

    scored = attempt(report, "first score", first_score, engine.close)
    if scored is None:
        return
    result, seconds = scored
    report.measurements["first_score_seconds"] = seconds
    report.measurements["scores"] = result.scores
    on_npu = facts["provider"] == "VitisAIExecutionProvider"
    scores = ", ".join(f"{s:.3f}" for s in result.scores)
    report.add(
        "first score",
        "ok" if on_npu else "warn",
        f"2 passages scored in {ms(seconds)} ({scores}) on {facts['provider']}, shapes {result.shapes}"
        + ("" if on_npu else " (not the NPU: onnxruntime has no VitisAIExecutionProvider)"),
    )
    _check_where(report, result.where)


def _check_compile_cache(report: Report, facts: dict[str, Any]) -> None:
    """Where an NPU encoder's compiles go and which of its shapes are compiled (nothing on another provider)."""
    cache = facts.get("compile_cache")
    if not cache:
        return
    shapes = cache["shapes"]
    done = [s["shape"] for s in shapes if s["state"] in ("compiled", "opened")]
    todo = [s["shape"] for s in shapes if s["state"] not in ("compiled", "opened")]
    detail = f"{cache['dir']} (configuration {cache['config_file']}): compiled {', '.join(done) or 'none'}"
    if todo:
        detail += f"; not yet {', '.join(todo)} (the first call compiles each, minutes; or `ryzenai-llm warmup`)"
    report.add("compile cache", "ok", detail)
    report.measurements["compile_cache"] = cache


def _check_where(report: Report, where: dict[str, Any]) -> None:
    """Where each shape the check ran on really ran: the VitisAI pass summary's verdict (NPU sessions only)."""
    report.measurements["where_it_ran"] = where
    for shape, placed in where.items():
        if placed["provider"] != "VitisAIExecutionProvider":
            continue
        ran_on = placed["ran_on"]
        status: Status = "fail" if ran_on == "cpu" else "ok" if ran_on in ("npu", "partial") else "warn"
        report.add(f"where it ran ({shape})", status, placed["detail"])


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
