"""``ryzenai-llm info``: what a model folder is (an LLM package, an embedding model or a reranker).

    ryzenai-llm info [PATH] [--json] [--prompt-tokens N] [--max-new-tokens M]

For an LLM package: mode, provider, release, window and prompt limit, buckets, chat format,
vision, KV reuse and whether it loads here; with ``--prompt-tokens`` the plan of such a prompt.
For an embedding model or a reranker: its files, how it runs, and on the NPU where the compile
cache is, which shapes are compiled and where each ran (the VitisAI pass summary). For a folder of
no layout the plugin runs: what it looks like and what it lacks (exit code 2).
``pull`` shows the same for what it downloaded (:func:`show_info`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ryzenai_core.embeddings.layout import describe_layout, is_encoder_in_genai_layout
from ryzenai_core.embeddings.package import is_embedding_folder
from ryzenai_core.errors import ModelPackageError
from ryzenai_core.models import DEFAULT_MODEL, default_model_path
from ryzenai_core.package.budget import BudgetPlan
from ryzenai_core.package.capabilities import load_problem
from ryzenai_core.package.folder import ModelPackage
from ryzenai_core.package.hub import resolve_model
from ryzenai_core.package.reuse import kv_reuse_policy
from ryzenai_core.package.runtime import ENV_RELEASE, runtime_info
from ryzenai_core.prompt.templates import ChatTemplate
from ryzenai_core.rerank.package import is_rerank_folder

__all__ = ["add_parser", "chat_format", "show_info"]

_ESTIMATED = " (estimated: AMD's generator defaults; the package has no prefill bucket files)"


def _fmt_buckets(values: Sequence[int]) -> str:
    return ", ".join(str(v) for v in values) if values else "none (plain shapes)"


def _fmt_execution(execution: str) -> str:
    return "sessions in worker processes" if execution == "process" else "sessions inline (this process)"


def _fmt_vision(pkg: ModelPackage) -> str:
    parts = pkg.vision_parts
    if parts is None:
        return "no"
    files = [f"{role} {parts[role]}" for role in ("vision", "embedding", "processor") if parts[role]]
    if parts["npu_states"]:
        files.append(f"{len(parts['npu_states'])} NPU vision state file(s)")
    cost = f"{pkg.image_tokens} prompt tokens per image" if pkg.image_tokens else "image token cost unknown"
    return f"yes: {', '.join(files)}; {cost}"


def _fmt_release(pkg: ModelPackage) -> str:
    if not pkg.release:
        text = f"unknown (set {ENV_RELEASE} to choose)"
    else:
        text = f"{pkg.release} (from {pkg.release_source})"
    if pkg.built_for and pkg.built_for != pkg.release:
        text += f"; the package was built for {pkg.built_for}"
    return text


def chat_format(template: ChatTemplate) -> tuple[str, str | None]:
    """The chat format ``info`` and ``doctor`` report: (family, why it is plain text, when it is)."""
    return template.family, template.format_message


def _print_info(pkg: ModelPackage, plan: BudgetPlan | None) -> None:
    b = pkg.budget
    family, note = chat_format(ChatTemplate.for_package(pkg))
    rows = [
        ("package", f"{pkg.name}  ({pkg.path})"),
        ("model type", pkg.model_type),
        ("mode", f"{pkg.mode.value}" + (f", decode on {pkg.token_backend}" if pkg.token_backend else "")),
        ("provider", f"{pkg.provider} ({pkg.layout} layout)"),
        ("Ryzen AI release", _fmt_release(pkg)),
        ("window", f"{b.window} tokens (prompt + output)"),
        ("prompt limit", f"{b.prompt_limit} tokens ({b.limit_reason})"),
        (
            "prefill window",
            f"{b.prefill_window} tokens per prefill run" if b.prefill_window else "whole prompt in one run",
        ),
        ("long prompts", pkg.long_prompts["detail"]),
        ("prefill buckets", _fmt_buckets(b.prefill_buckets) + (_ESTIMATED if b.prefill_buckets_estimated else "")),
        ("decode buckets", _fmt_buckets(b.decode_buckets)),
        ("chat template", pkg.describe()["chat_template"] or "none shipped (family fallback)"),
        ("chat format", f"plain text: {note}" if note else family),
        ("vision", _fmt_vision(pkg)),
        ("sliding window", f"{pkg.sliding_window} tokens (decoder.sliding_window)" if pkg.sliding_window else "none"),
        ("KV reuse", kv_reuse_policy(pkg)["detail"]),
    ]
    if pkg.lfs_pointers:
        rows.append(("LFS pointers", f"{len(pkg.lfs_pointers)} file(s): run `git lfs pull` in {pkg.path}"))
    rows.append(("loads here", _verdict(pkg)))
    if pkg.missing_files:
        rows.append(("missing files", f"{', '.join(pkg.missing_files)} (a partial download: download it again)"))
    if pkg.broken_links:
        gone = ", ".join(pkg.broken_links)
        rows.append(("broken links", f"{gone} (links to files that are gone: {pkg.download_fix})"))
    rows.extend(("path warning", warning) for warning in pkg.path_warnings)
    _print_table(rows)
    if plan is not None:
        print()
        print(f"a prompt of {plan.prompt_tokens} tokens:")
        if plan.prefill_bucket is not None:
            runs = f" in {plan.prefill_windows} prefill runs" if plan.prefill_windows > 1 else ""
            guess = " (an estimate: the package has no prefill bucket files)" if plan.prefill_bucket_estimated else ""
            print(f"  prefill bucket  {plan.prefill_bucket}{runs}, {plan.padding} padding tokens{guess}")
        else:
            print("  prefill         no buckets, no padding")
        clamp = f" (asked {plan.requested_new_tokens}, clamped to fit the window)" if plan.clamped else ""
        print(f"  output          up to {plan.max_new_tokens} new tokens{clamp}")
        if plan.decode_buckets:
            past = (
                f"; the last {plan.decode_past_buckets} tokens of history are past the package's largest bucket"
                if plan.decode_past_buckets
                else ""
            )
            print(f"  decode buckets  {_fmt_buckets(plan.decode_buckets)}{past}")


def _verdict(pkg: ModelPackage) -> str:
    """Whether the package loads here, as far as its files and the installed runtime show."""
    problem = load_problem(pkg)
    return f"no: {problem}" if problem is not None else f"yes (files complete; {runtime_info().describe()})"


def _print_table(rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


#: What a shape's state in the compile cache means for the user.
_STATES = {
    "compiled": "compiled",
    "opened": "opened by warmup (no pass summary written)",
    "partial": "not finished (an interrupted compile?): the next session compiles it again",
    "absent": "not compiled: the first call that needs it compiles it (minutes), or run `ryzenai-llm warmup`",
}


def compile_rows(facts: dict[str, Any]) -> list[tuple[str, str]]:
    """An encoder's compile cache and its shapes, as rows (``info``; ``doctor`` says the same)."""
    cache = facts.get("compile_cache")
    if not cache:
        return [("compile cache", f"none: nothing is compiled on {facts['provider']}")]
    rows = [("compile cache", f"{cache['dir']} (configuration {cache['config_file']})")]
    for shape in cache["shapes"]:
        where = f"; {shape['detail']}" if shape["detail"] else ""
        rows.append((f"  shape {shape['shape']}", f"{_STATES[shape['state']]}{where}"))
    return rows


