"""Mutation audit: plant plausible one-line bugs and see whether the tests catch them.

Each mutation replaces one exact piece of one line (it must occur exactly once in its file),
runs the few test files that own that behaviour (``pytest -x -q``, with a timeout), and puts the
file back with ``git checkout`` whatever happens. A mutation is *killed* when those tests fail,
*survived* when they pass, and *timeout* when they run past the limit (counted as killed: a hang
is a caught bug, but the table says so).

Run from the repository root, with the working tree clean for the mutated files::

    .venv/bin/python scripts/mutation_audit.py            # every mutation
    .venv/bin/python scripts/mutation_audit.py M07 M12    # some of them
    .venv/bin/python scripts/mutation_audit.py --list     # what each one changes

The output ends with a markdown table (id, where, what, result) and the kill rate.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTEST = [str(ROOT / ".venv" / "bin" / "pytest"), "-x", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"]
TIMEOUT = 300  # seconds per mutation's test run

U = "tests/unit/"
I = "tests/integration/"  # noqa: E741


@dataclass(frozen=True)
class Mutation:
    id: str
    file: str
    old: str
    new: str
    what: str
    tests: tuple[str, ...]


def m(id: str, file: str, old: str, new: str, what: str, *tests: str) -> Mutation:
    return Mutation(id, file, old, new, what, tests)


MUTATIONS: tuple[Mutation, ...] = (
    # ---- core/package: budget and limits
    m(
        "M01",
        "core/package/budget.py",
        "i = bisect.bisect_left(buckets, n)",
        "i = bisect.bisect_right(buckets, n)",
        "a prompt exactly a bucket's length pads to the next bucket",
        U + "test_budget.py",
    ),
    m(
        "M02",
        "core/package/budget.py",
        "clamped = max_new_tokens is not None and granted < max_new_tokens",
        "clamped = max_new_tokens is not None and granted <= max_new_tokens",
        "a request that fits is reported as clamped",
        U + "test_budget.py",
    ),
    m(
        "M03",
        "core/package/budget.py",
        "first = _bucket_for(prompt_tokens + 1, self.decode_buckets)",
        "first = _bucket_for(prompt_tokens, self.decode_buckets)",
        "the first decode step's history leaves out the token it writes",
        U + "test_budget.py",
    ),
    m(
        "M04",
        "core/package/budget.py",
        "return min(max_new_tokens or self.bounded_output_tokens, self.window - 1)",
        "return min(max_new_tokens or self.bounded_output_tokens, self.window)",
        "output_tokens may grant the whole window, leaving no prompt token",
        U + "test_option_edges.py",
        U + "test_budget.py",
    ),
    m(
        "M05",
        "core/package/limits.py",
        "if limit >= window:  # the prompt",
        "if limit > window:  # the prompt",
        "a rai_config prompt limit equal to the window is kept (no room for an answer)",
        U + "test_package.py",
        U + "test_budget.py",
    ),
    # ---- core/generation: stops and streaming
    m(
        "M06",
        "core/generation/stop.py",
        "if n >= self._max_new:",
        "if n > self._max_new:",
        "one token more than max_new_tokens",
        I + "test_core_branches.py",
        I + "test_generation_parts.py",
    ),
    m(
        "M07",
        "core/generation/stop.py",
        "if finish == FinishReason.STOP and self._parser.tool_calls else finish",
        "if self._parser.tool_calls else finish",
        "a cut answer with a tool call says tool_calls, not length",
        I + "test_core_branches.py",
        I + "test_generation_parts.py",
        I + "test_tool_call_json.py",
    ),
    m(
        "M08",
        "core/generation/streaming.py",
        "_, idx, s = min(hits)",
        "_, idx, s = max(hits)",
        "of two stop strings found in one chunk, the later one wins",
        I + "test_streaming.py",
    ),
    m(
        "M09",
        "core/generation/streaming.py",
        "for k in range(min(len(m) - 1, len(text)), best, -1):",
        "for k in range(min(len(m) - 2, len(text)), best, -1):",
        "the longest held prefix of a stop string/marker leaks",
        I + "test_streaming.py",
    ),
    m(
        "M10",
        "core/generation/streaming.py",
        "if self._after_reasoning and not self._content_seen:",
        "if self._after_reasoning:",
        "newlines stripped from every content chunk after </think>",
        I + "test_streaming.py",
    ),
    m(
        "M11",
        "core/generation/streaming.py",
        "if self._max_calls is not None and len(self.tool_calls) > self._max_calls:",
        "if self._max_calls is not None and len(self.tool_calls) > self._max_calls + 1:",
        "parallel_tool_calls=False keeps two calls",
        I + "test_parallel_tool_calls.py",
        I + "test_streaming.py",
    ),
    # ---- core/prompt: formats and structured output
    m(
        "M12",
        "core/prompt/formats.py",
        'arg_keys=("arguments", "parameters"), require_args=False',
        'arg_keys=("arguments", "parameters"), require_args=True',
        "a Qwen call to a tool without arguments is lost",
        U + "test_tool_call_edges.py",
        I + "test_tool_call_json.py",
        I + "test_streaming.py",
    ),
    m(
        "M13",
        "core/prompt/formats.py",
        'while pos < len(body) and (body[pos].isspace() or body[pos] == ";"):',
        "while pos < len(body) and body[pos].isspace():",
        "Llama calls separated by ';' are not calls",
        I + "test_tool_call_json.py",
        I + "test_parallel_tool_calls.py",
    ),
    m(
        "M14",
        "core/prompt/formats.py",
        'return "".join(kept).strip(), calls',
        'return "".join(kept), calls',
        "content around a tool call keeps the block's whitespace",
        U + "test_tool_call_edges.py",
        I + "test_tool_call_json.py",
        I + "test_streaming.py",
    ),
    m(
        "M15",
        "core/prompt/formats.py",
        "elif after == len(text):\n",
        "elif after == len(text) - 1:\n",
        "a last block cut before </tool_call> is not a call",
        U + "test_tool_call_edges.py",
        I + "test_tool_call_json.py",
        I + "test_streaming.py",
    ),
    m(
        "M16",
        "core/prompt/formats.py",
        'return check_family(family) in ("llama3", "qwen3", "chatml")',
        'return check_family(family) in ("qwen3", "chatml")',
        "Llama 3 reported as having no tool-call format",
        U + "test_tool_call_edges.py",
        U + "test_chat_template.py",
        U + "test_chat_ryzenai.py",
    ),
    m(
        "M17",
        "core/prompt/structured.py",
        "room = max_new_tokens - overhead - 1",
        "room = max_new_tokens - overhead + 1",
        "a JSON schema's bound admits values two tokens over the budget",
        U + "test_option_edges.py",
        I + "test_structured_lengths.py",
    ),
    m(
        "M18",
        "core/prompt/structured.py",
        '        if "maxLength" not in schema:\n            schema["maxLength"]',
        '        if True:\n            schema["maxLength"]',
        "the user's own maxLength replaced by the computed bound",
        I + "test_structured_lengths.py",
    ),
    # ---- core/options and vocabulary
    m(
        "M19",
        "core/options.py",
        'return "auto" if value is None else ("required" if value else "none")',
        'return "auto" if value is None else ("none" if value else "required")',
        "tool_choice=True/False swapped",
        U + "test_option_edges.py",
        U + "test_options.py",
        U + "test_chat_ryzenai_options.py",
    ),
    m(
        "M20",
        "core/options.py",
        '_number(float, gt=0, le=1), "nucleus',
        '_number(float, ge=0, le=1), "nucleus',
        "top_p=0 accepted",
        U + "test_options.py",
    ),
    m(
        "M21",
        "core/options.py",
        'out["random_seed"] = options.seed',
        'out["seed"] = options.seed',
        "the seed sent under a name the runtime does not read",
        U + "test_option_edges.py",
        U + "test_options.py",
    ),
    m(
        "M22",
        "core/options.py",
        'return tool_choice not in ("auto", "none")',
        'return tool_choice not in ("auto",)',
        "tool_choice='none' forces a tool call",
        U + "test_options.py",
        U + "test_chat_ryzenai_options.py",
    ),
    m(
        "M23",
        "core/vocabulary.py",
        '    "stop_sequences": "stop",\n',
        "",
        "the stop_sequences alias forgotten",
        U + "test_options.py",
        U + "test_ryzenai_llm.py",
    ),
    m(
        "M24",
        "core/vocabulary.py",
        "if name in out and out[name] != value:",
        "if name in out and out[name] is not value:",
        "an option given twice with equal values refused",
        U + "test_option_edges.py",
        U + "test_options.py",
        U + "test_chat_ryzenai_options.py",
    ),
    # ---- core/embeddings and rerank
    m(
        "M25",
        "core/embeddings/embedding.py",
        "return all(c.isspace() or unicodedata.category(c) in _INVISIBLE for c in text)",
        "return all(c.isspace() for c in text)",
        "a BOM- or zero-width-only text is not blank",
        U + "test_blank_text.py",
    ),
    m(
        "M26",
        "core/embeddings/batches.py",
        "padding = rows * n - real - n",
        "padding = rows * n - real",
        "the new text's own tokens counted as padding",
        U + "test_batch_plan.py",
    ),
    m(
        "M27",
        "core/embeddings/batches.py",
        "if group and (len(group) == batch_size or jump):",
        "if group and (len(group) > batch_size or jump):",
        "runs of batch_size + 1 texts",
        U + "test_batch_plan.py",
    ),
    m(
        "M28",
        "core/rerank/engine.py",
        "if query_tokens >= room:",
        "if query_tokens > room:",
        "a query that fills the pair leaves a zero-token passage",
        I + "test_rerank_edges.py",
        I + "test_rerank.py",
    ),
    m(
        "M29",
        "core/rerank/engine.py",
        "1.0 / (1.0 + np.exp(-logits))",
        "1.0 / (1.0 + np.exp(logits))",
        "sigmoid of the negated logit: scores rank backwards",
        I + "test_rerank.py",
    ),
    m(
        "M30",
        "core/embeddings/embedding.py",
        'if empty and blank == "error":',
        'if empty and blank == "embed":',
        "blank='embed' (the default) refuses blank text",
        I + "test_encoder_surprises.py::test_every_blank_text_embeds_as_the_empty_text_with_a_warning",
        U + "test_blank_text.py",
    ),
    # ---- core/workers
    m(
        "M31",
        "core/workers.py",
        'os.environ.get("RYZENAI_LLM_START_TIMEOUT", "120")',
        'os.environ.get("RYZENAI_LLM_START_TIMEOUT", "12")',
        "a worker start timeout of 12 s (a cold import is slower)",
        U + "test_timeout_defaults.py",
        I + "test_worker_start.py",
        U + "test_nothing_at_import.py",
    ),
    # ---- langchain_ryzenai
    m(
        "M32",
        "langchain_ryzenai/_convert.py",
        "total_tokens=chunk.usage.total_tokens",
        "total_tokens=chunk.usage.completion_tokens",
        "usage total leaves out the prompt",
        U + "test_chat_ryzenai.py",
    ),
    m(
        "M33",
        "langchain_ryzenai/_convert.py",
        'warn_if_cut(chunk, model_name, "max_tokens")',
        "pass",
        "a cut structured value no longer warned",
        U + "test_chat_ryzenai.py",
        I + "test_structured_lengths.py",
    ),
    m(
        "M34",
        "langchain_ryzenai/_convert.py",
        "id=c.id or None, index=i)",
        "id=c.id or None, index=0)",
        "every streamed tool-call chunk at index 0",
        U + "test_face_edges.py",
        U + "test_chat_ryzenai.py",
        I + "test_parallel_tool_calls.py",
    ),
    m(
        "M35",
        "langchain_ryzenai/_convert.py",
        "name = message.name or call_names.get(message.tool_call_id)",
        "name = message.name",
        "a ToolMessage without name loses its tool's name",
        U + "test_chat_ryzenai.py",
        U + "test_content_blocks.py",
    ),
    m(
        "M36",
        "langchain_ryzenai/_convert.py",
        '"cache_read": reused',
        '"cache_read": 0',
        "reused prompt tokens not reported",
        I + "test_langchain_chat.py::test_kv_prefix_reuse_is_reported_as_cache_read",
        U + "test_chat_ryzenai.py",
        U + "test_chat_ryzenai_options.py",
    ),
    # ---- llamaindex_ryzenai
    m(
        "M37",
        "llamaindex_ryzenai/llms.py",
        "if self.context_window > budget.window:",
        "if self.context_window >= budget.window:",
        "context_window equal to the package's window refused",
        U + "test_face_edges.py",
        U + "test_ryzenai_llm.py",
        U + "test_ryzenai_llm_fields.py",
    ),
    m(
        "M38",
        "llamaindex_ryzenai/_convert.py",
        'warn_if_cut(chunk, self.model_name, "max_new_tokens")',
        "pass",
        "a cut structured value no longer warned (LlamaIndex)",
        U + "test_ryzenai_llm.py",
        I + "test_structured_lengths.py",
    ),
    m(
        "M39",
        "llamaindex_ryzenai/_convert.py",
        'name=kwargs.get("name") if role == "tool" else None',
        "name=None",
        "a tool result's tool name dropped",
        U + "test_ryzenai_llm.py",
    ),
    # ---- cli
    m(
        "M40",
        "cli/listing.py",
        '"other_cached_repos": others, "warnings": warnings}',
        '"other_cached_repos": others, "warnings": []}',
        "list --json drops the cache's warnings",
        U + "test_cli_pull_list.py",
    ),
)


def _drop_bytecode(path: Path) -> None:
    for pyc in (path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"):
        pyc.unlink(missing_ok=True)


def _restore(path: Path) -> None:
    subprocess.run(["git", "checkout", "--", str(path.relative_to(ROOT))], cwd=ROOT, check=True)
    _drop_bytecode(path)


def run(mutation: Mutation) -> tuple[str, float, str]:
    path = ROOT / mutation.file
    source = path.read_text(encoding="utf-8")
    if source.count(mutation.old) != 1:
        return "not applied", 0.0, f"{mutation.old!r} occurs {source.count(mutation.old)} times"
    dirty = subprocess.run(["git", "diff", "--quiet", "--", mutation.file], cwd=ROOT).returncode
    if dirty:
        return "not applied", 0.0, f"{mutation.file} has uncommitted changes"
    start = time.monotonic()
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        path.write_text(source.replace(mutation.old, mutation.new), encoding="utf-8")
        _drop_bytecode(path)
        try:
            proc = subprocess.run(
                [*PYTEST, *mutation.tests], cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT
            )
        except subprocess.TimeoutExpired:
            return "timeout", time.monotonic() - start, ""
    finally:
        _restore(path)
    tail = (proc.stdout.strip().splitlines() or [""])[-1]
    if proc.returncode == 0:
        return "survived", time.monotonic() - start, tail
    if proc.returncode == 1:
        return "killed", time.monotonic() - start, tail
    return f"error {proc.returncode}", time.monotonic() - start, tail  # collection error, no tests: still caught


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ids", nargs="*", help="mutation ids to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    args = parser.parse_args()
    chosen = [x for x in MUTATIONS if not args.ids or x.id in args.ids]
    if args.list:
        for x in chosen:
            print(f"{x.id} {x.file}: {x.what}\n    - {x.old!r}\n    + {x.new!r}\n    tests: {' '.join(x.tests)}")
        return 0
    rows = []
    for x in chosen:
        result, seconds, tail = run(x)
        line = _line(x)
        print(f"{x.id} {result:12} {seconds:6.1f}s {x.file}:{line} {x.what} | {tail}", flush=True)
        rows.append((x, line, result))
    print("\n| id | where | what | result |\n| --- | --- | --- | --- |")
    for x, line, result in rows:
        print(f"| {x.id} | `{x.file}:{line}` | {x.what} | {result} |")
    applied = [r for _, _, r in rows if r != "not applied"]
    caught = [r for r in applied if r != "survived"]
    if applied:
        print(f"\nkilled {len(caught)} of {len(applied)} ({100 * len(caught) / len(applied):.0f}%)")
    return 0 if len(caught) == len(applied) else 1


def _line(x: Mutation) -> int:
    source = (ROOT / x.file).read_text(encoding="utf-8")
    at = source.find(x.old)
    return source.count("\n", 0, at) + 1 + x.old[: len(x.old) - len(x.old.lstrip("\n "))].count("\n") if at >= 0 else 0


if __name__ == "__main__":
    sys.exit(main())
