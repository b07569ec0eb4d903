"""Memory and CPU of a LlamaIndex call that is not streamed: one response, against one per token.

    python benchmarks/llamaindex_responses.py [--new-tokens 8000] [--rounds 3] [--json benchmarks/results/llamaindex_responses.json]

``RyzenAILLM.chat`` / ``achat`` (and ``complete`` / ``acomplete``) fold the answer's chunks and
build one ``ChatResponse`` from them. The way they worked before is measured beside them, by the
public streaming calls it was made of: ``chat`` drained ``stream_chat`` keeping the last response
(a response built per token, each holding the whole text so far), ``achat`` collected every
response of ``astream_chat`` (each holding the text so far: memory grows with the square of the
answer's length). All four run the same greedy answer of the Gemma 3 text fixture (its window
holds 16K tokens, and its random weights write until the limit) through the worker process, in
turns, ``--rounds`` times; each is measured by the peak of ``tracemalloc`` over the call (this
process's Python allocations: the worker's are its own) and by this process's CPU time, after
one short call of each (what a first call imports is not counted).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import tracemalloc
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, ChatResponse

from llamaindex_ryzenai import RyzenAILLM

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "tests" / "fixtures" / "models" / "tiny-gemma3-text"
MESSAGES = [ChatMessage(role="user", content="Write a long story about a lighthouse.")]


def measure(call: Callable[[], ChatResponse]) -> tuple[float, float, ChatResponse]:
    """(peak MB of Python allocations during the call, CPU seconds of this process, the response)."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    cpu = time.process_time()
    response = call()
    cpu = time.process_time() - cpu
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20, cpu, response


def methods(llm: RyzenAILLM) -> dict[str, Callable[[], ChatResponse]]:
    async def achat() -> ChatResponse:
        return await llm.achat(MESSAGES)

    async def astream_kept() -> ChatResponse:
        return [r async for r in await llm.astream_chat(MESSAGES)][-1]

    return {
        "chat": lambda: llm.chat(MESSAGES),
        "before: stream_chat, the last kept": lambda: deque(llm.stream_chat(MESSAGES), maxlen=1).pop(),
        "achat": lambda: asyncio.run(achat()),
        "before: astream_chat, all kept": lambda: asyncio.run(astream_kept()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--new-tokens", type=int, default=8000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args()
    llm = RyzenAILLM(model=str(MODEL), max_new_tokens=args.new_tokens, temperature=0, kv_reuse=False)
    llm.engine.load()
    for call in methods(llm.model_copy(update={"max_new_tokens": 8})).values():  # what a first call imports
        call()
    calls = methods(llm)
    rows: dict[str, list[tuple[float, float]]] = {k: [] for k in calls}
    texts: set[str] = set()
    tokens = 0
    for r in range(args.rounds):
        for name, call in calls.items():
            peak, cpu, response = measure(call)
            rows[name].append((peak, cpu))
            texts.add(response.message.content or "")
            tokens = response.raw["usage"]["completion_tokens"] if response.raw else 0
        print(
            f"  round {r + 1}/{args.rounds}: " + ", ".join(f"{k} {v[-1][0]:.1f} MB" for k, v in rows.items()),
            flush=True,
        )
    assert len(texts) == 1, "the calls gave different answers"
    result: dict[str, Any] = {
        "model": MODEL.name,
        "completion_tokens": tokens,
        "answer_chars": len(texts.pop()),
        "rounds": args.rounds,
        "peak_mb": {k: statistics.median(p for p, _ in v) for k, v in rows.items()},
        "cpu_s": {k: statistics.median(c for _, c in v) for k, v in rows.items()},
    }
    peak, cpu = result["peak_mb"], result["cpu_s"]
    print(f"\n{result['model']}: {tokens} tokens, {result['answer_chars']} characters; medians of {args.rounds} rounds")
    print(f"  {'call':<38}{'peak MB':>10}{'CPU s':>10}")
    for k in calls:
        print(f"  {k:<38}{peak[k]:>10.2f}{cpu[k]:>10.3f}")
    for new, old in (("chat", "before: stream_chat, the last kept"), ("achat", "before: astream_chat, all kept")):
        print(f"  {old!r} against {new}: {peak[old] / peak[new]:.1f}x the memory, {cpu[old] / cpu[new]:.1f}x the CPU")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