def _encoder_info(facts: dict[str, Any], as_json: bool, title: str, rows: list[tuple[str, str]]) -> int:
    """Print an encoder engine's facts: as JSON, or as a table (its name, ``rows``, its shapes and provider)."""
    if as_json:
        print(json.dumps(facts, indent=2))
        return 0
    shape = f"static {facts['static_shape']}" if facts["static_shape"] else "dynamic (batch, sequence)"
    run = f"{facts['run_shapes']}" + (f", buckets {_fmt_buckets(facts['buckets'])}" if facts["buckets"] else "")
    small = facts.get("cpu_max_tokens")
    _print_table(
        [
            (title, f"{facts['name']}  ({facts['path']})"),
            *rows,
            ("graph shapes", shape),
            ("provider", f"{facts['provider']}; runs {run}; {_fmt_execution(facts['execution'])}"),
            *([("small inputs", f"up to {small} tokens on a CPU session (cpu_max_tokens)")] if small else []),
            *compile_rows(facts),
        ]
    )
    return 0


def _layout_info(path: Path, as_json: bool, error: str = "") -> int:
    """A folder of no layout the plugin runs: what it looks like and what it lacks; exit code 2."""
    layout = describe_layout(path, error)
    if as_json:
        print(json.dumps(layout.describe(), indent=2))
    else:
        _print_table(layout.rows())
    return 2


def _embedding_info(path: Path, as_json: bool) -> int:
    from ryzenai_core.embeddings.embedding import EmbeddingEngine

    facts = EmbeddingEngine(path).describe()
    query, document = facts["query_instruction"], facts["document_instruction"]
    prompts = f" ({facts['prompts_source']})" if facts["prompts_source"] else ""
    sizes = facts["matryoshka_dims"]
    dims = str(facts["dims"]) + (f"; Matryoshka {sizes} ({facts['matryoshka_source']})" if sizes else "")
    return _encoder_info(
        facts,
        as_json,
        "embedding model",
        [
            ("onnx file", f"{facts['onnx_file']} ({facts['model_type'] or 'unknown type'}), output {facts['output']}"),
            ("dims", dims),
            ("pooling", f"{facts['pooling']} ({facts['pooling_source']})"),
            ("pipeline", facts["pipeline"]),
            ("normalise", "yes (L2)" if facts["normalize"] else "no"),
            ("max length", f"{facts['max_length']} tokens ({facts['max_length_source']}); longer texts are truncated"),
            ("query instruction", (repr(query) + prompts) if query else "none"),
            ("document prompt", (repr(document) + prompts) if document else "none"),
        ],
    )


def _rerank_info(path: Path, as_json: bool) -> int:
    from ryzenai_core.rerank.engine import RerankEngine

    facts = RerankEngine(path).describe()
    kind = f"{facts['architecture'] or 'unknown'} ({facts['model_type'] or 'unknown type'}), one label"
    return _encoder_info(
        facts,
        as_json,
        "reranker",
        [
            ("architecture", kind),
            ("onnx file", f"{facts['onnx_file']}: inputs {', '.join(facts['inputs'])}; output {facts['output']}"),
            ("pairs", f"{facts['pair_template']}; only the passage is truncated"),
            ("max length", f"{facts['max_length']} tokens a pair ({facts['max_length_source']})"),
            ("scores", f"{facts['activation']} of the logit ({facts['activation_source']})"),
        ],
    )


def _info(args: argparse.Namespace) -> int:
    path = resolve_model(args.path) if args.path else default_model_path()
    return show_info(path, as_json=args.json, prompt_tokens=args.prompt_tokens, max_new_tokens=args.max_new_tokens)


def show_info(
    path: Path, *, as_json: bool = False, prompt_tokens: int | None = None, max_new_tokens: int | None = None
) -> int:
    """What ``info`` prints for a model folder (``pull`` prints it too); returns the exit code."""
    if is_rerank_folder(path):
        return _rerank_info(path, as_json)
    if is_embedding_folder(path):
        return _embedding_info(path, as_json)
    if is_encoder_in_genai_layout(path):  # read as an embedding folder if it can be
        try:
            return _embedding_info(path, as_json)
        except ModelPackageError as exc:
            return _layout_info(path, as_json, str(exc))
    if not (path / "genai_config.json").is_file():
        return _layout_info(path, as_json)
    pkg = ModelPackage.open(path)
    plan = pkg.budget.plan(prompt_tokens, max_new_tokens) if prompt_tokens is not None else None
    if as_json:
        out: dict[str, Any] = pkg.describe()
        problem = load_problem(pkg)
        out["loads_here"] = {"ok": problem is None, "problem": None if problem is None else str(problem)}
        out["chat_format"], out["chat_format_note"] = chat_format(ChatTemplate.for_package(pkg))
        if plan is not None:
            p = plan.to_dict()
            out["plan"] = {
                k: p[k]
                for k in (
                    "prompt_tokens",
                    "prefill_bucket",
                    "padding",
                    "prefill_windows",
                    "max_new_tokens",
                    "requested_new_tokens",
                    "clamped",
                    "decode_buckets",
                    "prefill_bucket_estimated",
                    "decode_past_buckets",
                )
            }
        print(json.dumps(out, indent=2))
    else:
        _print_info(pkg, plan)
    return 0


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of tokens") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number of tokens")
    return value


def add_parser(sub: Any) -> None:
    """Register ``info`` on the CLI's subparsers."""
    info = sub.add_parser(
        "info",
        help="describe a model package (mode, limits, buckets, cost of a prompt), an embedding model or a reranker",
    )
    info.add_argument("path", nargs="?", help=f"model folder (default: the embedded {DEFAULT_MODEL})")
    info.add_argument("--json", action="store_true", help="print one JSON object")
    info.add_argument("--prompt-tokens", type=_positive, metavar="N", help="plan a prompt of N tokens")
    info.add_argument(
        "--max-new-tokens", type=_positive, metavar="M", help="output tokens wanted (default: all that fit)"
    )
    info.set_defaults(func=_info)
